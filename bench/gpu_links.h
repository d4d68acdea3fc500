// The GPU rows of `strata bench links`: pinned host <-> device copies through Strata's copy
// path (cuda::Transfer: block-sized cudaMemcpyAsync on dedicated streams, ordered by events)
// against one raw cudaMemcpyAsync of the same pinned buffer, pageable copies against pinned
// ones, and the raw pinned copy against the PCIe link read from sysfs.
//
// MeasureGpuCopies is defined by bench/cuda/gpu_copies.cc in a CUDA build (-DSTRATA_CUDA=ON)
// and by bench/gpu_copies_absent.cc otherwise, so a CPU build needs no CUDA toolkit;
// GpuLinkRows turns either outcome into the same rows (absent ones say why).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/links_report.h"
#include "bench/pcie_link.h"
#include "strata/status.h"

namespace strata::bench {

struct GpuLinkOptions {
  size_t bytes = 256ull << 20;  // per copy
  size_t block = 64ull << 20;   // Strata's path copies in blocks of this size (as the store moves shards)
  int rounds = 5;               // interleaved; medians
  int device = 0;
};

struct GpuCopyFigures {  // GB/s over the rounds
  Summary store_h2d, store_d2h;        // cuda::Transfer, pinned
  Summary raw_h2d, raw_d2h;            // one cudaMemcpyAsync, pinned
  Summary pageable_h2d, pageable_d2h;  // one cudaMemcpyAsync from / to pageable memory
  bool pinned = false;                 // the pool was page-locked (cudaHostRegister)
  std::string device_name;
  std::optional<PcieLink> pcie;        // read after the copies, while the link is up
};

// kUnavailable (with the reason) in a CPU build or without a usable device.
StatusOr<GpuCopyFigures> MeasureGpuCopies(const GpuLinkOptions& options);

// The six GPU rows from a measurement, or marked absent with its status's message.
std::vector<LinkRow> GpuLinkRows(const StatusOr<GpuCopyFigures>& figures);

}  // namespace strata::bench
