// The step's compute half: each block's forward (keeping its input when training), the
// head's forward and backward, each block's backward (by recomputation or through its kept
// graph), and the gradient reductions into the host accumulators; the micro-batch-major
// schedule that strings them together (the layer-major one: engine_layer_major.cc), eval's
// forward. Engine::Step and Engine::EvalLoss.
//
// On a device the work is a pipeline of queues (compute_device.h): the Gatherer
// (gatherer.cc) copies in and all-gathers the next block while one computes; ReduceGradients flattens a block's
// gradients, reduce-scatters them, copies the shard out and accumulates it on the host
// callback thread, each stage waiting for the events of the ones it depends on and for the
// buffer it rewrites to be free. On the host every stage completes at once, in this order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "src/engine/experts/block_routing.h"
#include "src/engine/engine_impl.h"
#include "src/engine/experts/expert_parts.h"
#include "src/model/tiled_loss.h"
#include "src/model/tiled_rows.h"
#include "src/engine/loss_weights.h"
#include "src/engine/lr_schedule.h"
#include "strata/check.h"
#include "strata/log.h"

namespace strata {
namespace {

// Adds one micro-batch's reduced gradient, times `inv` (1 / (accumulation x world)), to a
// block's accumulator (fp32 or bf16 bits: one fused multiply-add in fp32, rounded once; Note
// [Gradient accumulation]); `first`, the step's first micro-batch, writes it instead, so the
// accumulators are never zeroed; `plant`: then an Inf in its first element
// (strata.debug_overflow_step). On LibTorch's thread count, as its add_ was.
Status Accumulate(std::byte* acc, bool bf16, const torch::Tensor& part, double inv, bool first, bool plant) {
  const auto n = static_cast<size_t>(part.numel());
  const float* p = part.data_ptr<float>();
  const AdamOptions threads{.num_threads = at::get_num_threads()};
  if (bf16) {
    const std::span<uint16_t> a(reinterpret_cast<uint16_t*>(acc), n);
    AccumulateGradient(a, {p, n}, static_cast<float>(inv), first, threads);
    if (plant && n > 0) a[0] = 0x7f80;  // +Inf
  } else {
    const std::span<float> a(reinterpret_cast<float*>(acc), n);
    AccumulateGradient(a, {p, n}, static_cast<float>(inv), first, threads);
    if (plant && n > 0) a[0] = std::numeric_limits<float>::infinity();
  }
  return Status();
}

// One micro-batch's loss as the step sums it: without a mask today's mean over B x T; with
// one the masked mean times `weight` (Note [Loss mask], loss_weights.cc). With strata.loss_chunk
// > 0 the head's logits are made a tile at a time (Note [Tiled loss]), each rank of
// `vocab_group` its share of the vocabulary's (Note [Tensor parallel]).
torch::Tensor MicroBatchLoss(model::Block& head, const torch::Tensor& x, const torch::Tensor& targets,
                             const torch::Tensor& mask, double weight, int64_t chunk, Communicator* vocab_group) {
  torch::Tensor loss = chunk > 0 ? model::TiledLanguageModelLoss(head.HeadHidden(x), head.HeadWeight(), targets, mask, chunk,
                                                                   head.LogitSoftcap(), vocab_group)
                       : mask.defined() ? model::MaskedLanguageModelLoss(head.Forward(x), targets, mask)
                                        : model::LanguageModelLoss(head.Forward(x), targets);
  return !mask.defined() || weight == 1.0 ? loss : loss * weight;
}

// What a failed step leaves is finished or undone before its error returns: the update
// mode's part (the delayed update's old weights released, speculative updates rolled back),
// the device's queues, the prefetches, the states read early.
class StepCleanup {
 public:
  StepCleanup(UpdateMode& mode, UpdateWindow& window, ComputeDevice& dev, PrefetchScheduler* prefetch)
      : mode_(mode), window_(window), dev_(dev), prefetch_(prefetch) {}
  StepCleanup(const StepCleanup&) = delete;
  StepCleanup& operator=(const StepCleanup&) = delete;
  void Dismiss() { armed_ = false; }
  ~StepCleanup() {
    if (!armed_) return;
    mode_.MicroBatchesEnded();
    dev_.Synchronize().IgnoreError();
    if (prefetch_) prefetch_->Drain();
    window_.DropEarlyStates();
    if (Status r = mode_.Abandon(); !r.ok()) LogError("{}", r.message());
  }

