// The optimizer half of the step: the global gradient norm (with NaN/Inf detection, so an
// fp16 overflow skips the step before any state is written), the clip coefficient, then
// CPU AdamW block by block, sub-group by sub-group, on the optimizer thread. With the
// optimizer state on NVMe the sub-groups of all blocks form one software pipeline: the reads
// of sub-group j+1 and the write-backs of j-1 are in flight while j is updated. The fused
// half-precision output is the next forward's working weights.
//
// Note [Optimizer overlap]: with strata.optimizer_overlap "forward" (the default) the step
// returns once the update is launched; the next forward waits, block by block, only for the
// block it is about to use (AwaitBlock: its ready event). Exact: the global norm, and so the
// clip coefficient, is known before any block is updated, and every block is updated with
// the same hyper-parameters in the same order as the plain schedule ("none"), which waits for
// the whole update instead. Whatever reads the whole state (checkpoints, counters, export,
// restore, destruction) first Quiesce()s. Collectives stay on the compute thread: the
// stages 1-2 sharing of updated weights happens in AwaitBlock, in block order on every rank.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "src/engine/engine_impl.h"
#include "src/engine/lr_schedule.h"
#include "strata/cpu_adam.h"
#include "strata/check.h"
#include "strata/log.h"

namespace strata {
namespace {

// Early reads dropped: each read finishes before its buffers go back to the pool.
void Drop(EarlyStates& early) {
  for (const auto& l : early)
    for (Event& t : l->read) t.Wait().IgnoreError();
  early.clear();
}

}  // namespace

struct Engine::Impl::OutputAhead {
  int block = -1;  // whose working weights `read` brings into `lease`; -1: none
  PinnedBuffer lease;
  Event read;
  ~OutputAhead() {
    if (block >= 0) read.Wait().IgnoreError();  // the buffer is being written into
  }
};

StatusOr<bool> Engine::Impl::OptimizerStep(int64_t step, StepStats* stats) {
  STRATA_RETURN_IF_ERROR(Quiesce());  // one update at a time (the last one is done by now)
  Tracer::Span span(tracer, Track::kOptimizer, "gradient norm");

  // Global norm: each rank sums squares over its optimizer ranges (disjoint for stage >= 1).
  double sumsq = 0;
  bool finite = true;
  for (int b = 0; b < num_blocks(); ++b) {
    const BlockPlan& bp = plan.blocks[b];
    GradStats s = plan.gsize == 2 ? GradSumSquares(GradBf16(b, bp.optimizer)) : GradSumSquares(GradF32(b, bp.optimizer));
    sumsq += s.sum_squares;
    finite = finite && s.finite;
  }
  float buf[2] = {static_cast<float>(sumsq), finite ? 0.0f : 1.0f};
  if (plan.optim_sharded && comm->world_size() > 1)
    STRATA_RETURN_IF_ERROR(comm->AllReduce(buf, 2, DType::kF32, ReduceOp::kSum));
  finite = buf[1] == 0.0f && std::isfinite(buf[0]);
  const double scale = scaler.scale();
  stats->grad_norm = finite ? std::sqrt(static_cast<double>(buf[0])) / scale : std::numeric_limits<double>::infinity();

  stats->speculated_blocks = 0;
  for (const auto& d : speculation.done) stats->speculated_blocks += d.has_value();
  if (!finite) {
    DropEarlyStates();
    STRATA_RETURN_IF_ERROR(AbandonSpeculation());  // the updates made during the backward are undone
    scaler.Update(/*overflow=*/true);  // (the next step's first micro-batch overwrites the accumulators)
    LogWarn("step {}: gradient overflow (loss scale {}); step skipped, loss scale now {}", step, scale, scaler.scale());
    // Without a dynamic loss scale nothing changes from one step to the next: a run that
    // keeps skipping would "train" to the end and change nothing.
    if (scaler.at_floor())
      return Status(StatusCode::kFailedPrecondition,
                    fmt::format("step {}: the gradients overflowed at the minimum loss scale (fp16.min_loss_scale {}) "
                                "after {} skipped step(s) in a row: there is nothing left to adjust and the run would "
                                "train nothing; stopping. The weights or the data may hold NaN or Inf, or the learning "
                                "rate is too high; bf16 needs no loss scale", step, scale, scaler.overflow_streak()));
    if (!scaler.dynamic() && cfg.max_skipped_steps > 0 && scaler.overflow_streak() >= cfg.max_skipped_steps)
      return Status(StatusCode::kFailedPrecondition,
                    fmt::format("step {}: the gradients were not finite in {} steps in a row with no loss scaling to "
                                "adjust ({} compute): the weights or the data hold NaN or Inf; stopping "
                                "(strata.max_skipped_steps)", step, scaler.overflow_streak(), DTypeName(cfg.compute_dtype)));
    return false;
  }

  AdamHyperParams hp = NextHyperParams(step);
  ++counters.adam_steps;
  hp.clip_coef = ClipCoefficient(stats->grad_norm, cfg.gradient_clipping);
  // The speculative updates assumed clip coefficient 1 (exactly what ClipCoefficient returns
  // when the norm is within bounds) and otherwise these very hyper-parameters.
  const Verdict verdict = hp.clip_coef == 1.0 ? Verdict::kStands : Verdict::kRedo;
  if (stats->speculated_blocks > 0)
    STRATA_CHECK(speculation.hp.lr == hp.lr && speculation.hp.step == hp.step &&
                 speculation.hp.grad_unscale == hp.grad_unscale) << "the speculative updates assumed another step";
  stats->redone_blocks = verdict == Verdict::kRedo ? stats->speculated_blocks : 0;
  scaler.Update(/*overflow=*/false);
  STRATA_RETURN_IF_ERROR(LaunchUpdate(hp, verdict, step));
  if (cfg.optimizer_overlap == OptimizerOverlap::kNone) STRATA_RETURN_IF_ERROR(Quiesce());
  return true;
}

std::span<const float> Engine::Impl::GradF32(int b, ElementRange range) const {
  const float* g = reinterpret_cast<const float*>(model.blocks[b].grad);
  return {g + (range.begin - plan.blocks[b].grad.begin), static_cast<size_t>(range.len)};
}

std::span<const uint16_t> Engine::Impl::GradBf16(int b, ElementRange range) const {
  const uint16_t* g = reinterpret_cast<const uint16_t*>(model.blocks[b].grad);
  return {g + (range.begin - plan.blocks[b].grad.begin), static_cast<size_t>(range.len)};
}

AdamHyperParams Engine::Impl::NextHyperParams(int64_t step) const {
  AdamHyperParams hp;
  hp.lr = LearningRate(cfg, step);
  hp.beta1 = cfg.beta1;
  hp.beta2 = cfg.beta2;
  hp.eps = cfg.eps;
  hp.weight_decay = cfg.weight_decay;
  hp.step = counters.adam_steps + 1;
  hp.grad_unscale = 1.0 / scaler.scale();
  hp.clip_coef = 1.0;
  return hp;
}

// Starts FinishStep on the optimizer thread with one ready event per block.
Status Engine::Impl::LaunchUpdate(const AdamHyperParams& hp, Verdict verdict, int64_t step) {
  const int n = num_blocks();
  std::vector<std::shared_ptr<HostEventState>> ready(n);
  OptimizerRun& run = optimizer.run;
  run.block_ready.assign(n, Event());
  for (int b = 0; b < n; ++b) {
    ready[b] = std::make_shared<HostEventState>();
    run.block_ready[b] = Event(ready[b]);
  }
  run.share_pending.assign(n, !plan.weights_sharded && plan.optim_sharded && comm->world_size() > 1);
  run.parked.reset();
  if (cfg.optimizer_overlap == OptimizerOverlap::kDelayed && step >= cfg.delayed_update_from) {
    auto publish = [this](int b, PinnedBuffer buf) {
      (void)store->WriteBack(model.blocks[b].working, std::move(buf));  // failures: WriteBackFailure()
    };
    run.parked = std::make_shared<ParkedWrites>(n, static_cast<int>(pools.park->buffer_count()), std::move(publish));
  }
  // The early states go with the update: the compute thread never touches them while it runs.
  auto early = std::make_shared<EarlyStates>(std::exchange(optimizer.early_states, {}));
  // This step's speculative updates go with it: the next step re-arms while it may still run.
  auto speculated = std::exchange(speculation.done, std::vector<std::optional<Event>>(n));
  run.done = optimizer.thread->Submit({{}, nullptr, [this, hp, verdict, speculated, early, ready] {
                                         Status s = FinishStep(hp, verdict, speculated, std::move(*early), ready);
                                         for (const auto& r : ready)
                                           if (!r->Ready()) r->Set(s.ok() ? Status() : s);  // waiters see the error
                                         return s;
                                       },
                                       "optimizer step", 0, {}});
  return Status();
}

bool Engine::Impl::BlockReady(int b) const {
  const auto& ready = optimizer.run.block_ready;
  return DelayedRun() || b >= static_cast<int>(ready.size()) || ready[b].Ready();
}

// Block b's weights may be used: its update is done, and (stages 1-2) shared. A delayed
// update is not waited for: the step beside it reads the old weights.
Status Engine::Impl::AwaitBlock(int b) {
  OptimizerRun& run = optimizer.run;
  if (!DelayedRun()) STRATA_RETURN_IF_ERROR(WaitForUpdate(b, "optimizer step"));
  if (b < static_cast<int>(run.share_pending.size()) && run.share_pending[b]) {
    run.share_pending[b] = 0;
    STRATA_RETURN_IF_ERROR(ShareUpdatedWeights(b));
  }
  return Status();
}

// Block b's part of the running update is done (the wait traced when it blocks); `what`
// names the update in the trace and in an error.
Status Engine::Impl::WaitForUpdate(int b, const char* what) {
  const auto& ready = optimizer.run.block_ready;
  if (b >= static_cast<int>(ready.size())) return Status();
  const Event& e = ready[b];
  Tracer::Span span(e.Ready() ? nullptr : tracer, Track::kOptimizerWait, fmt::format("wait {} b{}", what, b));
  return e.Wait().WithContext(fmt::format("the {} of block {}", what, b));
}

Status Engine::Impl::Quiesce() {
  if (DelayedRun()) {  // nothing reads the old weights any more: every new one goes home
    optimizer.run.parked->ReleaseAll();
    for (int b = 0; b < num_blocks(); ++b) STRATA_RETURN_IF_ERROR(AwaitGradientsFree(b));
  }
  for (int b = 0; b < static_cast<int>(optimizer.run.block_ready.size()); ++b) STRATA_RETURN_IF_ERROR(AwaitBlock(b));
  STRATA_RETURN_IF_ERROR(optimizer.run.done.Wait());
  STRATA_RETURN_IF_ERROR(FlushRestoringWorking());
  // A state whose write-back failed is lost (its buffer went back to the pool): the run
  // cannot go on from it, and no checkpoint may be taken of it.
  return store ? store->WriteBackFailure() : Status();
}

// Stages 1 and 2 keep full working weights on every rank: the ranks share their updated
// shards, in host memory (the cpu tier) or, for a resident block, on the device.
Status Engine::Impl::ShareUpdatedWeights(int b) {
  const ShardLayout& layout = plan.blocks[b].layout;
  if (plan.resident[b]) {
    const torch::Tensor& weights = bufs.resident[b];
    std::byte* base = static_cast<std::byte*>(weights.data_ptr());
    bufs.resident_ready[b] = dev->AllGather(base + layout.begin() * plan.dsize, base, layout.shard, plan.compute,
                                            {bufs.resident_ready[b]});
    return Status();
  }
  Tracer::Span s(tracer, Track::kComm, "all-gather weights g" + std::to_string(b));
  std::byte* mem = store->CpuMemory(model.blocks[b].working).data();
  return comm->AllGather(mem + layout.begin() * plan.dsize, mem, layout.shard, cfg.compute_dtype);
}

// The step's update, in block order: a block updated during the backward concludes (its
// update stands, is redone or rolled back); the others are updated as one pipeline.
Status Engine::Impl::FinishStep(const AdamHyperParams& hp, Verdict verdict,
                                const std::vector<std::optional<Event>>& speculated,
                                EarlyStates early,
                                const std::vector<std::shared_ptr<HostEventState>>& ready) {
  DropStatesAhead();  // read for a block that was not speculated after all (not expected)
  std::vector<int> pending;  // consecutive blocks not updated yet
  for (int b = 0; b <= num_blocks(); ++b) {
    const bool concluding = b < num_blocks() && speculated[b].has_value();
    if (b < num_blocks() && !concluding) {
      pending.push_back(b);
      continue;
    }
    // Delayed: from the last block down, the order in which the next backward needs them.
    if (optimizer.run.parked) std::reverse(pending.begin(), pending.end());
    if (!pending.empty()) STRATA_RETURN_IF_ERROR(UpdateBlocks(hp, pending, early, ready));
    pending.clear();
    if (concluding) {
      STRATA_RETURN_IF_ERROR(Conclude(b, verdict, hp, *speculated[b]));
      ready[b]->Set(Status());
    }
  }
  Drop(early);  // not consumed (not expected)
  if (optimizer.run.parked) optimizer.run.parked->Drain();  // delayed: written as the next step releases them
  return Status();
}

// Updates the optimizer ranges of `blocks`, sub-group by sub-group, as one pipeline across
// block boundaries: with the states on NVMe, the reads of the next sub-group (of this block
// or the next) and the write-backs of the previous ones are in flight while one is updated.
// The store owns the write-backs: each holds its buffer until written, and a full pool
// waits for the oldest one (TieredStore::AcquireBuffer).
Status Engine::Impl::UpdateBlocks(const AdamHyperParams& hp, const std::vector<int>& blocks,
                                  EarlyStates& early,
                                  const std::vector<std::shared_ptr<HostEventState>>& ready) {
  const bool states_nvme = pools.optim != nullptr;
  auto load = [&](const SubGroup& sg) -> std::unique_ptr<LoadedStates> {  // the early read, when it is of sg
    if (store->home(sg.m) != Tier::kNvme) return nullptr;  // strata.host_blocks: updated in place
    if (!early.empty() && early.front()->sub != &sg) Drop(early);  // (not expected: read in another order)
    if (early.empty()) return LoadStates(sg);
    std::unique_ptr<LoadedStates> l = std::move(early.front());
    early.pop_front();
    return l;
  };
  std::vector<std::pair<int, const SubGroup*>> order;  // every (block, sub-group) in update order
  for (int b : blocks)
    for (const SubGroup& sg : model.blocks[b].subs) order.push_back({b, &sg});

  std::unique_ptr<LoadedStates> next;
  if (states_nvme && !order.empty()) next = load(*order[0].second);
  OutputAhead ahead;  // (declared after `next`: its read is waited for first on the way out)
  // Blocks without sub-groups here (frozen, or an empty optimizer range) have nothing to wait for.
  for (int b : blocks)
    if (model.blocks[b].subs.empty()) ready[b]->Set(Status());
  PinnedBuffer out_lease;  // the current block's updated working weights, bound for NVMe or the device
  std::byte* working_out = nullptr;
  int64_t out_first = 0;  // the flat element at working_out
  for (size_t i = 0; i < order.size(); ++i) {
    const auto [b, sg] = order[i];
    if (i == 0 || order[i - 1].first != b) {
      STRATA_ASSIGN_OR_RETURN(working_out, BlockOutput(b, &out_lease, &out_first, &ahead));
      size_t j = i;
      while (j < order.size() && order[j].first == b) ++j;
      if (j < order.size()) ReadOutputAhead(order[j].first, &ahead);
    }
    std::unique_ptr<LoadedStates> cur = std::move(next);
    if (states_nvme && i + 1 < order.size()) next = load(*order[i + 1].second);
    std::byte* out = working_out + (sg->range.begin - out_first) * plan.dsize;
    STRATA_RETURN_IF_ERROR(UpdateSubGroup(hp, b, *sg, cur.get(), out));
    if (i + 1 == order.size() || order[i + 1].first != b) {
      STRATA_RETURN_IF_ERROR(FinishBlock(b, std::move(out_lease)));
      ready[b]->Set(Status());
    }
  }
  return Status();
}

// Where block b's updated working weights go: in place in the cpu tier (the adapter tensor
// of a LoRA block whose base is on NVMe), or a pinned buffer (`lease`) written to NVMe or
// copied to the device once the block is done.
void Engine::Impl::ReadOutputAhead(int b, OutputAhead* ahead) {
  const BlockRuntime& br = model.blocks[b];
  if (!plan.format.MasterFromWorking() || ahead->block >= 0 || plan.resident[b] || br.adapter.valid() || !br.working.valid() ||
      store->home(br.working) != Tier::kNvme || optimizer.run.parked)
    return;
  std::optional<PinnedBuffer> got = pools.param->TryAcquire();  // never waits: the compute may need them
  if (!got) return;
  ahead->lease = std::move(*got);
  ahead->read = ReadWorkingInto(b, ahead->lease);
  ahead->block = b;
}

Event Engine::Impl::ReadWorkingInto(int b, const PinnedBuffer& buf) {
  const TensorHandle h = model.blocks[b].working;
  return store->Read(h, buf.span().subspan(0, store->bytes(h)));
}

StatusOr<std::byte*> Engine::Impl::BlockOutput(int b, PinnedBuffer* lease, int64_t* first, OutputAhead* ahead) {
  const BlockRuntime& br = model.blocks[b];
  *first = plan.blocks[b].working.begin;
  if (br.adapter.valid()) {
    *first = plan.blocks[b].adapter.begin;
    return store->CpuMemory(br.adapter).data();
  }
  if (!plan.resident[b] && store->home(br.working) != Tier::kNvme) return store->CpuMemory(br.working).data();
  if (optimizer.run.parked) {  // delayed: parked until the next step has read the old weights
    optimizer.run.parked->WaitForRoom();
    std::optional<PinnedBuffer> got = store->AcquireBuffer(*pools.park);
    if (!got) got = pools.park->AcquireFor(std::chrono::minutes(5));  // (a write retired as we looked)
    if (!got) return Status(StatusCode::kInternal, "no parking buffer for the working weights in 5 minutes");
    *lease = std::move(*got);
    return lease->data();
  }
  if (ahead && ahead->block == b) {  // read into it since the block before started
    std::optional<Tracer::Span> wait;
    if (!ahead->read.Ready()) wait.emplace(tracer, Track::kOptimizer, "adam b" + std::to_string(b) + ": waiting for its working weights");
    Status read = ahead->read.Wait();
    ahead->block = -1;
    *lease = std::move(ahead->lease);
    STRATA_RETURN_IF_ERROR(read.WithContext(fmt::format("working weights of block {}", b)));
    return lease->data();
  }
  std::optional<PinnedBuffer> got = store->AcquireBuffer(*pools.param);
  if (!got) got = pools.param->AcquireFor(std::chrono::minutes(5));  // held by copies to the device
  if (!got) return Status(StatusCode::kInternal, "no pinned buffer for the working weights in 5 minutes");
  *lease = std::move(*got);
  if (plan.format.MasterFromWorking()) {  // the weights being replaced hold the master (or its high halves)
    Tracer::Span s(tracer, Track::kOptimizer, "adam b" + std::to_string(b) + ": reading its working weights");
    STRATA_RETURN_IF_ERROR(ReadWorkingInto(b, *lease).Wait().WithContext(fmt::format("working weights of block {}", b)));
  }
  return lease->data();
}

StatusOr<std::array<std::span<std::byte>, 3>> Engine::Impl::StateSpans(int b, const SubGroup& sg,
                                                                        LoadedStates* cur) {
  if (!cur) {
    const std::span<std::byte> master = sg.master.valid() ? store->CpuMemory(sg.master) : std::span<std::byte>();
    return std::array{master, store->CpuMemory(sg.m), store->CpuMemory(sg.v)};
  }
  for (Event& t : cur->read) {
    std::optional<Tracer::Span> wait;
    if (!t.Ready()) wait.emplace(tracer, Track::kOptimizer, "adam b" + std::to_string(b) + ": waiting for its states");
    if (Status s = t.Wait(); !s.ok()) return s.WithContext(fmt::format("optimizer state of block {}", b));
  }
  std::array<std::span<std::byte>, 3> spans;
  for (int k = 0; k < 3; ++k) spans[k] = cur->buf[k].span().subspan(0, StateBytes(k, sg.range.len));
  return spans;
}

// AdamW over one sub-group: its states from `cur` (read from NVMe) or the cpu tier, its
// fused half-precision (or fp32) output to `out`; states written back.
Status Engine::Impl::UpdateSubGroup(const AdamHyperParams& hp, int b, const SubGroup& sg, LoadedStates* cur,
                                    std::byte* out) {
  STRATA_ASSIGN_OR_RETURN(auto states, StateSpans(b, sg, cur));
  const StateFormat& format = plan.format;
  std::span<const float> grad;
  std::span<const uint16_t> grad_bf16;
  if (plan.gsize == 2) grad_bf16 = GradBf16(b, sg.range);
  else grad = GradF32(b, sg.range);
  const AdamSpans spans = format.UpdateSpans(states, out, sg.range.len, grad, grad_bf16, cfg.seed, hp.step, b,
                                             sg.range.begin);
  {
    Tracer::Span s(tracer, Track::kOptimizer, "adam b" + std::to_string(b));
    STRATA_RETURN_IF_ERROR(AdamStep(hp, spans, {.num_threads = optimizer.threads}));
    format.FinishUpdate(states, out, sg.range.len);
  }
  if (cur) {
    const TensorHandle hs[3] = {sg.master, sg.m, sg.v};
    for (int k = FirstStoredState(); k < 3; ++k) (void)store->WriteBack(hs[k], std::move(cur->buf[k]));
  }
  return Status();
}

// Block b is updated: its working weights to their home. Its gradients stay: the next step's
// first micro-batch overwrites them (Note [Gradient accumulation]).
Status Engine::Impl::FinishBlock(int b, PinnedBuffer lease) {
  const BlockRuntime& br = model.blocks[b];
  if (plan.resident[b]) {
    STRATA_RETURN_IF_ERROR(UpdateResident(b, std::move(lease)));
  } else if (lease.valid() && optimizer.run.parked) {
    optimizer.run.parked->Park(b, std::move(lease));  // delayed: home once the old ones are read
  } else if (lease.valid()) {
    (void)store->WriteBack(br.working, std::move(lease));  // reads of it wait for the write
  }
  return Status();
}

// The part of a resident block's working weights this rank updated (its optimizer range) is
// copied to the device, without blocking; with full weights on every rank (stages 1 and 2)
// the compute thread then shares the parts (ShareUpdatedWeights).
Status Engine::Impl::UpdateResident(int b, PinnedBuffer lease) {
  const BlockPlan& bp = plan.blocks[b];
  const torch::Tensor& weights = bufs.resident[b];
  const int64_t lo = bp.optimizer.begin - bp.working.begin;
  torch::Tensor part;
  STRATA_RETURN_IF_ERROR(TorchCall("resident update", [&] { part = weights.narrow(0, lo, bp.optimizer.len); }));
  // After the step's Synchronize nothing reads the old weights; the next copy in waits for this one.
  const Event copied = dev->CopyIn(part, lease.data() + lo * plan.dsize, {bufs.resident_ready[b]});
  ReleaseAfter(std::move(lease), copied);
  bufs.resident_ready[b] = copied;  // read by the compute thread once block b is ready
  return Status();
}

std::unique_ptr<LoadedStates> Engine::Impl::LeaseStates(const SubGroup& sg) {
  auto l = std::make_unique<LoadedStates>();
  for (int k = FirstStoredState(); k < 3; ++k) {
    std::optional<PinnedBuffer> lease = store->AcquireBuffer(*pools.optim);
    STRATA_CHECK(lease) << "optimizer pool exhausted with no write-back in flight";
    l->buf[k] = std::move(*lease);
  }
  l->sub = &sg;
  return l;
}

std::unique_ptr<LoadedStates> Engine::Impl::LoadStates(const SubGroup& sg) {
  if (store->home(sg.m) != Tier::kNvme) return nullptr;  // strata.host_blocks: updated in place
  std::unique_ptr<LoadedStates> l = LeaseStates(sg);
  const TensorHandle hs[3] = {sg.master, sg.m, sg.v};
  for (int k = FirstStoredState(); k < 3; ++k)
    l->read[k] = store->Read(hs[k], {l->buf[k].data(), StateBytes(k, sg.range.len)});
  return l;
}

void Engine::Impl::ReadStatesEarly() {
  if (!optimizer.run.done.Ready() || !pools.optim || cfg.optimizer_overlap == OptimizerOverlap::kSpeculative ||
      cfg.optimizer_overlap == OptimizerOverlap::kDelayed)  // (reads its own; starts from the last block)
    return;
  // The NVMe sub-group after the last one read early, in update order (block by block; host
  // blocks' states are updated in place).
  const SubGroup* last = optimizer.early_states.empty() ? nullptr : optimizer.early_states.back()->sub;
  const SubGroup* next = nullptr;
  bool past = last == nullptr;
  for (const BlockRuntime& br : model.blocks) {
    for (const SubGroup& sg : br.subs) {
      if (past && store->home(sg.m) == Tier::kNvme) {
        next = &sg;
        break;
      }
      past = past || &sg == last;
    }
    if (next) break;
  }
  if (!next) return;  // all read
  for (TensorHandle h : {next->master, next->m, next->v})
    if (h.valid() && store->WriteInFlight(h)) return;
  if (pools.optim->free_count() < static_cast<size_t>(3 - FirstStoredState())) return;
  optimizer.early_states.push_back(LoadStates(*next));
}

void Engine::Impl::DropEarlyStates() { Drop(optimizer.early_states); }

StatusOr<std::vector<std::byte>> Engine::Impl::ReadWorking(int b) {
  const TensorHandle h = model.blocks[b].working;
  std::vector<std::byte> out(store->bytes(h));
  STRATA_RETURN_IF_ERROR(store->Read(h, out).Wait());
  return out;
}

Status Engine::Impl::ReadMaster(int b, const SubGroup& sg, std::span<const std::byte> working, std::span<std::byte> dst) {
  STRATA_CHECK(dst.size() == static_cast<size_t>(sg.range.len) * 4) << dst.size();
  const StateFormat& format = plan.format;
  std::vector<std::byte> stored(format.StoredBytes(TensorRole::kMaster, sg.range.len));
  if (!stored.empty()) STRATA_RETURN_IF_ERROR(store->Read(sg.master, stored).Wait());
  std::span<const std::byte> mine;  // the sub-group's part of the working weights, where they hold the master
  if (format.MasterFromWorking()) {
    const int64_t at = sg.range.begin - plan.blocks[b].working.begin;
    STRATA_CHECK(at >= 0 && (at + sg.range.len) * plan.dsize <= working.size()) << "block " << b;
    mine = working.subspan(at * plan.dsize, sg.range.len * plan.dsize);
  }
  format.ReadMaster(mine, stored, {reinterpret_cast<float*>(dst.data()), static_cast<size_t>(sg.range.len)});
  return Status();
}

Status Engine::Impl::RestoreMasterFromWorking(const TensorKey& key, const SubGroup& sg, std::span<const std::byte> fp32) {
  const int b = key.block;
  const int64_t len = sg.range.len;
  if (fp32.size() != static_cast<size_t>(len) * 4)
    return Error(StatusCode::kInvalidArgument, "tensor '{}' has {} bytes, the checkpoint holds {}", key.Name(), len * 4,
                 fp32.size());
  if (restoring.block != b) {
    STRATA_RETURN_IF_ERROR(FlushRestoringWorking());
    STRATA_ASSIGN_OR_RETURN(restoring.bytes, ReadWorking(b));
    restoring.block = b;
  }
  std::vector<std::byte>& working = restoring.bytes;
  const int64_t at = sg.range.begin - plan.blocks[b].working.begin;
  STRATA_CHECK(at >= 0 && (at + len) * plan.dsize <= working.size()) << "block " << b;
  const StateFormat& format = plan.format;
  std::vector<float> master(len);
  std::memcpy(master.data(), fp32.data(), fp32.size());
  std::vector<std::byte> stored(format.StoredBytes(TensorRole::kMaster, len));
  format.WriteMaster(master, std::span(working).subspan(at * plan.dsize, len * plan.dsize), stored);
  return stored.empty() ? Status() : store->Write(sg.master, stored).Wait();
}

Status Engine::Impl::FlushRestoringWorking() {
  if (restoring.block < 0) return Status();
  const int b = restoring.block;
  restoring.block = -1;
  const std::vector<std::byte> bytes = std::move(restoring.bytes);
  return store->Write(model.blocks[b].working, bytes).Wait();
}

}  // namespace strata
