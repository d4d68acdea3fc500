// Note [Tensor parallel]
// Megatron's tensor parallelism: the T ranks of a tensor group each run a share of every
// layer's attention heads and MLP width. q, k, v and gate / up (GPT-2: c_attn, c_fc) are
// column-parallel, each rank computing rows t·n/T .. (t+1)·n/T - 1 of their outputs (heads
// t·H/T .., key/value heads t·Hkv/T .., MLP width t·F/T ..); o and down (c_proj) are
// row-parallel, each rank multiplying its share of their inputs, and one all-reduce per
// sublayer sums the shares (the output's bias, where there is one, is added once after it).
// The sublayer's input enters the group through the twin of that all-reduce: identity
// forward, an all-reduce of its gradient backward. With the tiled loss (strata.loss_chunk,
// Note [Tiled loss]) the head splits over the vocabulary: each rank its share of the logits,
// the logsumexp and the target's logit combined over the group. Everything else (norms,
// residual stream, embedding, an untiled head) runs whole on every rank of the group, on the
// same bits: the collectives give every member the same sum (Note [Process mesh]).
//
// The weights: ZeRO-3 keeps every tensor whole in its flat layout, sharded over the whole
// world (the tensor ranks are data-parallel ranks for the weights, as the sequence ranks are
// in Note [Ulysses]), so a checkpoint does not depend on the layout it was written at. Each
// rank gathers a block whole and takes views of its slices; the gradient of a slice lands in
// its rows or columns of the whole tensor's gradient and zeros elsewhere, so that the
// engine's sum over the world adds each slice once per data rank (and a whole-run tensor's
// gradient T times, once per tensor rank). The engine divides by the world (D × T ranks), so
// a slice's gradient is taken times T (exact for T a power of two): every tensor's gradient
// is then the mean over data ranks that data parallelism computes. A weight that every head
// shares inside the split part (Qwen3's per-head q / k norms) gets from each rank its heads'
// part of its gradient, and is taken times T the same way; so are a LoRA adapter's halves: a
// column-parallel projection's adapter adds B's rows of the share (A whole, its gradient here
// only through those rows), a row-parallel one's its part of the delta from A's columns of the
// share (B whole), which the sublayer's all-reduce sums with the rest; dropout's masks are the
// whole width's, drawn in the unsplit run's order (Note [LoRA dropout]). What this layout does not
// split is the gather: each rank still gathers the whole block (T times the working weights
// of a slice-sharded layout); the compute and the activations of the split sublayers are
// 1 / T.
#pragma once

#include <torch/types.h>

#include <algorithm>

#include "strata/communicator.h"

namespace strata::model {

// Identity forward; the gradient all-reduced over `group` backward (Megatron's f).
torch::Tensor EnterTensorGroup(const torch::Tensor& x, Communicator& group);

// x all-reduced (summed) over `group` forward; identity backward (Megatron's g).
torch::Tensor LeaveTensorGroup(const torch::Tensor& x, Communicator& group);

// w.narrow(dim, first, count) whose gradient is taken times `scale` (the tensor group's size:
// see the Note) on its way back into w's.
torch::Tensor WeightSlice(const torch::Tensor& w, int64_t dim, int64_t first, int64_t count, double scale);

// This rank's share of `n` (rows, heads, width) in a tensor group: first and count.
struct TensorShare {
  int64_t first = 0, count = 0;
};
inline TensorShare ShareOf(int64_t n, const Communicator& group) {
  const int64_t size = group.world_size(), each = n / size;
  return {group.rank() * each, each};
}
// The same for an `n` the group need not divide (the vocabulary): ceil(n / size) each, the last
// ones short.
inline TensorShare UnevenShareOf(int64_t n, const Communicator& group) {
  const int64_t size = group.world_size(), each = (n + size - 1) / size;
  const int64_t first = std::min<int64_t>(group.rank() * each, n);
  return {first, std::min<int64_t>(each, n - first)};
}

}  // namespace strata::model
