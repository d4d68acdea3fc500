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
  if (cfg.debug_overflow_step == step && (comm->rank() == 0 || !plan.optim_sharded))
    model.blocks[0].grad[0] = std::numeric_limits<float>::infinity();

  // Global norm: each rank sums squares over its optimizer ranges (disjoint for stage >= 1).
  double sumsq = 0;
  bool finite = true;
  for (int b = 0; b < num_blocks(); ++b) {
    const BlockPlan& bp = plan.blocks[b];
    GradStats s = GradSumSquares(
        std::span<const float>(model.blocks[b].grad + (bp.optimizer.begin - bp.grad.begin), bp.optimizer.len));
    sumsq += s.sum_squares;
    finite = finite && s.finite;
  }
  float buf[2] = {static_cast<float>(sumsq), finite ? 0.0f : 1.0f};
  if (plan.optim_sharded && comm->world_size() > 1)
    STRATA_RETURN_IF_ERROR(comm->AllReduce(buf, 2, DType::kF32, ReduceOp::kSum));
  finite = buf[1] == 0.0f && std::isfinite(buf[0]);
  const double scale = scaler.scale();
  stats->grad_norm = finite ? std::sqrt(static_cast<double>(buf[0])) / scale : std::numeric_limits<double>::infinity();

  if (!finite) {
    DropEarlyStates();
    scaler.Update(/*overflow=*/true);
    grads.ZeroAll();
    LogWarn("step {}: gradient overflow (loss scale {}); step skipped, loss scale now {}", step, scale, scaler.scale());
    return false;
  }

  AdamHyperParams hp;
  hp.lr = LearningRate(cfg, step);
  hp.beta1 = cfg.beta1;
  hp.beta2 = cfg.beta2;
  hp.eps = cfg.eps;
  hp.weight_decay = cfg.weight_decay;
  hp.step = ++counters.adam_steps;
  hp.grad_unscale = 1.0 / scale;
  hp.clip_coef = ClipCoefficient(stats->grad_norm, cfg.gradient_clipping);

  STRATA_RETURN_IF_ERROR(UpdateAllGroups(hp));

  // Stages 1 and 2 keep full working weights on every rank: share the updated shards.
  // (Resident blocks did so on the device, in UpdateResident.)
  if (!plan.weights_sharded && plan.optim_sharded && comm->world_size() > 1) {
    for (int b = 0; b < num_blocks(); ++b) {
      if (plan.resident[b]) continue;
      Tracer::Span s(tracer, Track::kComm, "all-gather weights g" + std::to_string(b));
      const ShardLayout& layout = plan.blocks[b].layout;
      std::byte* mem = store->CpuMemory(model.blocks[b].working).data();
      STRATA_RETURN_IF_ERROR(comm->AllGather(mem + layout.begin() * plan.dsize, mem, layout.shard, cfg.compute_dtype));
    }
  }
  grads.ZeroAll();
  scaler.Update(/*overflow=*/false);
  return true;
}

