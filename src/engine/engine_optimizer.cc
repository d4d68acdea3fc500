// The optimizer half of the step: the global gradient norm (with NaN/Inf detection, so an
// fp16 overflow skips the step before any state is written), the clip coefficient, then
// CPU AdamW sub-group by sub-group. With the optimizer state on NVMe the sub-groups form a
// software pipeline: the reads of sub-group j+1 and the write-backs of j-1 are in flight
// while j is updated. The fused half-precision output is the next forward's working weights.
#include <cmath>
#include <cstring>
#include <limits>

#include "src/engine/engine_impl.h"
#include "src/engine/lr_schedule.h"
#include "strata/cpu_adam.h"
#include "strata/check.h"
#include "strata/log.h"

namespace strata {
namespace {

std::span<float> AsFloats(std::span<std::byte> b) { return {reinterpret_cast<float*>(b.data()), b.size() / 4}; }

}  // namespace

StatusOr<bool> Engine::Impl::OptimizerStep(int64_t step, StepStats* stats) {
  Tracer::Span span(tracer, Track::kOptimizer, "optimizer step");
  // Planted by tests: on rank 0, or on every rank at stage 0, where each rank judges its own
  // (replicated) gradients and the overflow flag is not reduced.
  if (cfg.debug_overflow_step == step && (comm->rank() == 0 || !optim_sharded))
    groups[0].grad_acc[0] = std::numeric_limits<float>::infinity();

  // Global norm: each rank sums squares over its optimizer ranges (disjoint for stage >= 1).
  double sumsq = 0;
  bool finite = true;
  for (const Group& g : groups) {
    GradStats s = GradSumSquares(std::span<const float>(g.grad_acc + (g.opt_begin - g.grad_begin), g.opt_len));
    sumsq += s.sum_squares;
    finite = finite && s.finite;
  }
  float buf[2] = {static_cast<float>(sumsq), finite ? 0.0f : 1.0f};
  if (optim_sharded && comm->world_size() > 1)
    STRATA_RETURN_IF_ERROR(comm->AllReduce(buf, 2, DType::kF32, ReduceOp::kSum));
  finite = buf[1] == 0.0f && std::isfinite(buf[0]);
  const double scale = scaler.scale();
  stats->grad_norm = finite ? std::sqrt(static_cast<double>(buf[0])) / scale : std::numeric_limits<double>::infinity();

  auto zero_grads = [&] {
    for (const Group& g : groups) std::memset(g.grad_acc, 0, g.grad_len * 4);
  };
  if (!finite) {
    scaler.Update(/*overflow=*/true);
    zero_grads();
    LogWarn("step {}: gradient overflow (loss scale {}); step skipped, loss scale now {}", step, scale, scaler.scale());
    return false;
  }

  AdamHyperParams hp;
  hp.lr = LearningRate(cfg, step);
  hp.beta1 = cfg.beta1;
  hp.beta2 = cfg.beta2;
  hp.eps = cfg.eps;
  hp.weight_decay = cfg.weight_decay;
  hp.step = ++adam_steps;
  hp.grad_unscale = 1.0 / scale;
  const double max_norm = cfg.gradient_clipping;
  hp.clip_coef = (max_norm > 0 && stats->grad_norm > max_norm) ? max_norm / (stats->grad_norm + 1e-6) : 1.0;

  for (const Group& g : groups) STRATA_RETURN_IF_ERROR(UpdateGroup(g, hp));

  // Stages 1 and 2 keep full working weights on every rank: share the updated shards.
  if (!weights_sharded && optim_sharded && comm->world_size() > 1) {
    const size_t dsize = DTypeSize(cfg.compute_dtype);
    for (const Group& g : groups) {
      Tracer::Span s(tracer, Track::kComm, "all-gather weights g" + std::to_string(g.index));
      std::byte* mem = store->CpuMemory(g.working).data();
      STRATA_RETURN_IF_ERROR(comm->AllGather(mem + g.layout.begin() * dsize, mem, g.layout.shard, cfg.compute_dtype));
    }
  }
  zero_grads();
  scaler.Update(/*overflow=*/false);
  return true;
}

// Updates one group's optimizer range, sub-group by sub-group.
Status Engine::Impl::UpdateGroup(const Group& g, const AdamHyperParams& hp) {
  const size_t dsize = DTypeSize(cfg.compute_dtype);
  const bool states_nvme = optim_pool != nullptr;
  const bool working_nvme = store->home(g.working) == Tier::kNvme;

  // Where the updated working weights go: in place in the cpu tier, or a pinned buffer that
  // is written to NVMe once the whole group is done.
  PinnedBuffer out_lease;
  std::byte* working_out;
  if (working_nvme) {
    while (!(out_lease = param_pool->TryAcquire().value_or(PinnedBuffer())).valid()) {
      Tracer::Span w(tracer, Track::kWait, "wait write-back (buffers)");
      if (write_queue.empty()) return Status(StatusCode::kInternal, "no pinned buffer for the working weights");
      write_queue.front()->ticket.Wait().IgnoreError();
      RetireWrites(false);
    }
    working_out = out_lease.data();
  } else {
    working_out = store->CpuMemory(g.working).data();
  }

  // The NVMe pipeline's unit: the three state tensors of one sub-group in pinned buffers.
  struct Loaded {
    PinnedBuffer buf[3];
    Ticket read[3];
  };
  auto acquire = [&]() -> PinnedBuffer {
    while (true) {
      if (auto b = optim_pool->TryAcquire()) return std::move(*b);
      RetireWrites(false);
      if (auto b = optim_pool->TryAcquire()) return std::move(*b);
      Tracer::Span w(tracer, Track::kWait, "wait write-back (buffers)");
      STRATA_CHECK(!write_queue.empty()) << "optimizer pool exhausted with no write in flight";
      write_queue.front()->ticket.Wait().IgnoreError();
    }
  };
  auto load = [&](const SubGroup& sg) {
    auto l = std::make_unique<Loaded>();
    const TensorHandle hs[3] = {sg.master, sg.m, sg.v};
    for (int k = 0; k < 3; ++k) {
      l->buf[k] = acquire();
      l->read[k] = ReadAfterPendingWrite(hs[k], {l->buf[k].data(), static_cast<size_t>(sg.len * 4)});
    }
    return l;
  };

  std::unique_ptr<Loaded> next;
  if (states_nvme && !g.subs.empty()) next = load(g.subs[0]);
  for (size_t j = 0; j < g.subs.size(); ++j) {
    const SubGroup& sg = g.subs[j];
    std::unique_ptr<Loaded> cur = std::move(next);
    if (states_nvme && j + 1 < g.subs.size()) next = load(g.subs[j + 1]);

    std::span<float> master, m, v;
    if (states_nvme) {
      for (int k = 0; k < 3; ++k) {
        Status s;
        if (!cur->read[k].Done()) {
          Tracer::Span w(tracer, Track::kWait, "wait optimizer read");
          s = cur->read[k].Wait();
        } else {
          s = cur->read[k].Wait();
        }
        if (!s.ok()) return s.WithContext(fmt::format("optimizer state of block {}", g.index));
      }
      master = AsFloats(cur->buf[0].span()).subspan(0, sg.len);
      m = AsFloats(cur->buf[1].span()).subspan(0, sg.len);
      v = AsFloats(cur->buf[2].span()).subspan(0, sg.len);
    } else {
      master = AsFloats(store->CpuMemory(sg.master));
      m = AsFloats(store->CpuMemory(sg.m));
      v = AsFloats(store->CpuMemory(sg.v));
    }

    AdamSpans spans;
    spans.params = master;
    spans.exp_avg = m;
    spans.exp_avg_sq = v;
    spans.grad = std::span<const float>(g.grad_acc + (sg.begin - g.grad_begin), sg.len);
    std::byte* out = working_out + (sg.begin - g.working_begin) * dsize;
    if (cfg.compute_dtype != DType::kF32) {
      spans.half_out = std::span<uint16_t>(reinterpret_cast<uint16_t*>(out), sg.len);
      spans.half_format = cfg.compute_dtype == DType::kBF16 ? HalfFormat::kBf16 : HalfFormat::kFp16;
    }
    {
      Tracer::Span s(tracer, Track::kOptimizer, "adam b" + std::to_string(g.index));
      STRATA_RETURN_IF_ERROR(AdamStep(hp, spans));
      if (cfg.compute_dtype == DType::kF32) std::memcpy(out, master.data(), sg.len * 4);
    }

    if (states_nvme) {
      const TensorHandle hs[3] = {sg.master, sg.m, sg.v};
      for (int k = 0; k < 3; ++k) {
        auto w = std::make_shared<PendingWrite>();
        w->ticket = store->Write(hs[k], {cur->buf[k].data(), static_cast<size_t>(sg.len * 4)});
        w->leases.push_back(std::move(cur->buf[k]));
        pending_writes[hs[k].index] = w;
        write_queue.push_back(w);
      }
    }
  }

  if (working_nvme) {
    auto w = std::make_shared<PendingWrite>();
    w->ticket = store->Write(g.working, {out_lease.data(), static_cast<size_t>(g.working_len * dsize)});
    w->leases.push_back(std::move(out_lease));
    pending_writes[g.working.index] = w;
    write_queue.push_back(w);
  }
  return Status();
}

}  // namespace strata
