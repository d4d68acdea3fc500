#include "bench/machine_rates.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "bench/io_point.h"
#include "strata/cpu_adam.h"
#include "strata/dtype.h"

#if STRATA_HAVE_TORCH
#include <ATen/Parallel.h>
#include <torch/types.h>
#include <torch/utils.h>

#include "src/model/model.h"
#endif

namespace strata::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds per call of `run`: once unmeasured (pages in, caches warm), then the best of calls
// until `budget_s` has passed (at least two, at most eight).
template <class F>
double SecondsPerCall(F&& run, double budget_s) {
  run();
  double best = 1e30, spent = 0;
  for (int i = 0; i < 8 && (i < 2 || spent < budget_s); ++i) {
    const auto t0 = Clock::now();
    run();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, s);
    spent += s;
  }
  return best;
}

// The NVMe tier at the config's aio setting: 512 MB passes, write then read, the better of two.
Status MeasureNvme(const TrainConfig& cfg, MachineRates* r) {
  const std::string dir = cfg.offload_optimizer.device == OffloadDevice::kNvme ? cfg.offload_optimizer.nvme_path
                                                                              : cfg.offload_param.nvme_path;
  const uint64_t tensor = 64ull << 20;
  const uint32_t block = cfg.aio.block_size;
  if (block == 0 || tensor % block) return InvalidArgument("aio.block_size {} does not divide 64 MiB", block);
  STRATA_ASSIGN_OR_RETURN(auto pool, MakeBenchPool(StoreBuffersFor(block, cfg.aio.queue_depth, tensor), tensor,
                                                   HostPages::kHuge));
  IoPointSettings s;
  s.dir = dir;
  s.size = 512ull << 20;
  s.block = block;
  s.queue_depth = cfg.aio.queue_depth;
  s.tensor_bytes = tensor;
  STRATA_ASSIGN_OR_RETURN(auto point, IoPoint::Open(s, pool.get()));
  STRATA_RETURN_IF_ERROR(point->Prepare());
  for (int round = 0; round < 2; ++round) {
    STRATA_ASSIGN_OR_RETURN(double w, point->StorePass(IoDirection::kWrite));
    STRATA_ASSIGN_OR_RETURN(double rd, point->StorePass(IoDirection::kRead));
    r->nvme_write = std::max(r->nvme_write, w * 1e9);
    r->nvme_read = std::max(r->nvme_read, rd * 1e9);
  }
  return Status();
}

// CPU Adam: one fused AdamW pass over 16 M parameters with the compute dtype's copy, on the
// optimizer's threads.
double MeasureAdam(const TrainConfig& cfg) {
  const size_t n = size_t{16} << 20;
  std::vector<float> p(n, 0.5f), m(n, 0.f), v(n, 0.f), g(n, 1e-3f);
  std::vector<uint16_t> half(cfg.compute_dtype == DType::kF32 ? 0 : n);
  AdamSpans spans{.params = p, .exp_avg = m, .exp_avg_sq = v, .grad = g, .half_out = half};
  AdamHyperParams hp;
  hp.weight_decay = cfg.weight_decay;
  hp.step = 2;
  const AdamOptions threads{.num_threads = cfg.optimizer_threads};
  const double s = SecondsPerCall([&] { AdamStep(hp, spans, threads).IgnoreError(); }, 0.3);
  return static_cast<double>(n) / s;
}

#if STRATA_HAVE_TORCH
torch::ScalarType ScalarOf(DType d) {
  return d == DType::kBF16 ? torch::kBFloat16 : d == DType::kF16 ? torch::kFloat16 : torch::kFloat32;
}

