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
// The update modes see what they see micro-batch-major: the last micro-batch "begins" at the
// start (its gradients are final block by block during the backward), DoneReading comes with
// each block's last reduction, GradientFinal with its last micro-batch's.
#include "src/engine/engine_impl.h"
#include "strata/check.h"

namespace strata {

Status Engine::Impl::LayerMajor(const StepInputs& in, Gatherer& gather, double* loss_sum) {
  const int n = num_blocks();
  const size_t count = in.mbs.size();
  STRATA_CHECK(count > 0 && in.batches.size() == count && in.weights.size() == count) << "a step without micro-batches";
  std::vector<Activations> acts(count);
  std::vector<torch::Tensor> x(count), targets(count), masks(count);
  for (size_t i = 0; i < count; ++i) {
    STRATA_RETURN_IF_ERROR(BatchToDevice(in.batches[i], &x[i], &targets[i], &masks[i]));
    acts[i].Reset(n, cfg.keep_activations);
  }
  optimizer.window.ReadStatesEarly();
  optimizer.mode->BeginLastMicroBatch(in.mbs.back().step);

  for (int b = 0; b < n - 1; ++b) {
    STRATA_RETURN_IF_ERROR(gather.Acquire(b));
    for (size_t i = 0; i < count; ++i)
      STRATA_RETURN_IF_ERROR(ForwardBlock(b, Pass::kTrain, &x[i], &acts[i], in.mbs[i]));
    gather.Release();
  }
  STRATA_RETURN_IF_ERROR(AcquireHead(gather));
  for (size_t i = 0; i < count; ++i) {
    STRATA_ASSIGN_OR_RETURN(double loss, HeadPass(x[i], targets[i], masks[i], in.weights[i], Pass::kTrain, &acts[i]));
    x[i] = torch::Tensor();
    *loss_sum += loss;
    STRATA_RETURN_IF_ERROR(ReduceGradients(n - 1, in.mbs[i]));  // before the next head's backward adds to them
  }
  gather.Release();

  for (int b = n - 2; b >= 0 && BackwardVisits(b); --b) {
    STRATA_RETURN_IF_ERROR(gather.Acquire(b));
    for (size_t i = 0; i < count; ++i) {
      STRATA_RETURN_IF_ERROR(BackwardBlock(b, acts[i], in.mbs[i]));
      STRATA_RETURN_IF_ERROR(ReduceGradients(b, in.mbs[i]));
    }
    gather.Release();
    optimizer.window.ReadStatesEarly();
  }
  return Status();
}

}  // namespace strata
