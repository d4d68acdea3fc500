#include "bench/init_bench.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "bench/anchor_pairs.h"
#include "bench/bench_util.h"
#include "strata/isa.h"
#include "strata/normal.h"

#if STRATA_HAVE_TORCH
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ATen.h>  // not torch/torch.h: a lighter unit to compile
#endif

namespace strata::bench {
namespace {

// Seconds for `threads` threads to each draw options.values values (thread t: stream t).
template <class Draw>
double Timed(int threads, Draw draw) {
  const double t0 = NowSeconds();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(draw, t);
  for (auto& th : pool) th.join();
  return NowSeconds() - t0;
}

}  // namespace

int RunInitBench(const InitBenchOptions& o) {
#if STRATA_HAVE_TORCH
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::vector<float>> bufs(cores, std::vector<float>(o.values));
  std::vector<at::Tensor> tensors;
  for (auto& b : bufs) tensors.push_back(at::from_blob(b.data(), {static_cast<int64_t>(o.values)}, at::kFloat));
  for (auto& b : bufs) FillNormal(b, 0, 1, 0);  // fault the pages in before any timing
  // Variant x threads: 0 LibTorch 1 thread, 1 FillNormal 1 thread, 2 LibTorch all, 3 FillNormal all.
  std::vector<double> rate[4];
  for (int r = 0; r < o.rounds; ++r) {
    for (int v = 0; v < 4; ++v) {
      const int threads = v < 2 ? 1 : cores;
      const double s = Timed(threads, [&, v, r](int t) {
        if (v % 2 == 0) {
          at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(1000 * r + t);
          tensors[t].normal_(0.0, 0.02, gen);
        } else {
          FillNormal(bufs[t], 0.0f, 0.02f, NormalStreamKey(r, t));
        }
      });
      rate[v].push_back(static_cast<double>(o.values) * threads / s / 1e9);
    }
  }
  const AnchorPairs pairs{"threads", {"1", std::to_string(cores)}, "LibTorch normal_", "FillNormal",
                          {"libtorch_1", "fill_normal_1", "libtorch_all", "fill_normal_all"}, {"ratio_1", "ratio_all"}};
  if (o.json) {
    nlohmann::json j = {{"values_per_thread", o.values}, {"rounds", o.rounds}, {"threads", cores},
                        {"isa", IsaName(ActiveIsa())}};
    PrintAnchorPairs(pairs, rate, &j);
    return 0;
  }
  fmt::print("bench init: {} fp32 values per thread, {} interleaved rounds, kernels use {}\n", o.values, o.rounds,
             IsaName(ActiveIsa()));
  PrintAnchorPairs(pairs, rate, nullptr);
  fmt::print("median (min-max); LibTorch: a generator per thread (its normal_ is serial mt19937); FillNormal: a "
             "stream per thread\n");
  return 0;
#else
  (void)o;
  fmt::print(stderr, "bench init: built without LibTorch (STRATA_WITH_TORCH=OFF): no anchor to compare with\n");
  return 1;
#endif
}

}  // namespace strata::bench
