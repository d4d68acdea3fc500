#include "bench/io_bench.h"

#include <omp.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "bench/host_copy.h"
#include "bench/io_point.h"
#include "strata/log.h"

namespace strata::bench {
namespace {

// Everything `bench io` prints, measured.
struct IoBenchFigures {
  uint64_t bytes = 0;
  std::string engine;
  bool direct_io = false, fio = false, pinned = false;
  Summary store_write, store_read, fio_write, fio_read, fixed_write, fixed_read;
  Summary store_mixed, fio_mixed;  // a reader and a writer at once, GB/s of both together
  double memcpy_1thread = 0, memcpy_all = 0, xxh3 = 0, huge_fraction = 0;
  size_t memcpy_bytes = 0, region_bytes = 0;
  int threads = 1;
  uint64_t resubmissions = 0;
};

// The interleaved rounds: write then read each round, the store against both fio flavours.
Status MeasureRounds(IoPoint& point, const IoBenchOptions& o, bool fio, IoBenchFigures* f) {
  const FioFlavour flavours[] = {FioFlavour::kDefaults, FioFlavour::kFixedBuffers};
  const std::span<const FioFlavour> anchors = fio ? std::span<const FioFlavour>(flavours) : std::span<const FioFlavour>();
  IoSamples w, r, both;
  for (int round = 0; round < o.rounds; ++round) {
    STRATA_RETURN_IF_ERROR(point.Round(IoDirection::kWrite, round, anchors, &w));
    STRATA_RETURN_IF_ERROR(point.Round(IoDirection::kRead, round, anchors, &r));
    STRATA_RETURN_IF_ERROR(point.MixedRound(round, fio, &both));
    if (!o.json)
      std::fprintf(stderr, "  round %d: store write %.2f read %.2f both %.2f GB/s%s\n", round + 1, w.store.back(),
                   r.store.back(), both.store.back(),
                   fio ? fmt::format("; fio write {:.2f} read {:.2f}, both (+fixedbufs) {:.2f} GB/s", w.fio.back(),
                                     r.fio.back(), both.fio.back())
                             .c_str()
                       : "");
  }
  f->store_write = Summarize(w.store), f->store_read = Summarize(r.store);
  f->fio_write = Summarize(w.fio), f->fio_read = Summarize(r.fio);
  f->store_mixed = Summarize(both.store), f->fio_mixed = Summarize(both.fio);
  f->fixed_write = Summarize(w.fio_fixed), f->fixed_read = Summarize(r.fio_fixed);
  return Status();
}

// Pinned memcpy (two halves of the pool's region), xxh3 alone, huge-page share.
void MeasureHost(const PinnedPool& pool, const IoBenchOptions& o, IoBenchFigures* f) {
  auto region = pool.region();
  const size_t half = region.size() / 2 / 4096 * 4096;
  f->threads = omp_get_max_threads();
  f->memcpy_bytes = half;
  f->region_bytes = region.size();
  f->memcpy_1thread = MemcpyGbps(region.data(), region.data() + half, half, 1);
  f->memcpy_all = MemcpyGbps(region.data(), region.data() + half, half, f->threads);
  // What verifying a read costs on its own: xxh3 over one tensor, in the thread that waits.
  f->xxh3 = ChecksumGbps(region.data(), o.tensor_bytes);
  f->huge_fraction = static_cast<double>(HugePageBytes(region.data(), region.size())) / region.size();
  f->pinned = pool.pinned();
}

void PrintJson(const IoBenchOptions& o, const IoBenchFigures& f) {
  nlohmann::json j;
  auto opt = [&](double v) { return f.fio ? nlohmann::json(v) : nlohmann::json(nullptr); };
  auto ratio = [&](const Summary& a, const Summary& b) { return opt(b.median > 0 ? a.median / b.median : 0); };
  j["bytes"] = f.bytes;
  j["block_size"] = o.block;
  j["queue_depth"] = o.queue_depth;
  j["rounds"] = o.rounds;
  j["engine"] = f.engine;
  j["direct_io"] = f.direct_io;
  j["checksums"] = o.checksums;
  j["write_gbps"] = f.store_write.median;
  j["read_gbps"] = f.store_read.median;
  j["write_gbps_min"] = f.store_write.min;
  j["write_gbps_max"] = f.store_write.max;
  j["read_gbps_min"] = f.store_read.min;
  j["read_gbps_max"] = f.store_read.max;
  j["fio_write_gbps"] = opt(f.fio_write.median);
  j["fio_read_gbps"] = opt(f.fio_read.median);
  j["write_ratio_vs_fio"] = ratio(f.store_write, f.fio_write);
  j["read_ratio_vs_fio"] = ratio(f.store_read, f.fio_read);
  j["read_write_at_once_gbps"] = f.store_mixed.median;
  j["fio_fixed_read_write_at_once_gbps"] = opt(f.fio_mixed.median);
  j["read_write_at_once_ratio_vs_fio_fixed"] = ratio(f.store_mixed, f.fio_mixed);
  j["fio_fixed_write_gbps"] = opt(f.fixed_write.median);
  j["fio_fixed_read_gbps"] = opt(f.fixed_read.median);
  j["write_ratio_vs_fio_fixed"] = ratio(f.store_write, f.fixed_write);
  j["read_ratio_vs_fio_fixed"] = ratio(f.store_read, f.fixed_read);
  j["pinned_memcpy_gbps_1thread"] = f.memcpy_1thread;
  j["pinned_memcpy_gbps_all_threads"] = f.memcpy_all;
  j["threads"] = f.threads;
  j["pinned"] = f.pinned;
  j["huge_page_fraction"] = f.huge_fraction;
  j["checksum_gbps_1thread"] = f.xxh3;
  j["resubmissions"] = f.resubmissions;
  std::printf("%s\n", j.dump(2).c_str());
}

void PrintTable(const IoBenchOptions& o, const IoBenchFigures& f) {
  Table t({"sequential, " + HumanBytes(f.bytes), "strata GB/s", "fio io_uring GB/s", "strata / fio",
           "fio +fixedbufs GB/s", "strata / that"});
  auto ratio = [&](const Summary& a, const Summary& b) { return f.fio ? fmt::format("{:.2f}", a.median / b.median) : "-"; };
  auto cell = [&](const Summary& s, const char* none) { return f.fio ? Format(s) : std::string(none); };
  t.Row({"write", Format(f.store_write), cell(f.fio_write, "(no fio)"), ratio(f.store_write, f.fio_write),
         cell(f.fixed_write, "-"), ratio(f.store_write, f.fixed_write)});
  t.Row({"read", Format(f.store_read), cell(f.fio_read, "(no fio)"), ratio(f.store_read, f.fio_read),
         cell(f.fixed_read, "-"), ratio(f.store_read, f.fixed_read)});
  // What a step whose states live on NVMe gets: its update reads some states while writing others.
  t.Row({"read + write at once", Format(f.store_mixed), "-", "-", cell(f.fio_mixed, "(no fio)"),
         ratio(f.store_mixed, f.fio_mixed)});
  t.Print(stdout);
  std::printf("median (min-max) of %d interleaved rounds; block %s, queue depth %u, %s engine, checksums %s\n", o.rounds,
              HumanBytes(o.block).c_str(), o.queue_depth, f.engine.c_str(), o.checksums ? "on" : "off");
  std::printf("pinned memcpy (%s, %s): %.1f GB/s on 1 thread, %.1f GB/s on %d threads\n",
              HumanBytes(f.memcpy_bytes).c_str(), f.pinned ? "mlock'd" : "pageable", f.memcpy_1thread, f.memcpy_all,
              f.threads);
  std::printf("store buffers: %s, %.0f%% on huge pages%s; checksum alone (xxh3, 1 thread): %.1f GB/s\n",
              HumanBytes(f.region_bytes).c_str(), 100 * f.huge_fraction,
              o.small_pages ? " (--small-pages)" : f.huge_fraction < 0.5 ? " (THP off? 1 MiB requests may be split)" : "",
              f.xxh3);
}

}  // namespace

int RunIoBench(const IoBenchOptions& o) {
  auto fail = [](const Status& s) {
    LogError("bench io: {}", s.ToString());
    return 1;
  };
  if (o.block == 0 || o.block % 4096 || o.tensor_bytes % o.block)
    return fail(InvalidArgument("--block must be a multiple of 4096 dividing the tensor size ({} bytes)", o.tensor_bytes));
  // (Two tensors at least: the pass of both at once reads one half while writing the other.)
  if (o.size < 2 * o.tensor_bytes)
    return fail(InvalidArgument("--size must be at least {} bytes", 2 * o.tensor_bytes));

  auto pool = MakeBenchPool(StoreBuffersFor(o.block, o.queue_depth, o.tensor_bytes), o.tensor_bytes,
                            o.small_pages ? HostPages::kSmall : HostPages::kHuge);
  if (!pool.ok()) return fail(pool.status());
  IoPointSettings settings{o.dir, o.size, o.block, o.queue_depth, o.tensor_bytes, o.checksums,
                           EngineKindFromName(o.engine)};
  auto point = IoPoint::Open(settings, pool->get());
  if (!point.ok()) return fail(point.status());
  NvmeTier& tier = (*point)->tier();

  IoBenchFigures f;
  f.bytes = (*point)->bytes();
  f.engine = tier.engine_name();
  f.direct_io = tier.direct_io();
  f.fio = o.run_fio && HaveFio();
  if (!o.json)
    std::fprintf(stderr, "bench io: %s in %s, block %s, queue depth %u, %s engine%s, %d rounds\n",
                 HumanBytes(f.bytes).c_str(), tier.folder().c_str(), HumanBytes(o.block).c_str(), o.queue_depth,
                 tier.engine_name(), tier.direct_io() ? " + O_DIRECT" : " (buffered)", o.rounds);
  if (Status s = MeasureRounds(**point, o, f.fio, &f); !s.ok()) return fail(s);
  f.resubmissions = tier.stats().resubmissions;
  MeasureHost(**pool, o, &f);
  o.json ? PrintJson(o, f) : PrintTable(o, f);
  return 0;
}

}  // namespace strata::bench
