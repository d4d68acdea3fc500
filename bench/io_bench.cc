#include "bench/io_bench.h"

#include <omp.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include <xxhash.h>

#include "bench/bench_util.h"
#include "strata/log.h"
#include "strata/nvme_tier.h"
#include "strata/pinned_pool.h"

namespace strata::bench {
namespace {

struct Pass {
  std::vector<double> gbps;
};

// One sequential pass over all extents, cycling through the pool's buffers: a buffer is
// reused only after the ticket that last used it completed (the store's normal pattern).
StatusOr<double> StorePass(NvmeTier& tier, const std::vector<ExtentId>& extents, PinnedPool& pool, bool write,
                           uint64_t tensor_bytes) {
  std::vector<PinnedBuffer> buffers;
  for (size_t i = 0; i < pool.buffer_count(); ++i) buffers.push_back(pool.Acquire());
  std::vector<Ticket> last(buffers.size());
  Status first;
  const double t0 = NowSeconds();
  for (size_t i = 0; i < extents.size(); ++i) {
    const size_t b = i % buffers.size();
    Status s = last[b].Wait();
    if (!s.ok() && first.ok()) first = s;
    std::span<std::byte> mem(buffers[b].data(), tensor_bytes);
    last[b] = write ? tier.Write(extents[i], mem) : tier.Read(extents[i], mem);
  }
  for (auto& t : last) {
    Status s = t.Wait();
    if (!s.ok() && first.ok()) first = s;
  }
  const double dt = NowSeconds() - t0;
  if (!first.ok()) return first;
  return static_cast<double>(extents.size() * tensor_bytes) / dt / 1e9;
}

// fio with the io_uring engine on the same folder, size, block and depth. Returns GB/s.
// `fixed`: also registered buffers and file, as the store uses (fio's strongest io_uring
// setting); otherwise fio's io_uring defaults.
StatusOr<double> FioPass(const std::string& file, const IoBenchOptions& o, bool write, bool fixed) {
  const std::string cmd = fmt::format(
      "exec fio --name=strata-anchor --filename='{}' --size={} --bs={} --iodepth={} --ioengine=io_uring {}--direct=1 "
      "--rw={} --numjobs=1 --group_reporting --output-format=json 2>&1",
      file, o.size, o.block, o.queue_depth, fixed ? "--fixedbufs --registerfiles " : "", write ? "write" : "read");
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return ErrnoError(errno, "cannot run fio");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  const size_t brace = out.find('{');
  if (rc != 0 || brace == std::string::npos)
    return Error(StatusCode::kInternal, "fio failed (exit {}): {}", rc, out.substr(0, 500));
  try {
    auto j = nlohmann::json::parse(out.substr(brace));
    const double bw = j["jobs"][0][write ? "write" : "read"]["bw_bytes"].get<double>();
    return bw / 1e9;
  } catch (const std::exception& e) {
    return Error(StatusCode::kInternal, "cannot parse fio's JSON: {}", e.what());
  }
}

// memcpy between two pinned buffers on `threads` threads; GB/s of bytes copied.
double MemcpyGbps(std::byte* dst, const std::byte* src, size_t bytes, int threads) {
  const int reps = 8;
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const double t0 = NowSeconds();
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      const size_t chunk = (bytes / nt + 4095) / 4096 * 4096;
      const size_t begin = std::min(bytes, chunk * t), end = std::min(bytes, begin + chunk);
      std::memcpy(dst + begin, src + begin, end - begin);
    }
    best = std::max(best, static_cast<double>(bytes) / (NowSeconds() - t0) / 1e9);
  }
  return best;
}

// xxh3-64 (the tier's checksum) over `bytes` on one thread; best of a few, GB/s.
double ChecksumGbps(const std::byte* data, size_t bytes) {
  double best = 0;
  uint64_t sink = 0;
  for (int r = 0; r < 5; ++r) {
    const double t0 = NowSeconds();
    sink ^= XXH3_64bits(data, bytes);
    best = std::max(best, static_cast<double>(bytes) / (NowSeconds() - t0) / 1e9);
  }
  return sink == 42 ? best + 1e-9 : best;  // keeps the hash from being optimised away
}

bool HaveFio() { return std::system("command -v fio >/dev/null 2>&1") == 0; }

}  // namespace

