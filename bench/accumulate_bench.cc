#include "bench/accumulate_bench.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "bench/anchor_pairs.h"
#include "bench/bench_util.h"
#include "strata/cpu_adam.h"
#include "strata/isa.h"

#if STRATA_HAVE_TORCH
#include <ATen/ATen.h>  // not torch/torch.h: a lighter unit to compile
#include <ATen/Parallel.h>
#endif

namespace strata::bench {

int RunAccumulateBench(const AccumulateBenchOptions& o) {
#if STRATA_HAVE_TORCH
  const auto n = static_cast<int64_t>(o.values);
  const int threads = at::get_num_threads();
  const float scale = 0.5f;
  at::Tensor part = at::randn({n}), acc32 = at::zeros({n}), acc16 = at::zeros({n}, at::kBFloat16);
  const std::span<const float> p(part.data_ptr<float>(), o.values);
  const std::span<float> a32(acc32.data_ptr<float>(), o.values);
  const std::span<uint16_t> a16(reinterpret_cast<uint16_t*>(acc16.data_ptr()), o.values);
  // Variants: 0 LibTorch fp32, 1 ours fp32, 2 LibTorch bf16, 3 ours bf16.
  auto run = [&](int v) {
    switch (v) {
      case 0: acc32.add_(part, scale); break;
      case 1: AccumulateGradient(a32, p, scale, false, {.num_threads = threads}); break;
      case 2: acc16.add_(part, scale); break;
      default: AccumulateGradient(a16, p, scale, false, {.num_threads = threads}); break;
    }
  };
  for (int v = 0; v < 4; ++v) run(v);  // pages in, pools warm
  std::vector<double> rate[4];
  for (int r = 0; r < o.rounds; ++r) {
    for (int v = 0; v < 4; ++v) {
      const double t0 = NowSeconds();
      run(v);
      rate[v].push_back(static_cast<double>(o.values) / (NowSeconds() - t0) / 1e9);
    }
  }
  const AnchorPairs pairs{"accumulator", {"fp32", "bf16"}, "LibTorch add_", "AccumulateGradient",
                          {"libtorch_fp32", "strata_fp32", "libtorch_bf16", "strata_bf16"}, {"ratio_fp32", "ratio_bf16"}};
  if (o.json) {
    nlohmann::json j = {{"values", o.values}, {"rounds", o.rounds}, {"threads", threads}, {"isa", IsaName(ActiveIsa())}};
    PrintAnchorPairs(pairs, rate, &j);
    return 0;
  }
  fmt::print("bench accumulate: {} elements, acc += {} x fp32 part, {} interleaved rounds, {} threads, kernels use {}\n",
             o.values, scale, o.rounds, threads, IsaName(ActiveIsa()));
  PrintAnchorPairs(pairs, rate, nullptr);
  fmt::print("median (min-max) over the rounds\n");
  return 0;
#else
  (void)o;
  fmt::print(stderr, "bench accumulate: built without LibTorch (STRATA_WITH_TORCH=OFF): no anchor to compare with\n");
  return 1;
#endif
}

}  // namespace strata::bench
