// MeasureGpuCopies in a CPU build: nothing to measure, and nothing of CUDA linked.
#include "bench/gpu_links.h"

namespace strata::bench {

StatusOr<GpuCopyFigures> MeasureGpuCopies(const GpuLinkOptions&) {
  return Error(StatusCode::kUnavailable, "GPU rows: no GPU in a CPU build (configure with -DSTRATA_CUDA=ON)");
}

}  // namespace strata::bench
