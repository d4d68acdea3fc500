// The optimizer half of the step: the global gradient norm (with NaN/Inf detection, so an
// fp16 overflow skips the step before any state is written), the clip coefficient, then
// CPU AdamW sub-group by sub-group. With the optimizer state on NVMe the sub-groups of all
// groups form one software pipeline: the reads of sub-group j+1 and the write-backs of j-1
// are in flight while j is updated. The fused half-precision output is the next forward's working weights.
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
    DropEarlyStates();
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

  STRATA_RETURN_IF_ERROR(UpdateAllGroups(hp));

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

// Updates every group's optimizer range, sub-group by sub-group, as one pipeline across
// group boundaries: with the states on NVMe, the reads of the next sub-group (of this group
// or the next) and the write-backs of the previous ones are in flight while one is updated.
Status Engine::Impl::UpdateAllGroups(const AdamHyperParams& hp) {
  const size_t dsize = DTypeSize(cfg.compute_dtype);
  const bool states_nvme = optim_pool != nullptr;

  auto load = [&](const SubGroup& sg) {
    if (early_states && early_states->sub == &sg) return std::move(early_states);
    DropEarlyStates();  // read for another layout; not expected
    auto l = std::make_unique<LoadedStates>();
    for (PinnedBuffer& b : l->buf) {
      std::optional<PinnedBuffer> lease;
      while (!(lease = optim_pool->TryAcquire()))
        STRATA_CHECK(ReclaimWriteBuffers()) << "optimizer pool exhausted with no write in flight";
      b = std::move(*lease);
    }
    StartStateReads(sg, l.get());
    return l;
  };
  auto queue_write = [&](TensorHandle h, PinnedBuffer lease, size_t bytes) {
    auto w = std::make_shared<PendingWrite>();
    w->ticket = store->Write(h, {lease.data(), bytes});
    w->leases.push_back(std::move(lease));
    pending_writes[h.index] = w;
    write_queue.push_back(w);
  };

  // Every (group, sub-group) in update order.
  std::vector<std::pair<const Group*, const SubGroup*>> order;
  for (const Group& g : groups)
    for (const SubGroup& sg : g.subs) order.push_back({&g, &sg});

  std::unique_ptr<LoadedStates> next;
  if (states_nvme && !order.empty()) next = load(*order[0].second);
  PinnedBuffer out_lease;  // the current group's updated working weights, when they live on NVMe
  std::byte* working_out = nullptr;
  for (size_t i = 0; i < order.size(); ++i) {
    const Group& g = *order[i].first;
    const SubGroup& sg = *order[i].second;
    const bool working_nvme = store->home(g.working) == Tier::kNvme;
    if (i == 0 || order[i - 1].first != &g) {
      // Where this group's updated working weights go: in place in the cpu tier, or a
      // pinned buffer written to NVMe once the whole group is done.
      if (working_nvme) {
        while (!(out_lease = param_pool->TryAcquire().value_or(PinnedBuffer())).valid())
          if (!ReclaimWriteBuffers()) return Status(StatusCode::kInternal, "no pinned buffer for the working weights");
        working_out = out_lease.data();
      } else {
        working_out = store->CpuMemory(g.working).data();
      }
    }
    std::unique_ptr<LoadedStates> cur = std::move(next);
    if (states_nvme && i + 1 < order.size()) next = load(*order[i + 1].second);

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
      for (int k = 0; k < 3; ++k) queue_write(hs[k], std::move(cur->buf[k]), static_cast<size_t>(sg.len * 4));
    }
    const bool group_done = i + 1 == order.size() || order[i + 1].first != &g;
    if (group_done && working_nvme)
      queue_write(g.working, std::move(out_lease), static_cast<size_t>(g.working_len * dsize));
  }
  return Status();
}

void Engine::Impl::ReadFirstStatesEarly() {
  if (!optim_pool || early_states || groups.empty() || groups[0].subs.empty()) return;
  const SubGroup& sg = groups[0].subs[0];
  const TensorHandle hs[3] = {sg.master, sg.m, sg.v};
  RetireWrites(false);
  for (TensorHandle h : hs) {  // the last step's write-backs of these must be done: no waiting here
    auto it = pending_writes.find(h.index);
    if (it != pending_writes.end() && !it->second->ticket.Done()) return;
  }
  auto l = std::make_unique<LoadedStates>();
  for (auto& b : l->buf) {
    auto lease = optim_pool->TryAcquire();
    if (!lease) return;  // the buffers go back with `l`
    b = std::move(*lease);
  }
  StartStateReads(sg, l.get());
  early_states = std::move(l);
}

void Engine::Impl::StartStateReads(const SubGroup& sg, LoadedStates* l) {
  l->sub = &sg;
  const TensorHandle hs[3] = {sg.master, sg.m, sg.v};
  for (int k = 0; k < 3; ++k)
    l->read[k] = ReadAfterPendingWrite(hs[k], {l->buf[k].data(), static_cast<size_t>(sg.len * 4)});
}

void Engine::Impl::DropEarlyStates() {
  if (!early_states) return;
  for (Ticket& t : early_states->read) t.Wait().IgnoreError();  // the buffers are being written into
  early_states.reset();
}

}  // namespace strata