 private:
  UpdateMode& mode_;
  UpdateWindow& window_;
  ComputeDevice& dev_;
  PrefetchScheduler* prefetch_;
  bool armed_ = true;
};

}  // namespace

// Note [LoRA dropout]: the seed depends on the run's seed, the sample (the data index: a
// sample gets the same masks on any rank count) and the block.
void Engine::Impl::ArmLoraDropout(int b, const MicroBatch& mb, std::optional<model::LoraDropout>* dropout) const {
  if (cfg.model.lora.dropout > 0) dropout->emplace((cfg.seed * 1000003ULL + mb.sample) * 1000003ULL + static_cast<uint64_t>(b));
}

model::BlockContext Engine::Impl::BlockContextOf(const model::PackedLayout* packing,
                                                 std::optional<model::LoraDropout>& dropout, BlockRouting& routing,
                                                 model::RouterLoss* router_loss) const {
  return {.packing = packing,
          .dropout = dropout ? &*dropout : nullptr, .routing = routing.context(),
          .router_loss = router_loss,
          .mlp_chunk = cfg.mlp_chunk,                                                         // Note [Tiled MLP]
          .sequence_group = seq.group(), .sequence_offset = seq.offset(cfg.model.seq_len),  // Note [Ulysses]
          .tensor_group = seq.tensor_group()};                                               // Note [Tensor parallel]
}

// Reads of the visits whose working weights are on NVMe; null when there are none.
std::unique_ptr<PrefetchScheduler> Engine::Impl::MakePrefetcher(const std::vector<Visit>& order) {
  if (!state.pools.param) return nullptr;
  std::vector<PrefetchScheduler::Item> items;
  // A block's read waits for its update (Note [Optimizer overlap]); not for a delayed one,
  // whose step reads the old weights (Note [Delayed update]).
  const auto& ready = optimizer.run.block_ready;
  const bool waits = optimizer.mode->ComputeWaits();
  for (const Visit& v : order) {
    if (!model.blocks[v.block].working.valid() || state.store->home(model.blocks[v.block].working) != Tier::kNvme)
      continue;
    items.push_back({v.block, model.blocks[v.block].working,
                     waits && v.block < static_cast<int>(ready.size()) ? ready[v.block] : Event(), {}});
    // A sparse layer fetching its routed experts reads its other parts ahead, the experts once
    // routed (Note [Expert-aware fetching]).
    const std::vector<WorkingPart> parts = PartsOfWorking(plan, v.block);
    for (size_t i = 0; i < parts.size(); ++i)
      if (parts[i].expert < 0) items.back().parts.push_back(static_cast<int>(i));
  }
  if (items.empty()) return nullptr;
  const uint64_t budget = std::max<uint64_t>(1, cfg.prefetch_bucket_size * DTypeSize(cfg.compute_dtype));
  return std::make_unique<PrefetchScheduler>(std::move(items), state.store.get(), state.pools.param.get(), budget, io.tracer);
}

Status Engine::Impl::BatchToDevice(const data::Batch& batch, torch::Tensor* inputs, torch::Tensor* targets,
                                   torch::Tensor* mask) const {
  return TorchCall("batch to the device", [&] {
    *inputs = batch.inputs.to(io.dev->device());
    *targets = batch.targets.to(io.dev->device());
    if (batch.loss_mask.defined()) *mask = batch.loss_mask.to(io.dev->device());
  });
}

GatherParts Engine::Impl::gather_parts() { return {plan, io, model, state, bufs, working_format, *this, step_counts}; }

void Engine::Impl::ReadStatesEarly() {
  if (optimizer.run.done.Ready() && optimizer.mode->ReadsStatesEarly()) optimizer.window.ReadStatesEarly();
}

// A tied head multiplies with the embedding's table, gathered into the tied slot.
void Engine::Impl::BindTiedHead() {
  if (!model.tie) return;
  BlockRuntime& owner = model.blocks[model.tie->owner_block];
  model.blocks.back().module->BindTiedWeight(owner.params[owner.tied_slot]);
}

// Flattens block b's parameter gradients (plus the head's pending share of a tied weight),
// reduces them across ranks and adds this rank's range, times 1 / (accumulation x world),
// to its fp32 accumulator: on the host at once; on a device through its queues, the
// accumulation on the host callback thread.
Status Engine::Impl::ReduceGradients(int b, const MicroBatch& mb) {
  UpdateMode& mode = *optimizer.mode;
  mode.DoneReading(b, mb);
  if (plan.Frozen(b)) return Status();  // no rank has a gradient of it (LoRA's head)
  if (AccumulatesInPlace(b)) return AccumulateInPlace(b, mb);
  BlockRuntime& br = model.blocks[b];
  const BlockPlan& bp = plan.blocks[b];
  GradSlot& g = bufs.grads[bufs.next_grad++ % bufs.grads.size()];
  // LoRA: only the trainable end [from, padded), all-reduced (plan.lora); else the whole group.
  const int64_t from = plan.GradFlatBegin(b);
  torch::Tensor flat = g.flat.narrow(0, 0, plan.GradFlatLen(b));
  STRATA_RETURN_IF_ERROR(io.ComputeAfter(g.flat_read, "wait gradient buffer"));
  STRATA_RETURN_IF_ERROR(TorchCall("flatten gradients", [&] {
    Tracer::Span span(io.tracer, Track::kCompute, "flatten grads g" + std::to_string(b));
    // Each gradient copied to its slot; only what no gradient covers (padding, parameters
    // without one) is zeroed: a pass over the whole buffer costs as much as the copies.
    int64_t covered = 0;  // flat[0, covered) is written
    for (size_t i : br.by_offset) {
      const torch::Tensor& grad = br.params[i].grad();
      if (grad.defined()) {
        const int64_t at = br.slots[i].offset - from;
        if (at > covered) flat.narrow(0, covered, at - covered).zero_();
        flat.narrow(0, at, br.slots[i].numel).copy_(grad.reshape(-1));
        covered = std::max(covered, at + br.slots[i].numel);
      }
      br.params[i].mutable_grad().reset();
    }
    if (covered < flat.numel()) flat.narrow(0, covered, flat.numel() - covered).zero_();
    if (model.tie && b == model.tie->owner_block && !plan.lora) {
      flat.narrow(0, br.slots[br.tied_slot].offset, bufs.pending_tied.numel()).add_(bufs.pending_tied);
      bufs.pending_tied.zero_();
    }
  }));
  const double inv = 1.0 / (static_cast<double>(cfg.grad_accum) * io.comm->world_size());
  const Event flattened = io.dev->RecordCompute();
  // Alone, the flat gradients are the reduced ones: no collective (a copy of them, before).
  const bool alone = io.comm->world_size() == 1;
  const bool scatter = plan.ScattersGradients();
  torch::Tensor out = scatter ? g.reduced.narrow(0, 0, bp.layout.shard) : flat;
  Event reduced = flattened;
  if (!alone) {
    Tracer::Span span(io.dev->is_host() ? io.tracer : nullptr, Track::kComm,
                      (scatter ? "reduce-scatter g" : "all-reduce g") + std::to_string(b));
    reduced = scatter ? io.dev->ReduceScatter(flat.data_ptr(), out.data_ptr(), bp.layout.shard, DType::kF32,
                                           ReduceOp::kSum, {flattened, g.reduced_read})
                      : io.dev->AllReduce(flat.data_ptr(), flat.numel(), DType::kF32, ReduceOp::kSum, {flattened});
  }
  const bool plant = PlantsOverflow(b, mb), first = mb.first, bf16 = plan.gsize == 2;
  // The accumulator's range within `out` (with LoRA only the trainable end is accumulated).
  const int64_t acc_at = bp.grad.len == 0 ? 0 : bp.grad.begin - (scatter ? bp.layout.begin() : from);
  if (plan.device_accum) return AccumulateOnDevice(b, g, out.narrow(0, acc_at, bp.grad.len), reduced, inv, mb);
  STRATA_RETURN_IF_ERROR(mode.BeforeAccumulate(b));
  if (io.dev->is_host()) {
    STRATA_RETURN_IF_ERROR(reduced.Wait());
    Tracer::Span span(io.tracer, Track::kCompute, "accumulate g" + std::to_string(b));
    STRATA_RETURN_IF_ERROR(Accumulate(br.grad, bf16, out.narrow(0, acc_at, bp.grad.len), inv, first, plant));
    if (mb.last) mode.GradientFinal(b, Event());
    return Status();
  }
  // Off the host: the shard leaves the device as soon as its collective is done and is
  // added to the accumulator on the host callback thread, while compute goes on.
  torch::Tensor host = g.host.narrow(0, 0, out.numel());
  const Event copied = io.dev->CopyOut(host.data_ptr(), out, {reduced, g.host_read});
  g.flat_read = scatter ? reduced : copied;
  g.reduced_read = copied;
  g.host_read = io.dev->OnHost(
      [this, b, last = mb.last, acc = br.grad, bf16, part = host.narrow(0, acc_at, bp.grad.len), inv, first, plant] {
        Status s = Accumulate(acc, bf16, part, inv, first, plant);
        if (s.ok() && last) TakeEarlySums(b);
        return s;
      },
      {copied});
  if (mb.last) mode.GradientFinal(b, g.host_read);
  return Status();
}

// Note [Early gradient sums]: the global gradient norm needs every block's sum of squares
// before the update may start, and read from the accumulators after the backward it cost the
// 7 B run on the GPU machine 0.45 s of every 6.9 s step (27 GB at ~60 GB/s, nothing else
// running). Off the host each block's last accumulation runs on the host callback thread while
// the backward of the blocks below goes on, so the block's sum is taken there, right after its
// gradient became final; OptimizerStep adds the sums in block order as before, and both places
// use optimizer.norm_threads, so the norm has the same bits (tested on the fake device against
// the host device). On the host the accumulation is on the compute thread: nothing to hide.
void Engine::Impl::TakeEarlySums(int b) {
  optimizer.early_sums[b] = BlockGradSums(b);  // read after the step's Synchronize: no lock
}

// Note [Device accumulation]: with accumulation off the host, each micro-batch's reduced
// gradients are added on the device (fp32: acc = inv x part, then acc += inv x part, one
// fused multiply-add each, as the host's AccumulateGradient), and only the last micro-batch
// copies the sum out, written into the host accumulator (rounded once for bf16 ones). The
// link and the host's memory carry one copy of the gradients per step instead of one per
// micro-batch: for a 7 B model at 16 micro-batches, 27 GB instead of 431 GB per step.
Status Engine::Impl::AccumulateOnDevice(int b, GradSlot& g, const torch::Tensor& part, const Event& reduced,
                                        double inv, const MicroBatch& mb) {
  torch::Tensor& acc = bufs.accum[b];
  const bool first = mb.first;
  // The first micro-batch overwrites the sum the last step's copy read.
  STRATA_RETURN_IF_ERROR(io.ComputeAfter(reduced, "wait gradient reduction"));
  if (first) STRATA_RETURN_IF_ERROR(io.ComputeAfter(bufs.accum_read[b], "wait gradient copy"));
  STRATA_RETURN_IF_ERROR(TorchCall("device accumulation", [&] {  // queued on the device: no host span
    if (first) at::mul_out(acc, part, at::Scalar(static_cast<float>(inv)));
    else acc.add_(part, at::Scalar(static_cast<float>(inv)));
  }));
  const Event summed = io.dev->RecordCompute();
  g.flat_read = g.reduced_read = summed;
  if (!mb.last) return Status();
  STRATA_RETURN_IF_ERROR(optimizer.mode->BeforeAccumulate(b));
  const bool plant = PlantsOverflow(b, mb);
  if (!plant && b < static_cast<int>(bufs.accum_host_pins.size()) && bufs.accum_host_pins[b].pinned()) {
    const Event copied = io.dev->CopyOut(model.blocks[b].grad, acc, {summed});  // Note [Sums straight into the accumulators]
    bufs.accum_read[b] = copied;
    const Event taken = io.dev->OnHost([this, b] { TakeEarlySums(b); return Status(); }, {copied});
    optimizer.mode->GradientFinal(b, taken);
    return Status();
  }
  torch::Tensor host = g.host.narrow(0, 0, acc.numel());
  const Event copied = io.dev->CopyOut(host.data_ptr(), acc, {summed, g.host_read});
  bufs.accum_read[b] = copied;
  g.host_read = io.dev->OnHost(
      [this, b, acc = model.blocks[b].grad, bf16 = plan.gsize == 2, host, plant] {
        Status s = Accumulate(acc, bf16, host, 1.0, /*first=*/true, plant);
        if (s.ok()) TakeEarlySums(b);
        return s;
      },
      {copied});
  optimizer.mode->GradientFinal(b, g.host_read);
  return Status();
}

// On rank 0, or on every rank at stage 0, where each rank judges its own (replicated)
// gradients and the overflow flag is not reduced.
bool Engine::Impl::PlantsOverflow(int b, const MicroBatch& mb) const {
  return b == 0 && mb.last && cfg.debug_overflow_step == mb.step &&
         (io.comm->rank() == 0 || !plan.optim_sharded);
}

// Block b (0 .. N-2) of one micro-batch on *x, which becomes the block's output. Training
// keeps the block's input in `act` (the activation checkpoint), or with keep_activations its
// output with its autograd graph. The block's weights are acquired by the caller.
Status Engine::Impl::ForwardBlock(int b, Pass pass, torch::Tensor* x, Activations* act, const MicroBatch& mb,
                                  Gatherer& gather, const model::PackedLayout* packing) {
  const bool train = pass == Pass::kTrain;
  Tracer::Span span(io.tracer, Track::kCompute, (train ? "forward b" : "eval b") + std::to_string(b));
  BlockRouting routing(b, plan.blocks[b].experts.count, train, experts, step_counts, gather);  // Note [Expert-aware fetching]
  const Status ran = TorchCall("forward", [&] {
    std::optional<model::LoraDropout> dropout;
    if (train) ArmLoraDropout(b, mb, &dropout);
    const model::BlockContext ctx = BlockContextOf(packing, dropout, routing, train && act ? act->router.get() : nullptr);
    if (train && cfg.keep_activations) {  // each block its own graph, from its input (a leaf) to its output
      torch::Tensor in = b == 0 ? *x : x->detach().requires_grad_(true);
      act->inputs[b] = in;
      act->outputs[b] = model.blocks[b].module->Forward(in, ctx);
      *x = act->outputs[b].detach();
      return;
    }
    torch::NoGradGuard no_grad;
    if (train) act->inputs[b] = *x;
    *x = model.blocks[b].module->Forward(*x, ctx);
  });
  STRATA_RETURN_IF_ERROR(routing.status());  // a routed fetch failed: what ran on the stale experts is void
  STRATA_RETURN_IF_ERROR(ran);
  if (train && !cfg.keep_activations && act->stash) return act->stash->Keep(b, act->pass, &act->inputs[b]);
  return Status();
}

// The head's loss of one micro-batch (unscaled: MicroBatchLoss, with a loss mask weighed by
// `weight`). Training backpropagates through the head: the gradient of its input is left in
// act->grad_out, the tied weight's gradient added to the pending one; its parameter gradients
// wait for ReduceGradients(N-1).
StatusOr<double> Engine::Impl::HeadPass(const torch::Tensor& x, const torch::Tensor& targets, const torch::Tensor& mask,
                                        const torch::Tensor& rows, double weight, Pass pass, Activations* act) {
  const int n = num_blocks();
  const bool train = pass == Pass::kTrain;
  double loss = 0;
  Tracer::Span span(io.tracer, Track::kCompute, train ? "head fwd+bwd" : "eval head");
  STRATA_RETURN_IF_ERROR(TorchCall("head", [&] {
    BindTiedHead();
    model::Block& head = *model.blocks[n - 1].module;
    // The step's loss: the language model's, or DPO's over the micro-batch's pairs (Note [DPO]).
    const auto objective = [&](const torch::Tensor& hidden) {
      return dpo ? dpo->Loss(head, hidden, targets, mask, rows, &dpo_tally, seq.group())
                 : MicroBatchLoss(head, hidden, targets, mask, weight, cfg.loss_chunk, seq.tensor_group());
    };
    if (pass == Pass::kLogProbs) {
      torch::NoGradGuard no_grad;
      row_logps = HeadRowLogProbs(head, x, targets, mask).to(torch::kCPU);
      return;
    }
    if (!train) {
      torch::NoGradGuard no_grad;
      loss = objective(x).item<double>();
      return;
    }
    act->inputs[n - 1] = x;
    torch::Tensor in = x.detach().requires_grad_(true);
    torch::Tensor l = objective(in);
    loss = l.item<double>();
    // The routers' load-balancing loss: its gradient reaches them in their layers' backward.
    if (act->router) loss += act->router->Finish(optimizer.scaler.scale());
    (l * optimizer.scaler.scale()).backward();
    act->grad_out = in.grad();
    if (model.tie) {
      BlockRuntime& owner = model.blocks[model.tie->owner_block];
      torch::Tensor& w = owner.params[owner.tied_slot];
      if (w.grad().defined()) bufs.pending_tied.add_(w.grad().reshape(-1).to(torch::kFloat32));
      w.mutable_grad().reset();
    }
  }));
  return loss;
}

// The weights the head needs: the tied owner's (still bound in the tied slot since its
// forward, or gathered again) and its own.
Status Engine::Impl::AcquireHead(Gatherer& gather) {
  if (model.tie && plan.tied_slot) gather.Reuse(&bufs.tied);
  else if (model.tie) STRATA_RETURN_IF_ERROR(gather.Acquire(model.tie->owner_block));
  return gather.Acquire(num_blocks() - 1);
}

// Block b's backward of one micro-batch (act->grad_out in, the gradient of its input out): by
// recomputation from its input, or through its kept graph. The graph saved the parameter
// tensors, whose data the caller re-bound to this visit's gather buffer.
Status Engine::Impl::BackwardBlock(int b, Activations& act, const MicroBatch& mb, Gatherer& gather) {
  if (act.outputs.empty() && act.stash) STRATA_RETURN_IF_ERROR(act.stash->Fetch(b, act.pass, &act.inputs[b]));
  Tracer::Span span(io.tracer, Track::kCompute, "backward b" + std::to_string(b));
  BlockRouting routing(b, plan.blocks[b].experts.count, /*train=*/true, experts, step_counts, gather);
  const Status ran = TorchCall("backward", [&] {
    std::optional<model::LoraDropout> dropout;
    ArmLoraDropout(b, mb, &dropout);  // a recomputation draws the forward's masks
    const model::BlockContext ctx = BlockContextOf(act.packing.get(), dropout, routing, act.router.get());
    if (!act.outputs.empty()) {  // kept
      act.outputs[b].backward(act.grad_out);
      act.outputs[b] = torch::Tensor();  // its activations go
      if (b > 0) act.grad_out = act.inputs[b].grad();
    } else if (b == 0) {
      model.blocks[0].module->Forward(act.inputs[0], ctx).backward(act.grad_out);
    } else {
      torch::Tensor in = act.inputs[b].detach().requires_grad_(true);
      model.blocks[b].module->Forward(in, ctx).backward(act.grad_out);
      act.grad_out = in.grad();
    }
    act.inputs[b] = torch::Tensor();  // the checkpoint is spent
  });
  STRATA_RETURN_IF_ERROR(routing.status());  // (as in ForwardBlock)
  return ran;
}

// A micro-batch's load-balancing loss (Note [Router loss]), or null without one.
std::shared_ptr<model::RouterLoss> Engine::Impl::NewRouterLoss() const {
  const model::MoeOptions& moe = cfg.model.moe;
  if (moe.aux_loss_coef <= 0) return nullptr;
  return std::make_shared<model::RouterLoss>(moe.num_experts, moe.top_k, moe.aux_loss_coef, seq.group());
}

// The backward stops above a frozen embedding (LoRA: not in the visit plan).
bool Engine::Impl::BackwardVisits(int b) const { return b > 0 || !plan.Frozen(0); }

// One micro-batch through every block (the micro-batch-major schedule, and eval): its loss.
// Training keeps each block's input and runs the head's backward, whose gradients are
// reduced; the gradient of the head's input is left in act->grad_out for Backward().
StatusOr<double> Engine::Impl::Forward(const data::Batch& batch, double loss_weight, Pass pass, Gatherer& gather,
                                       Activations* act, const MicroBatch& mb) {
  const int n = num_blocks();
  const bool train = pass == Pass::kTrain;
  STRATA_CHECK(!train || act) << "a training forward needs somewhere to keep its activations";
  torch::Tensor x, targets, mask;
  STRATA_RETURN_IF_ERROR(BatchToDevice(batch, &x, &targets, &mask));
  std::shared_ptr<const model::PackedLayout> packing = model::PackedLayout::Of(batch.positions);
  if (train) {
    act->Reset(n, cfg.keep_activations);
    act->packing = packing;  // armed per block, in its forward and its backward
    act->router = NewRouterLoss();
  }
  for (int b = 0; b < n - 1; ++b) {
    STRATA_RETURN_IF_ERROR(gather.Acquire(b));
    STRATA_RETURN_IF_ERROR(ForwardBlock(b, pass, &x, act, mb, gather, packing.get()));
    gather.Release();
  }
  STRATA_RETURN_IF_ERROR(AcquireHead(gather));
  StatusOr<double> loss = HeadPass(x, targets, mask, batch.rows, loss_weight, pass, act);
  gather.Release();
  if (train && loss.ok()) STRATA_RETURN_IF_ERROR(ReduceGradients(n - 1, mb));
  return loss;
}

// Backward of one micro-batch through blocks N-2..0, each gathered again.
Status Engine::Impl::Backward(Activations& act, Gatherer& gather, const MicroBatch& mb) {
  for (int b = num_blocks() - 2; b >= 0 && BackwardVisits(b); --b) {
    STRATA_RETURN_IF_ERROR(gather.Acquire(b));
    STRATA_RETURN_IF_ERROR(BackwardBlock(b, act, mb, gather));
    gather.Release();
    STRATA_RETURN_IF_ERROR(ReduceGradients(b, mb));
    if (mb.last) ReadStatesEarly();  // one sub-group per block: among the backward's reads
  }
  return Status();
}

// The micro-batch-major schedule: each micro-batch forward and backward through every block.
Status Engine::Impl::MicroBatchMajor(const StepInputs& in, Gatherer& gather, double* loss_sum) {
  BlockInputStash stash(*io.dev, state.store.get(), cfg.block_inputs_at, num_blocks(), 1, &step_counts);
  for (size_t i = 0; i < in.mbs.size(); ++i) {
    const MicroBatch& mb = in.mbs[i];
    if (mb.last) {
      ReadStatesEarly();  // hidden behind this micro-batch (more during its backward)
      optimizer.mode->BeginLastMicroBatch(mb.step);
    }
    Activations act;
    act.stash = &stash;
    STRATA_ASSIGN_OR_RETURN(double loss, Forward(in.batches[i], in.weights[i], Pass::kTrain, gather, &act, mb));
    STRATA_RETURN_IF_ERROR(Backward(act, gather, mb));
    *loss_sum += loss;
  }
  return Status();
}

StatusOr<StepStats> Engine::Step(int64_t step, const data::TokenDataset& data) {
  Impl& m = *impl_;
  StepStats st;
  st.step = step;
  const double t0 = m.io.tracer ? m.io.tracer->Now() : 0;
  const auto wall0 = std::chrono::steady_clock::now();
  const int world = m.io.comm->world_size();
  const int data_ranks = m.seq.data_ranks(), data_rank = m.seq.data_rank();  // whole rows: the world
  UpdateMode& mode = *m.optimizer.mode;
  STRATA_RETURN_IF_ERROR(m.CheckDpoReference());
  m.optimizer.window.DropEarlyStates();  // left by a step that failed before its optimizer ran
  m.experts.BeginStep();
  for (auto& sums : m.optimizer.early_sums) sums.reset();  // likewise
  STRATA_RETURN_IF_ERROR(m.FlushRestoringWorking());  // a checkpoint's last masters (RestoreState)

  StepInputs in;
  for (int64_t i = 0; i < m.cfg.grad_accum; ++i) {
    in.mbs.push_back({step, i, i == 0, i + 1 == m.cfg.grad_accum,
                      static_cast<uint64_t>((step * m.cfg.grad_accum + i) * data_ranks + data_rank)});
    in.batches.push_back(m.seq.Slice(data.Get(data::Split::kTrain, in.mbs.back().sample, m.cfg.micro_batch)));
  }
  in.weights.assign(m.cfg.grad_accum, 1.0);  // Note [Loss mask]; DPO: the mean over pairs
  if (data.has_loss_mask() && !m.dpo) {
    STRATA_ASSIGN_OR_RETURN(in.weights, BatchLossWeights(data, data::Split::kTrain,
                                                         static_cast<uint64_t>(step * m.cfg.grad_accum * data_ranks),
                                                         m.seq, world, in.batches, m.cfg.micro_batch,
                                                         fmt::format("step {}", step)));
  }
  const std::vector<Visit> visits = m.plan.Visits(static_cast<int>(BlockPasses(m.cfg)), /*backward=*/true);
  std::unique_ptr<PrefetchScheduler> prefetch = m.MakePrefetcher(visits);
  double loss_sum = 0;
  {
    Gatherer gather(m.gather_parts(), visits, prefetch.get(), m.on_step_visit);
    StepCleanup cleanup(*m.optimizer.mode, m.optimizer.window, *m.io.dev, prefetch.get());  // on an error: what the step started, finished or undone
    m.step_counts = StepStats();
    m.dpo_tally = model::DpoTally();
    Status s = m.cfg.layer_major ? m.LayerMajor(in, gather, &loss_sum) : m.MicroBatchMajor(in, gather, &loss_sum);
    st.block_inputs_written = m.step_counts.block_inputs_written;
    st.block_inputs_read = m.step_counts.block_inputs_read;
    st.experts_routed = m.step_counts.experts_routed;
    st.experts_fetched = m.step_counts.experts_fetched;
    if (!s.ok()) return s.WithContext(fmt::format("step {}", step));
    cleanup.Dismiss();
  }
  mode.MicroBatchesEnded();
  {  // every gradient shard accumulated before the optimizer reads the accumulators
    Tracer::Span span(m.io.dev->is_host() ? nullptr : m.io.tracer, Track::kWait, "wait gradients to host");
    STRATA_RETURN_IF_ERROR(m.io.dev->Synchronize());
  }
  if (prefetch) m.stats.prefetch_high_water = std::max(m.stats.prefetch_high_water, prefetch->high_water_bytes());
  prefetch.reset();

  float loss_buf = static_cast<float>(loss_sum);
  STRATA_RETURN_IF_ERROR(m.io.comm->AllReduce(&loss_buf, 1, DType::kF32, ReduceOp::kSum));
  st.loss = loss_buf / static_cast<double>(m.cfg.grad_accum * world);
  if (m.dpo) {
    STRATA_ASSIGN_OR_RETURN(st.dpo, m.SumOverRanks(m.dpo_tally));
  }
  st.loss_scale = m.optimizer.scaler.scale();
  st.lr = LearningRate(m.cfg, m.optimizer.adam_steps);  // (the schedule counts applied updates)
  STRATA_ASSIGN_OR_RETURN(bool applied, m.OptimizerStep(step, &st));
  st.skipped = !applied;
  st.tokens = m.cfg.micro_batch * m.cfg.model.seq_len * m.cfg.grad_accum * data_ranks;
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  if (m.io.tracer) {
    st.wait_s = m.io.tracer->Total(Track::kWait, t0);
    st.optimizer_wait_s = m.io.tracer->Total(Track::kOptimizerWait, t0);
    st.compute_s = m.io.tracer->Total(Track::kCompute, t0);
    st.comm_s = m.io.tracer->Total(Track::kComm, t0);
    st.optimizer_s = m.io.tracer->Total(Track::kOptimizer, t0);
    st.nvme_read_bytes = m.io.tracer->Bytes(Track::kNvmeRead, t0);
    st.nvme_write_bytes = m.io.tracer->Bytes(Track::kNvmeWrite, t0);
  }
  return st;
}

// One batch forward through every block, its weights gathered for this pass alone; on an error
// the device's queues and the reads are finished before it returns.
StatusOr<double> Engine::Impl::ForwardOnly(const data::Batch& batch, double weight, Pass pass) {
  const std::vector<Visit> visits = plan.Visits(1, /*backward=*/false);
  std::unique_ptr<PrefetchScheduler> prefetch = MakePrefetcher(visits);
  StatusOr<double> loss = 0.0;
  {
    Gatherer gather(gather_parts(), visits, prefetch.get());
    loss = Forward(batch, weight, pass, gather, nullptr, MicroBatch{});
  }
  if (!loss.ok()) {
    io.dev->Synchronize().IgnoreError();
    if (prefetch) prefetch->Drain();
  }
  return loss;
}

StatusOr<double> Engine::EvalLoss(const data::TokenDataset& data, int64_t batches) {
  Impl& m = *impl_;
  if (!m.optimizer.mode->ComputeWaits()) STRATA_RETURN_IF_ERROR(m.Quiesce());  // the latest weights (Note [Delayed update])
  STRATA_RETURN_IF_ERROR(m.FlushRestoringWorking());         // a checkpoint's last masters (RestoreState)
  STRATA_RETURN_IF_ERROR(m.CheckDpoReference());
  const int world = m.io.comm->world_size(), data_ranks = m.seq.data_ranks(), data_rank = m.seq.data_rank();
  std::vector<data::Batch> eval;
  for (int64_t i = 0; i < batches; ++i)
    eval.push_back(
        m.seq.Slice(data.Get(data::Split::kEval, static_cast<uint64_t>(i * data_ranks + data_rank), m.cfg.micro_batch)));
  std::vector<double> weights(batches, 1.0);  // Note [Loss mask]; DPO: the mean over pairs
  if (data.has_loss_mask() && !m.dpo) {
    STRATA_ASSIGN_OR_RETURN(weights, BatchLossWeights(data, data::Split::kEval, 0, m.seq, world, eval,
                                                      m.cfg.micro_batch, "eval"));
  }
  double sum = 0;
  m.dpo_tally = model::DpoTally();
  for (int64_t i = 0; i < batches; ++i) {
    StatusOr<double> loss = m.ForwardOnly(eval[i], weights[i], Pass::kEval);
    if (!loss.ok()) return loss.status().WithContext("eval");
    sum += *loss;
  }
  float buf = static_cast<float>(sum);
  STRATA_RETURN_IF_ERROR(m.io.comm->AllReduce(&buf, 1, DType::kF32, ReduceOp::kSum));
  if (m.dpo) {
    STRATA_ASSIGN_OR_RETURN(m.eval_dpo, m.SumOverRanks(m.dpo_tally));
  }
  return static_cast<double>(buf) / static_cast<double>(batches * world);
}

}  // namespace strata