// Updates every block's optimizer range, sub-group by sub-group, as one pipeline across
// block boundaries: with the states on NVMe, the reads of the next sub-group (of this block
// or the next) and the write-backs of the previous ones are in flight while one is updated.
// The store owns the write-backs: each holds its buffer until written, and a full pool
// waits for the oldest one (TieredStore::AcquireBuffer).
Status Engine::Impl::UpdateAllGroups(const AdamHyperParams& hp) {
  const bool states_nvme = pools.optim != nullptr;
  // Every (block, sub-group) in update order.
  std::vector<std::pair<int, const SubGroup*>> order;
  for (int b = 0; b < num_blocks(); ++b)
    for (const SubGroup& sg : model.blocks[b].subs) order.push_back({b, &sg});

  std::unique_ptr<LoadedStates> next;
  if (states_nvme && !order.empty()) next = LoadStates(*order[0].second);
  PinnedBuffer out_lease;  // the current block's updated working weights, bound for NVMe or the device
  std::byte* working_out = nullptr;
  for (size_t i = 0; i < order.size(); ++i) {
    const int b = order[i].first;
    const SubGroup& sg = *order[i].second;
    const BlockRuntime& br = model.blocks[b];
    const BlockPlan& bp = plan.blocks[b];
    const bool resident = plan.resident[b];
    const bool working_nvme = !resident && store->home(br.working) == Tier::kNvme;
    if (i == 0 || order[i - 1].first != b) {
      // Where this block's updated working weights go: in place in the cpu tier, or a
      // pinned buffer written to NVMe (or copied to the device) once the block is done.
      if (working_nvme || resident) {
        std::optional<PinnedBuffer> lease = store->AcquireBuffer(*pools.param);
        if (!lease) return Status(StatusCode::kInternal, "no pinned buffer for the working weights");
        out_lease = std::move(*lease);
        working_out = out_lease.data();
      } else {
        working_out = store->CpuMemory(br.working).data();
      }
    }
    std::unique_ptr<LoadedStates> cur = std::move(next);
    if (states_nvme && i + 1 < order.size()) next = LoadStates(*order[i + 1].second);

    std::span<float> master, m, v;
    if (states_nvme) {
      for (Ticket& t : cur->read) {
        std::optional<Tracer::Span> wait;
        if (!t.Done()) wait.emplace(tracer, Track::kWait, "wait optimizer read");
        if (Status s = t.Wait(); !s.ok()) return s.WithContext(fmt::format("optimizer state of block {}", b));
      }
      master = AsFloats(cur->buf[0].span()).subspan(0, sg.range.len);
      m = AsFloats(cur->buf[1].span()).subspan(0, sg.range.len);
      v = AsFloats(cur->buf[2].span()).subspan(0, sg.range.len);
    } else {
      master = AsFloats(store->CpuMemory(sg.master));
      m = AsFloats(store->CpuMemory(sg.m));
      v = AsFloats(store->CpuMemory(sg.v));
    }

    AdamSpans spans;
    spans.params = master;
    spans.exp_avg = m;
    spans.exp_avg_sq = v;
    spans.grad = std::span<const float>(br.grad + (sg.range.begin - bp.grad.begin), sg.range.len);
    std::byte* out = working_out + (sg.range.begin - bp.working.begin) * plan.dsize;
    if (cfg.compute_dtype != DType::kF32) {
      spans.half_out = std::span<uint16_t>(reinterpret_cast<uint16_t*>(out), sg.range.len);
      spans.half_format = cfg.compute_dtype == DType::kBF16 ? HalfFormat::kBf16 : HalfFormat::kFp16;
    }
    {
      Tracer::Span s(tracer, Track::kOptimizer, "adam b" + std::to_string(b));
      STRATA_RETURN_IF_ERROR(AdamStep(hp, spans));
      if (cfg.compute_dtype == DType::kF32) std::memcpy(out, master.data(), sg.range.len * 4);
    }

    if (states_nvme) {
      const TensorHandle hs[3] = {sg.master, sg.m, sg.v};
      for (int k = 0; k < 3; ++k) (void)store->WriteBack(hs[k], std::move(cur->buf[k]));
    }
    const bool block_done = i + 1 == order.size() || order[i + 1].first != b;
    if (block_done && working_nvme) (void)store->WriteBack(br.working, std::move(out_lease));
    if (block_done && resident) STRATA_RETURN_IF_ERROR(UpdateResident(b, std::move(out_lease)));
  }
  return Status();
}

// The part of a resident block's working weights this rank updated (its optimizer range) is
// copied to the device; with full weights on every rank (stages 1 and 2), the ranks then
// share their parts with an all-gather on the device. Neither blocks the host.
Status Engine::Impl::UpdateResident(int b, PinnedBuffer lease) {
  const BlockPlan& bp = plan.blocks[b];
  const torch::Tensor& weights = bufs.resident[b];
  const int64_t lo = bp.optimizer.begin - bp.working.begin;
  torch::Tensor part;
  STRATA_RETURN_IF_ERROR(TorchCall("resident update", [&] { part = weights.narrow(0, lo, bp.optimizer.len); }));
  const DeviceEvent copied =
      dev->CopyIn(part, lease.data() + lo * plan.dsize, {bufs.resident_ready[b], dev->RecordCompute()});
  ReleaseAfter(std::move(lease), copied);
  bufs.resident_ready[b] = copied;
  if (!plan.weights_sharded && plan.optim_sharded && comm->world_size() > 1)
    bufs.resident_ready[b] = dev->AllGather(part.data_ptr(), weights.data_ptr(), bp.layout.shard, plan.compute, {copied});
  return Status();
}

std::unique_ptr<LoadedStates> Engine::Impl::LoadStates(const SubGroup& sg) {
  if (early_states && early_states->sub == &sg) return std::move(early_states);
  DropEarlyStates();  // read for another layout; not expected
  auto l = std::make_unique<LoadedStates>();
  for (PinnedBuffer& b : l->buf) {
    std::optional<PinnedBuffer> lease = store->AcquireBuffer(*pools.optim);
    STRATA_CHECK(lease) << "optimizer pool exhausted with no write-back in flight";
    b = std::move(*lease);
  }
  l->sub = &sg;
  const TensorHandle hs[3] = {sg.master, sg.m, sg.v};
  for (int k = 0; k < 3; ++k)
    l->read[k] = store->Read(hs[k], {l->buf[k].data(), static_cast<size_t>(sg.range.len * 4)});
  return l;
}

// The first sub-group's states, read during the last micro-batch. Never blocks: skipped
// when last step's write-backs of them are still in flight or the pool has no free buffers.
void Engine::Impl::ReadFirstStatesEarly() {
  if (!pools.optim || early_states || model.blocks.empty() || model.blocks[0].subs.empty()) return;
  const SubGroup& sg = model.blocks[0].subs[0];
  for (TensorHandle h : {sg.master, sg.m, sg.v})
    if (store->WriteInFlight(h)) return;
  if (pools.optim->free_count() < 3) return;
  early_states = LoadStates(sg);
}

void Engine::Impl::DropEarlyStates() {
  if (!early_states) return;
  for (Ticket& t : early_states->read) t.Wait().IgnoreError();  // the buffers are being written into
  early_states.reset();
}

}  // namespace strata
