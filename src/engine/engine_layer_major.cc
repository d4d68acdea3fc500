// Note [Layer-major schedule]: strata.schedule "layer_major" runs every micro-batch of the
// step through a block before the next block (the vertical schedule of GreedySnake, 2025),
// instead of each micro-batch through every block, forward and backward, before the next.
// A block is gathered once for the forward of the whole step and once for its backward: its
// working weights cross the disk or the host link 2 times per step instead of 2 x
// gradient_accumulation_steps. The price is memory: every micro-batch's block inputs (the
// activation checkpoints; with keep_activations every micro-batch's graphs) live until the
// backward, accumulation times what one micro-batch keeps (the estimator counts them).
//
// Arithmetic: block b's gradient of micro-batch i is computed from the same input, the same
// weights and the same output gradient as micro-batch-major, and each micro-batch's reduced
// gradient is added into the accumulator in micro-batch order (first writes, the rest add):
// the accumulators, and so the update, are bitwise those of the other schedule. Losses are
// summed in the same order. One exception: a tied embedding. The head's gradient of the tied
// table (pending_tied) is added into the owner block's flat gradient at the owner's backward;
// micro-batch-major that is micro-batch i's head share into micro-batch i's owner gradient,
// layer-major all heads have run first, so the sum of every micro-batch's head share goes into
// micro-batch 0's (inv x (e0 + h0 + ... + hA) + inv x e1 + ... instead of inv x (e0 + h0) +
// inv x (e1 + h1) + ...): the same sum in another order, equal within fp32 rounding (tested
// against a tolerance). Keeping one pending table per micro-batch would restore the order at
// vocabulary x width x 4 B per micro-batch of device memory.
//
// strata.fuse_micro_batches goes one step further: each block runs the step's micro-batches
// stacked as one batch, so the compute device too reads the block's weights once per direction
// per step (on a CPU, where each micro-batch's pass over the weights costs about what the
// disk's read of them does, that is the larger half of the saving), in larger matrix
// products. The head still runs one micro-batch at a time (its logits are the largest
// activations); the gradients of the stacked backward are the sum over the micro-batches,
// reduced and added once (times 1 / (accumulation x world), as their per-micro-batch sum
// would be). Rows are independent, so this is the same arithmetic up to the order of the
// sums inside the matrix products: equal within rounding, not bitwise (tested against a
// tolerance). LoRA dropout draws its masks per micro-batch: not with fusing.
//
// The block inputs wait where strata.block_inputs says (Note [Block inputs in the tiers]):
// every micro-batch's of a block brought back, one visit ahead, for that block's backward.
//
// The update modes see what they see micro-batch-major: the last micro-batch "begins" at the
// start (its gradients are final block by block during the backward), DoneReading comes with
// each block's last reduction, GradientFinal with its last micro-batch's.
#include "src/engine/engine_impl.h"
#include "strata/check.h"

namespace strata {

// The step's passes through each block: one per micro-batch, or fused one of all of them
// stacked, which is the whole step as one micro-batch (the first: the accumulators are
// written; the last). The head always runs micro-batch by micro-batch.
Status Engine::Impl::LayerMajor(const StepInputs& in, Gatherer& gather, double* loss_sum) {
  const int n = num_blocks();
  const size_t count = in.mbs.size();
  STRATA_CHECK(count > 0 && in.batches.size() == count && in.weights.size() == count) << "a step without micro-batches";
  std::vector<torch::Tensor> x(count), targets(count), masks(count);
  for (size_t i = 0; i < count; ++i) STRATA_RETURN_IF_ERROR(BatchToDevice(in.batches[i], &x[i], &targets[i], &masks[i]));
  const bool fused = cfg.fuse_micro_batches;
  std::vector<MicroBatch> passes = in.mbs;
  if (fused) {
    STRATA_RETURN_IF_ERROR(TorchCall("stack the micro-batches", [&] { x = {torch::cat(x, 0)}; }));
    passes = {MicroBatch{in.mbs[0].step, 0, true, true, in.mbs[0].sample}};
  }
  std::vector<Activations> acts(passes.size());
  BlockInputStash stash(*io.dev, state.store.get(), cfg.block_inputs_at, n, passes.size(), &step_counts);
  for (size_t p = 0; p < passes.size(); ++p) {
    acts[p].Reset(n, cfg.keep_activations);
    acts[p].stash = &stash;
    acts[p].pass = p;
    if (!fused) acts[p].packing = model::PackedLayout::Of(in.batches[p].positions);
    acts[p].router = NewRouterLoss();  // (none when fused: refused with a load-balancing loss)
  }
  if (fused && in.batches[0].positions.defined()) {  // the stacked rows' positions, stacked alike
    std::vector<torch::Tensor> positions;
    for (const data::Batch& batch : in.batches) positions.push_back(batch.positions);
    acts[0].packing = model::PackedLayout::Of(torch::cat(positions, 0));
  }
  ReadStatesEarly();
  optimizer.mode->BeginLastMicroBatch(in.mbs.back().step);

  for (int b = 0; b < n - 1; ++b) {
    STRATA_RETURN_IF_ERROR(gather.Acquire(b));
    for (size_t p = 0; p < passes.size(); ++p) {
      STRATA_RETURN_IF_ERROR(ForwardBlock(b, Pass::kTrain, &x[p], &acts[p], passes[p], gather, acts[p].packing.get()));
    }
    gather.Release();
  }
  STRATA_RETURN_IF_ERROR(AcquireHead(gather));
  const int64_t rows = fused ? x[0].size(0) / static_cast<int64_t>(count) : 0;
  std::vector<torch::Tensor> grad_out(fused ? count : 0);
  for (size_t i = 0; i < count; ++i) {
    Activations stacked;  // fused: the head's gradient joins the others before the backward
    if (fused) stacked.Reset(n, false);
    Activations& act = fused ? stacked : acts[i];
    const torch::Tensor part = fused ? x[0].narrow(0, static_cast<int64_t>(i) * rows, rows) : x[i];
    STRATA_ASSIGN_OR_RETURN(double loss, HeadPass(part, targets[i], masks[i], in.batches[i].rows, in.weights[i], Pass::kTrain, &act));
    if (fused) grad_out[i] = act.grad_out;
    *loss_sum += loss;
    STRATA_RETURN_IF_ERROR(ReduceGradients(n - 1, in.mbs[i]));  // before the next head's backward adds to them
  }
  gather.Release();
  x.clear();
  if (fused) STRATA_RETURN_IF_ERROR(TorchCall("stack the gradients", [&] { acts[0].grad_out = torch::cat(grad_out, 0); }));
  grad_out.clear();

  for (int b = n - 2; b >= 0 && BackwardVisits(b); --b) {
    STRATA_RETURN_IF_ERROR(gather.Acquire(b));
    for (size_t p = 0; p < passes.size(); ++p) {
      STRATA_RETURN_IF_ERROR(BackwardBlock(b, acts[p], passes[p], gather));
      STRATA_RETURN_IF_ERROR(ReduceGradients(b, passes[p]));
    }
    gather.Release();
    ReadStatesEarly();
  }
  return Status();
}

}  // namespace strata