// One layer of the config's model, forward (again for the recomputation) and backward, at the
// micro-batch shape (at most 2048 tokens): FLOP/s as the step's FLOP count (step_time.cc) has it.
double MeasureCompute(const TrainConfig& cfg) {
  const model::ModelSpec spec(cfg.model);
  const model::ModelConfig& mc = cfg.model;
  std::shared_ptr<model::Block> layer = model::MakeBlock(spec, 1);
  layer->to(ScalarOf(cfg.compute_dtype));
  const int64_t seq = std::min<int64_t>(mc.seq_len, 2048);
  const int64_t batch = std::clamp<int64_t>(2048 / seq, 1, cfg.micro_batch);
  const torch::Tensor x = torch::randn({batch, seq, mc.d_model}).to(ScalarOf(cfg.compute_dtype));
  const bool recompute = !cfg.keep_activations;
  auto pass = [&] {
    if (recompute) {
      torch::NoGradGuard no_grad;
      (void)layer->Forward(x);
    }
    torch::Tensor in = x.detach().requires_grad_(true);
    torch::Tensor out = layer->Forward(in);
    out.backward(torch::ones_like(out));
    for (auto& p : layer->parameters()) p.mutable_grad().reset();
  };
  const double seconds = SecondsPerCall(pass, 0.5);
  const double params = static_cast<double>(spec.block_parameters(1));
  const double attention = static_cast<double>(mc.n_head * model::HeadDim(mc) * seq);
  const double per_token = 6 * params + 12 * attention + (recompute ? 2 * params + 4 * attention : 0);
  return per_token * static_cast<double>(batch * seq) / seconds;
}

// The host's gradient path per micro-batch, for a layer's gradients (compute dtype): added
// into an fp32 accumulator straight from them (Note [Accumulation in place], one rank) and
// flattened into an fp32 buffer first (as when they are reduced across ranks).
void MeasureAccumulate(const TrainConfig& cfg, MachineRates* r) {
  const int64_t n = std::min<int64_t>(model::ModelSpec(cfg.model).block_parameters(1), int64_t{32} << 20);
  const torch::Tensor grad = torch::randn({n}).to(ScalarOf(cfg.compute_dtype));
  torch::Tensor flat = torch::empty({n}), acc = torch::zeros({n});
  const std::span<float> a(acc.data_ptr<float>(), static_cast<size_t>(n));
  const std::span<const float> f(flat.data_ptr<float>(), static_cast<size_t>(n));
  const AdamOptions threads{.num_threads = at::get_num_threads()};
  const double flattened = SecondsPerCall([&] {
    flat.copy_(grad);
    AccumulateGradient(a, f, 0.5f, false, threads);
  }, 0.3);
  const double in_place = SecondsPerCall([&] {
    if (cfg.compute_dtype == DType::kBF16)
      AccumulateBf16Gradient(a, {reinterpret_cast<const uint16_t*>(grad.data_ptr()), static_cast<size_t>(n)}, 0.5f,
                             false, threads);
    else if (cfg.compute_dtype == DType::kF32)
      AccumulateGradient(a, {grad.data_ptr<float>(), static_cast<size_t>(n)}, 0.5f, false, threads);
    else
      AccumulateGradient(a, f, 0.5f, false, threads);  // (fp16 is flattened first)
  }, 0.3);
  r->accumulate = static_cast<double>(n) / flattened;
  r->accumulate_in_place = static_cast<double>(n) / in_place;
}
#endif

}  // namespace

StatusOr<MachineRates> MeasureThisMachine(const TrainConfig& cfg) {
#if STRATA_HAVE_TORCH
  MachineRates r;
  r.name = "this machine";
  r.host_device = true;
  r.flops = MeasureCompute(cfg);
  MeasureAccumulate(cfg, &r);
  r.adam = MeasureAdam(cfg);
  const bool nvme = cfg.offload_param.device == OffloadDevice::kNvme || cfg.offload_optimizer.device == OffloadDevice::kNvme;
  if (nvme) STRATA_RETURN_IF_ERROR(MeasureNvme(cfg, &r));
  r.source = fmt::format("measured: a layer's training pass {:.3g} TFLOP/s ({}), gradient accumulation {:.3g} G "
                         "elements/s ({:.3g} in place), CPU Adam {:.3g} G params/s{}",
                         r.flops / 1e12, DTypeName(cfg.compute_dtype), r.accumulate / 1e9, r.accumulate_in_place / 1e9,
                         r.adam / 1e9,
                         nvme ? fmt::format(", NVMe read {:.2f} / write {:.2f} GB/s", r.nvme_read / 1e9,
                                            r.nvme_write / 1e9)
                              : std::string());
  return r;
#else
  (void)cfg;
  return Status(StatusCode::kUnimplemented, "measuring this machine needs a build with LibTorch");
#endif
}

}  // namespace strata::bench