int RunIoBench(const IoBenchOptions& o) {
  auto fail = [](const Status& s) {
    LogError("bench io: {}", s.ToString());
    return 1;
  };
  if (o.block == 0 || o.block % 4096 || o.tensor_bytes % o.block)
    return fail(InvalidArgument("--block must be a multiple of 4096 dividing the tensor size ({} bytes)", o.tensor_bytes));
  if (o.size < o.tensor_bytes) return fail(InvalidArgument("--size must be at least {} bytes", o.tensor_bytes));
  const size_t tensors = o.size / o.tensor_bytes;
  const uint64_t bytes = tensors * o.tensor_bytes;

  // Enough buffers to keep queue_depth blocks in flight, plus one being refilled.
  const size_t in_flight_tensors = (static_cast<uint64_t>(o.queue_depth) * o.block + o.tensor_bytes - 1) / o.tensor_bytes;
  auto pool_or = PinnedPool::Create(std::max<size_t>(3, in_flight_tensors + 2), o.tensor_bytes, MakeMlockPinner(),
                                    o.small_pages ? HostPages::kSmall : HostPages::kHuge);
  if (!pool_or.ok()) return fail(pool_or.status());
  PinnedPool& pool = **pool_or;
  {
    std::mt19937_64 rng(42);
    auto* w = reinterpret_cast<uint64_t*>(pool.region().data());
    for (size_t i = 0; i < pool.region().size() / 8; ++i) w[i] = rng();
  }

  NvmeTierOptions to;
  to.dir = o.dir;
  to.block_size = o.block;
  to.queue_depth = o.queue_depth;
  to.verify_checksums = o.checksums;
  to.engine = o.engine == "uring" ? IoEngineKind::kUring : o.engine == "pread" ? IoEngineKind::kPread : IoEngineKind::kAuto;
  to.registered_buffers = pool.Regions();
  auto tier_or = NvmeTier::Open(to);
  if (!tier_or.ok()) return fail(tier_or.status());
  NvmeTier& tier = **tier_or;
  std::vector<ExtentId> extents;
  for (size_t i = 0; i < tensors; ++i) {
    auto e = tier.Allocate(fmt::format("bench.{}", i), o.tensor_bytes);
    if (!e.ok()) return fail(e.status());
    extents.push_back(*e);
  }

  const bool fio = o.run_fio && HaveFio();
  const std::string fio_file = tier.folder() + "/fio.bin";
  std::vector<double> sw, sr, fw, fr, xw, xr;  // store, fio defaults, fio with fixed buffers
  if (!o.json)
    std::fprintf(stderr, "bench io: %s in %s, block %s, queue depth %u, %s engine%s, %d rounds\n",
                 HumanBytes(bytes).c_str(), tier.folder().c_str(), HumanBytes(o.block).c_str(), o.queue_depth,
                 tier.engine_name(), tier.direct_io() ? " + O_DIRECT" : " (buffered)", o.rounds);
  for (int r = 0; r < o.rounds; ++r) {
    // Interleaved, and the order alternates between rounds (store first, then fio first):
    // the VM's host may cache recently written data, which must not favour either side.
    const bool store_first = r % 2 == 0;
    for (int op = 0; op < 2; ++op) {
      const bool write = op == 0;
      for (int k = 0; k < 3; ++k) {
        const int side = store_first ? k : 2 - k;  // 0 store, 1 fio defaults, 2 fio fixed buffers
        if (side == 0) {
          auto v = StorePass(tier, extents, pool, write, o.tensor_bytes);
          if (!v.ok()) return fail(v.status());
          (write ? sw : sr).push_back(*v);
        } else if (fio) {
          auto f = FioPass(fio_file, o, write, side == 2);
          if (!f.ok()) return fail(f.status());
          (side == 1 ? (write ? fw : fr) : (write ? xw : xr)).push_back(*f);
        }
      }
    }
    if (!o.json)
      std::fprintf(stderr, "  round %d: store write %.2f read %.2f GB/s%s\n", r + 1, sw.back(), sr.back(),
                   fio ? fmt::format("; fio write {:.2f} read {:.2f} GB/s", fw.back(), fr.back()).c_str() : "");
  }
  std::filesystem::remove(fio_file);

  // Pinned memcpy: two halves of the pool's region.
  auto region = pool.region();
  const size_t half = region.size() / 2 / 4096 * 4096;
  const int all = omp_get_max_threads();
  const double cp1 = MemcpyGbps(region.data(), region.data() + half, half, 1);
  const double cpn = MemcpyGbps(region.data(), region.data() + half, half, all);
  // What verifying a read costs on its own: xxh3 over one tensor, in the thread that waits.
  const double xxh3 = ChecksumGbps(region.data(), o.tensor_bytes);
  const double huge_fraction = static_cast<double>(HugePageBytes(region.data(), region.size())) / region.size();

  const Summary SW = Summarize(sw), SR = Summarize(sr), FW = Summarize(fw), FR = Summarize(fr);
  const Summary XW = Summarize(xw), XR = Summarize(xr);
  const NvmeTierStats st = tier.stats();
  if (o.json) {
    nlohmann::json j;
    auto opt = [&](bool have, double v) { return have ? nlohmann::json(v) : nlohmann::json(nullptr); };
    j["bytes"] = bytes;
    j["block_size"] = o.block;
    j["queue_depth"] = o.queue_depth;
    j["rounds"] = o.rounds;
    j["engine"] = tier.engine_name();
    j["direct_io"] = tier.direct_io();
    j["checksums"] = o.checksums;
    j["write_gbps"] = SW.median;
    j["read_gbps"] = SR.median;
    j["write_gbps_min"] = SW.min;
    j["write_gbps_max"] = SW.max;
    j["read_gbps_min"] = SR.min;
    j["read_gbps_max"] = SR.max;
    j["fio_write_gbps"] = opt(fio, FW.median);
    j["fio_read_gbps"] = opt(fio, FR.median);
    j["write_ratio_vs_fio"] = opt(fio, FW.median > 0 ? SW.median / FW.median : 0);
    j["read_ratio_vs_fio"] = opt(fio, FR.median > 0 ? SR.median / FR.median : 0);
    j["fio_fixed_write_gbps"] = opt(fio, XW.median);
    j["fio_fixed_read_gbps"] = opt(fio, XR.median);
    j["write_ratio_vs_fio_fixed"] = opt(fio, XW.median > 0 ? SW.median / XW.median : 0);
    j["read_ratio_vs_fio_fixed"] = opt(fio, XR.median > 0 ? SR.median / XR.median : 0);
    j["pinned_memcpy_gbps_1thread"] = cp1;
    j["pinned_memcpy_gbps_all_threads"] = cpn;
    j["threads"] = all;
    j["pinned"] = pool.pinned();
    j["huge_page_fraction"] = huge_fraction;
    j["checksum_gbps_1thread"] = xxh3;
    j["resubmissions"] = st.resubmissions;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  Table t({"sequential, " + HumanBytes(bytes), "strata GB/s", "fio io_uring GB/s", "strata / fio",
           "fio +fixedbufs GB/s", "strata / that"});
  auto ratio = [&](const Summary& a, const Summary& b) { return fio ? fmt::format("{:.2f}", a.median / b.median) : "-"; };
  t.Row({"write", Format(SW), fio ? Format(FW) : "(no fio)", ratio(SW, FW), fio ? Format(XW) : "-", ratio(SW, XW)});
  t.Row({"read", Format(SR), fio ? Format(FR) : "(no fio)", ratio(SR, FR), fio ? Format(XR) : "-", ratio(SR, XR)});
  t.Print(stdout);
  std::printf("median (min-max) of %d interleaved rounds; block %s, queue depth %u, %s engine, checksums %s\n", o.rounds,
              HumanBytes(o.block).c_str(), o.queue_depth, tier.engine_name(), o.checksums ? "on" : "off");
  std::printf("pinned memcpy (%s, %s): %.1f GB/s on 1 thread, %.1f GB/s on %d threads\n",
              HumanBytes(half).c_str(), pool.pinned() ? "mlock'd" : "pageable", cp1, cpn, all);
  std::printf("store buffers: %s, %.0f%% on huge pages%s; checksum alone (xxh3, 1 thread): %.1f GB/s\n",
              HumanBytes(region.size()).c_str(), 100 * huge_fraction,
              o.small_pages ? " (--small-pages)" : huge_fraction < 0.5 ? " (THP off? 1 MiB requests may be split)" : "",
              xxh3);
  return 0;
}

}  // namespace strata::bench
