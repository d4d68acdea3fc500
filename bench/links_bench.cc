#include "bench/links_bench.h"

#include <omp.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "bench/bench_util.h"
#include "bench/gpu_links.h"
#include "bench/host_copy.h"
#include "bench/io_point.h"
#include "bench/links_report.h"
#include "strata/log.h"

namespace strata::bench {
namespace {

constexpr uint64_t kNvmeTensorBytes = 64ull << 20;

// Pinned (PinnedPool, mlock'd, huge pages) against pageable (heap) memcpy, on 1 thread and on
// all, alternating which goes first each round.
StatusOr<std::vector<LinkRow>> HostCopyRows(const LinksOptions& o) {
  STRATA_ASSIGN_OR_RETURN(auto pool, PinnedPool::Create(2, o.copy_bytes, MakeMlockPinner()));
  PinnedBuffer a = pool->Acquire(), b = pool->Acquire();
  std::unique_ptr<std::byte[]> c(new std::byte[o.copy_bytes]), d(new std::byte[o.copy_bytes]);
  for (std::byte* p : {a.data(), b.data(), c.get(), d.get()}) std::memset(p, 1, o.copy_bytes);
  const int all = omp_get_max_threads();
  std::vector<LinkRow> rows;
  for (int threads : {1, all}) {
    std::vector<double> pinned, pageable;
    for (int r = 0; r < o.rounds; ++r) {
      for (int k = 0; k < 2; ++k) {
        if ((k == 0) == (r % 2 == 0)) pinned.push_back(MemcpyGbps(a.data(), b.data(), o.copy_bytes, threads, 3));
        else pageable.push_back(MemcpyGbps(c.get(), d.get(), o.copy_bytes, threads, 3));
      }
    }
    const char* unit = threads == 1 ? "thread" : "threads";
    rows.push_back({fmt::format("host memcpy, pinned{}, {} {}", pool->pinned() ? "" : " [NOT page-locked]", threads, unit),
                    Summarize(pinned).median, "", fmt::format("memcpy, pageable, {} {}", threads, unit),
                    Summarize(pageable).median, std::nullopt, "none stated"});
  }
  return rows;
}

// Write and read through the tier at one setting, against fio at the same setting.
StatusOr<std::vector<LinkRow>> NvmeRows(const LinksOptions& o) {
  const uint64_t tensor = std::min(kNvmeTensorBytes, o.nvme_bytes / o.block * o.block);
  STRATA_ASSIGN_OR_RETURN(auto pool, MakeBenchPool(StoreBuffersFor(o.block, o.queue_depth, tensor), tensor,
                                                   HostPages::kHuge));
  STRATA_ASSIGN_OR_RETURN(auto point, IoPoint::Open({o.dir, o.nvme_bytes, o.block, o.queue_depth, tensor}, pool.get()));
  const bool fio = o.run_fio && HaveFio();
  const FioFlavour anchor[] = {FioFlavour::kFixedBuffers};
  const std::span<const FioFlavour> sides = fio ? std::span<const FioFlavour>(anchor) : std::span<const FioFlavour>();
  STRATA_RETURN_IF_ERROR(point->Prepare(fio));
  IoSamples w, r;
  for (int round = 0; round < o.rounds; ++round) {
    STRATA_RETURN_IF_ERROR(point->Round(IoDirection::kWrite, round, sides, &w));
    STRATA_RETURN_IF_ERROR(point->Round(IoDirection::kRead, round, sides, &r));
  }
  const std::optional<PcieLink> link = BlockDevicePcieLink(o.dir);
  const std::string physical = link ? link->Describe() : "none stated";
  const std::optional<double> physical_gbps = link ? std::optional<double>(link->gbps()) : std::nullopt;
  const std::string setting = fmt::format("{}, qd {}", BlockLabel(o.block), o.queue_depth);
  const std::string fio_name = fio ? "fio +fixedbufs, same setting" : "(no fio)";
  auto fio_median = [&](const IoSamples& s) { return fio ? std::optional<double>(Summarize(s.fio_fixed).median) : std::nullopt; };
  return std::vector<LinkRow>{
      {fmt::format("NVMe write via the tier ({})", setting), Summarize(w.store).median, "", fio_name, fio_median(w),
       physical_gbps, physical},
      {fmt::format("NVMe read via the tier ({})", setting), Summarize(r.store).median, "", fio_name, fio_median(r),
       physical_gbps, physical}};
}

}  // namespace

int RunLinksBench(const LinksOptions& o) {
  auto fail = [](const Status& s) {
    LogError("bench links: {}", s.ToString());
    return 1;
  };
  if (o.block == 0 || o.block % 4096 || kNvmeTensorBytes % o.block)
    return fail(InvalidArgument("--block must be a multiple of 4096 dividing {} bytes", kNvmeTensorBytes));
  if (o.nvme_bytes < o.block) return fail(InvalidArgument("--nvme-size must be at least one block"));
  if (!o.json)
    std::fprintf(stderr, "bench links: host copies of %s, NVMe passes of %s under %s, %d interleaved rounds each\n",
                 HumanBytes(o.copy_bytes).c_str(), HumanBytes(o.nvme_bytes).c_str(), o.dir.c_str(), o.rounds);
  auto host = HostCopyRows(o);
  if (!host.ok()) return fail(host.status());
  auto nvme = NvmeRows(o);
  if (!nvme.ok()) return fail(nvme.status());
  GpuLinkOptions g;
  g.bytes = o.copy_bytes;
  g.rounds = o.rounds;
  const StatusOr<GpuCopyFigures> gpu = MeasureGpuCopies(g);
  if (!gpu.ok() && gpu.status().code() != StatusCode::kUnavailable) return fail(gpu.status());
  std::vector<LinkRow> rows = std::move(*host);
  rows.insert(rows.end(), nvme->begin(), nvme->end());
  for (LinkRow& r : GpuLinkRows(gpu)) rows.push_back(std::move(r));
  if (o.json) {
    nlohmann::ordered_json j = LinksJson(rows);
    j["rounds"] = o.rounds;
    j["gpu"] = gpu.ok() ? nlohmann::ordered_json(gpu->device_name) : nlohmann::ordered_json(nullptr);
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  PrintLinkTable(rows, stdout);
  std::printf("medians of %d interleaved rounds; ratio = GB/s / anchor GB/s%s\n", o.rounds,
              gpu.ok() ? fmt::format("; GPU: {}", gpu->device_name).c_str() : "");
  return 0;
}

}  // namespace strata::bench
