// The optimizer half of the step, on the compute thread: the global gradient norm (with
// NaN/Inf detection, so an fp16 overflow skips the step before any state is written), the
// clip coefficient, and the launch of the update, which runs on the optimizer thread as its
// mode says (update/update_mode.h) through the read / update / write window
// (update/update_window.h). Then the waits: AwaitBlock before a block's weights are used,
// Quiesce before anything reads the whole state.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "src/engine/engine_impl.h"
#include "src/engine/lr_schedule.h"
#include "src/engine/update/newton_schulz.h"
#include "strata/cpu_adam.h"
#include "strata/check.h"
#include "strata/log.h"

namespace strata {
GradStats Engine::Impl::BlockGradSums(int b) const {
  const ElementRange range = plan.blocks[b].optimizer;
  const AdamOptions threads{.num_threads = optimizer.norm_threads};
  const BlockRuntime& br = model.blocks[b];
  return plan.gsize == 2 ? GradSumSquares(AccumulatedGradient<uint16_t>(br, plan.blocks[b], range), threads)
                         : GradSumSquares(AccumulatedGradient<float>(br, plan.blocks[b], range), threads);
}

StatusOr<bool> Engine::Impl::OptimizerStep(int64_t step, StepStats* stats) {
  STRATA_RETURN_IF_ERROR(Quiesce());  // one update at a time (the last one is done by now)
  Tracer::Span span(io.tracer, Track::kOptimizer, "gradient norm");

  // Global norm: each rank sums squares over its optimizer ranges (disjoint for stage >= 1).
  double sumsq = 0;
  bool finite = true;
  for (int b = 0; b < num_blocks(); ++b) {  // in block order, whenever each sum was taken
    stats->early_sum_blocks += optimizer.early_sums[b].has_value();
    const GradStats s = optimizer.early_sums[b] ? *optimizer.early_sums[b] : BlockGradSums(b);
    optimizer.early_sums[b].reset();
    sumsq += s.sum_squares;
    finite = finite && s.finite;
  }
  float buf[2] = {static_cast<float>(sumsq), finite ? 0.0f : 1.0f};
  if (plan.optim_sharded && io.comm->world_size() > 1)
    STRATA_RETURN_IF_ERROR(io.comm->AllReduce(buf, 2, DType::kF32, ReduceOp::kSum));
  finite = buf[1] == 0.0f && std::isfinite(buf[0]);
  const double scale = optimizer.scaler.scale();
  stats->grad_norm = finite ? std::sqrt(static_cast<double>(buf[0])) / scale : std::numeric_limits<double>::infinity();

  UpdateMode& mode = *optimizer.mode;
  stats->speculated_blocks = mode.EarlyBlocks();
  if (!finite) {
    optimizer.window.DropEarlyStates();
    STRATA_RETURN_IF_ERROR(mode.Abandon());  // the updates made during the backward are undone
    optimizer.scaler.Update(/*overflow=*/true);  // (the next step's first micro-batch overwrites the accumulators)
    LogWarn("step {}: gradient overflow (loss scale {}); step skipped, loss scale now {}", step, scale, optimizer.scaler.scale());
    // Without a dynamic loss scale nothing changes from one step to the next: a run that
    // keeps skipping would "train" to the end and change nothing.
    if (optimizer.scaler.at_floor())
      return Status(StatusCode::kFailedPrecondition,
                    fmt::format("step {}: the gradients overflowed at the minimum loss scale (fp16.min_loss_scale {}) "
                                "after {} skipped step(s) in a row: there is nothing left to adjust and the run would "
                                "train nothing; stopping. The weights or the data may hold NaN or Inf, or the learning "
                                "rate is too high; bf16 needs no loss scale", step, scale, optimizer.scaler.overflow_streak()));
    if (!optimizer.scaler.dynamic() && cfg.max_skipped_steps > 0 && optimizer.scaler.overflow_streak() >= cfg.max_skipped_steps)
      return Status(StatusCode::kFailedPrecondition,
                    fmt::format("step {}: the gradients were not finite in {} steps in a row with no loss scaling to "
                                "adjust ({} compute): the weights or the data hold NaN or Inf; stopping "
                                "(strata.max_skipped_steps)", step, optimizer.scaler.overflow_streak(), DTypeName(cfg.compute_dtype)));
    return false;
  }

  AdamHyperParams hp = NextHyperParams();
  ++optimizer.adam_steps;
  if (experts.any()) STRATA_RETURN_IF_ERROR(experts.CountSteps(cfg.expert_update, optimizer.adam_steps, *io.comm));
  hp.clip_coef = ClipCoefficient(stats->grad_norm, cfg.gradient_clipping);
  if (plan.format.rule().per_tensor) STRATA_RETURN_IF_ERROR(SetTrustRatios(hp));
  if (plan.format.rule().whole_matrices) STRATA_RETURN_IF_ERROR(SetMuonUpdates(hp));
  // Updates made early assumed clip coefficient 1 (exactly what ClipCoefficient returns when
  // the norm is within bounds) and otherwise these very hyper-parameters.
  const Verdict verdict = hp.clip_coef == 1.0 ? Verdict::kStands : Verdict::kRedo;
  stats->redone_blocks = verdict == Verdict::kRedo ? stats->speculated_blocks : 0;
  optimizer.scaler.Update(/*overflow=*/false);
  STRATA_RETURN_IF_ERROR(LaunchUpdate(hp, verdict, step));
  if (mode.StepWaitsForUpdate()) STRATA_RETURN_IF_ERROR(Quiesce());
  return true;
}

AdamHyperParams Engine::Impl::NextHyperParams() const {
  AdamHyperParams hp = StepHyperParams(cfg, optimizer.adam_steps);
  hp.grad_unscale = 1.0 / optimizer.scaler.scale();
  hp.clip_coef = 1.0;
  return hp;
}

// LAMB: each tensor's norms from every rank's pieces of it, then its trust ratio, before any
// of it is updated (Note [LAMB trust ratio]). The sums cross ranks in fp32, as FusedLamb
// keeps them.
Status Engine::Impl::SetTrustRatios(const AdamHyperParams& hp) {
  STRATA_ASSIGN_OR_RETURN(const auto sums, optimizer.window.LambNorms(hp));
  std::vector<float> flat;
  for (const auto& block : sums)
    for (const LambSums& s : block) {
      flat.push_back(static_cast<float>(s.weight_sq));
      flat.push_back(static_cast<float>(s.update_sq));
    }
  if (plan.optim_sharded && io.comm->world_size() > 1 && !flat.empty()) {
    Tracer::Span span(io.tracer, Track::kComm, "all-reduce lamb norms");
    STRATA_RETURN_IF_ERROR(io.comm->AllReduce(flat.data(), flat.size(), DType::kF32, ReduceOp::kSum));
  }
  std::vector<std::vector<float>> ratios(sums.size());
  size_t k = 0;
  for (size_t b = 0; b < sums.size(); ++b)
    for (size_t t = 0; t < sums[b].size(); ++t, k += 2)
      ratios[b].push_back(static_cast<float>(LambTrustRatio(flat[k], flat[k + 1], cfg.lamb_min_coeff, cfg.lamb_max_coeff)));
  optimizer.window.SetTrustRatios(std::move(ratios));
  return Status();
}

// Muon: block by block, u over every rank's pieces of its matrices, added across ranks (each
// element comes from one rank: the sum is exact), each matrix this rank's optimizer range
// touches orthogonalised whole on the compute device, this rank's slices of o kept for the
// update (Note [Muon]). Blocks without matrices take no part (every rank skips the same ones).
Status Engine::Impl::SetMuonUpdates(const AdamHyperParams& hp) {
  AdamHyperParams muon = hp;
  muon.rule = UpdateRule::kMuon;
  muon.lr = MuonLearningRate(cfg, hp.step - 1);
  muon.beta1 = cfg.muon.momentum;
  UpdateWindow& window = optimizer.window;
  window.SetMuonParams(muon);
  std::vector<float> o;
  for (int b = 0; b < num_blocks(); ++b) {
    const MuonTensors& tensors = window.muon_tensors(b);
    if (tensors.matrices.empty()) continue;
    STRATA_ASSIGN_OR_RETURN(const std::span<float> u, window.MuonDirections(b));
    if (plan.optim_sharded && io.comm->world_size() > 1) {
      Tracer::Span span(io.tracer, Track::kComm, "all-reduce muon b" + std::to_string(b));
      STRATA_RETURN_IF_ERROR(io.comm->AllReduce(u.data(), u.size(), DType::kF32, ReduceOp::kSum));
    }
    Tracer::Span span(io.tracer, Track::kOptimizer, "newton-schulz b" + std::to_string(b));
    const ElementRange mine = plan.blocks[b].optimizer;
    const std::span<float> kept = window.MuonUpdates(b);
    for (const MuonMatrix& m : tensors.matrices) {
      const int64_t from = std::max(m.begin, mine.begin), to = std::min(m.end(), mine.begin + mine.len);
      if (from >= to) continue;  // (another rank's)
      o.resize(static_cast<size_t>(m.rows * m.cols));
      STRATA_RETURN_IF_ERROR(OrthogonalizeMatrix(cfg.muon.ns, u.data() + m.begin, m.rows, m.cols, io.dev->device(), o.data())
                                 .WithContext(fmt::format("block {}", b)));
      std::copy(o.begin() + (from - m.begin), o.begin() + (to - m.begin), kept.begin() + (from - mine.begin));
    }
  }
  return Status();
}

// Starts the mode's update on the optimizer thread with one ready event per block.
Status Engine::Impl::LaunchUpdate(const AdamHyperParams& hp, Verdict verdict, int64_t step) {
  const int n = num_blocks();
  auto job = std::make_shared<UpdateJob>();
  job->hp = hp;
  job->verdict = verdict;
  job->ready.resize(n);
  OptimizerRun& run = optimizer.run;
  run.block_ready.assign(n, Event());
  for (int b = 0; b < n; ++b) {
    job->ready[b] = std::make_shared<HostEventState>();
    run.block_ready[b] = Event(job->ready[b]);
  }
  run.share_pending.assign(n, !plan.weights_sharded && plan.optim_sharded && io.comm->world_size() > 1);
  std::function<Status(UpdateJob&)> update = optimizer.mode->Launch(step, hp);
  // The early states go with the update: the compute thread never touches them while it runs.
  job->early = optimizer.window.TakeEarlyStates();
  run.done = optimizer.thread->Submit({{}, nullptr, [update, job] {
                                         Status s = update(*job);
                                         for (const auto& r : job->ready)
                                           if (!r->Ready()) r->Set(s.ok() ? Status() : s);  // waiters see the error
                                         return s;
                                       },
                                       "optimizer step", 0, {}});
  return Status();
}

UpdateModeParts Engine::Impl::update_mode_parts() {
  return {plan,
          model,
          state,
          optimizer.window,
          *optimizer.thread,
          *this,
          stats.ledger,
          io.tracer,
          [this] { return NextHyperParams(); },
          cfg.optimizer_overlap,
          cfg.delayed_update_from};
}

bool Engine::Impl::BlockReady(int b) const {
  const auto& ready = optimizer.run.block_ready;
  return !optimizer.mode->ComputeWaits() || b >= static_cast<int>(ready.size()) || ready[b].Ready();
}

// Block b's weights may be used: its update is done, and (stages 1-2) shared. A delayed
// update is not waited for: the step beside it reads the old weights.
Status Engine::Impl::AwaitBlock(int b) {
  OptimizerRun& run = optimizer.run;
  if (optimizer.mode->ComputeWaits()) STRATA_RETURN_IF_ERROR(WaitForUpdate(b, "optimizer step"));
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
  Tracer::Span span(e.Ready() ? nullptr : io.tracer, Track::kOptimizerWait, fmt::format("wait {} b{}", what, b));
  return e.Wait().WithContext(fmt::format("the {} of block {}", what, b));
}

Status Engine::Impl::Quiesce() {
  if (optimizer.mode) STRATA_RETURN_IF_ERROR(optimizer.mode->Quiesce());
  for (int b = 0; b < static_cast<int>(optimizer.run.block_ready.size()); ++b) STRATA_RETURN_IF_ERROR(AwaitBlock(b));
  STRATA_RETURN_IF_ERROR(optimizer.run.done.Wait());
  STRATA_RETURN_IF_ERROR(FlushRestoringWorking());
  // A state whose write-back failed is lost (its buffer went back to the pool): the run
  // cannot go on from it, and no checkpoint may be taken of it.
  return state.store ? state.store->WriteBackFailure() : Status();
}

// Stages 1 and 2 keep full working weights on every rank: the ranks share their updated
// shards, in host memory (the cpu tier) or, for a resident block, on the device.
Status Engine::Impl::ShareUpdatedWeights(int b) {
  const ShardLayout& layout = plan.blocks[b].layout;
  if (plan.resident[b]) {
    const torch::Tensor& weights = bufs.resident[b];
    std::byte* base = static_cast<std::byte*>(weights.data_ptr());
    bufs.resident_ready[b] = io.dev->AllGather(base + layout.begin() * plan.dsize, base, layout.shard, plan.compute,
                                            {bufs.resident_ready[b]});
    return Status();
  }
  Tracer::Span s(io.tracer, Track::kComm, "all-gather weights g" + std::to_string(b));
  std::byte* mem = state.store->CpuMemory(model.blocks[b].working).data();
  return io.comm->AllGather(mem + layout.begin() * plan.dsize, mem, layout.shard, cfg.compute_dtype);
}

}  // namespace strata
