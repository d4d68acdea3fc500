// Note [Block context]
// What one run of a block needs besides its input and its weights: the packed examples'
// layout, LoRA dropout's masks, the sparse layers' routing report and load-balancing loss, the
// MLP's tile size, the sequence shard (Ulysses), the tensor group. A value the engine makes for each forward of a block and again for its
// recomputation, handed to Block::Forward and on to every layer that reads a part of it (not
// state armed on the thread: what a layer depends on is in its signature, and a block may run
// on any thread). The default, empty, is a plain pass (evaluation without packing, generation,
// the reference model). What outlives the call is taken from it by value: a tiled MLP's
// backward runs its tiles again with a context holding only the tensor group (tiles exist only without dropout), and
// the load-balancing loss's autograd node keeps its RouterLoss, which the step owns.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "strata/communicator.h"


namespace strata::model {

class ExpertRouting;
class PackedLayout;
class RouterLoss;

// Note [LoRA dropout]
// A block that is recomputed in the backward must draw the same dropout masks as in its
// forward. So masks come from this context, which the engine makes for a training block's
// forward and again for its recomputation with the same seed (from the sample and the block),
// not from the global RNG; each adapter's call takes the next counter. Without one
// (evaluation, generate, the reference model): no dropout.
class LoraDropout {
 public:
  explicit LoraDropout(uint64_t seed) : seed_(seed) {}
  // x with each element zeroed with probability p and the rest scaled by 1 / (1 - p). With x
  // [B, T, ..] a sequence shard's positions first .. of rows of `whole` positions (Note
  // [Ulysses]), the whole rows' masks are drawn and its part applied: a position's mask is
  // the one an unsplit run draws for it.
  // Likewise x's last dimension may be features feature_first .. of `features` (a row-parallel
  // projection's input share, Note [Tensor parallel]): the whole width's masks are drawn.
  torch::Tensor Apply(const torch::Tensor& x, double p, int64_t first = 0, int64_t whole = 0, int64_t feature_first = 0,
                      int64_t features = 0) {
    if (p == 0) return x;
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed_ * 0x9E3779B97F4A7C15ULL + ++calls_);
    const bool part = whole > 0 && whole != x.size(1), narrow = features > 0 && features != x.size(-1);
    std::vector<int64_t> shape = x.sizes().vec();
    if (part) shape[1] = whole;
    if (narrow) shape.back() = features;
    torch::Tensor keep = torch::empty(shape, torch::kFloat32).bernoulli_(1.0 - p, gen);
    if (part) keep = keep.narrow(1, first, x.size(1));
    if (narrow) keep = keep.narrow(-1, feature_first, x.size(-1));
    return x * (keep / (1.0 - p)).to(x.options());
  }

 private:
  uint64_t seed_ = 0, calls_ = 0;
};

struct BlockContext {
  // Packed examples (Note [Packed sequences]): each row's examples attend to themselves only,
  // at their own positions; null: plain causal rows.
  const PackedLayout* packing = nullptr;
  // LoRA dropout's masks (Note [LoRA dropout]); null: no dropout.
  LoraDropout* dropout = nullptr;
  // A sparse layer reports the experts its router chose (Note [Expert-aware fetching]) and
  // records its share of the load-balancing loss (Note [Router loss]); null: neither.
  ExpertRouting* routing = nullptr;
  RouterLoss* router_loss = nullptr;
  // strata.mlp_chunk (Note [Tiled MLP]): tokens per tile, 0 untiled.
  int64_t mlp_chunk = 0;
  // Ulysses (Note [Ulysses]): this rank holds positions sequence_offset .. of every row, and
  // attention runs over `sequence_group`; null: the whole row is here.
  Communicator* sequence_group = nullptr;
  int64_t sequence_offset = 0;
  // Tensor parallel (Note [Tensor parallel]): this rank runs its share of every layer's heads
  // and MLP width, summed over `tensor_group`; null: the whole layer is here.
  Communicator* tensor_group = nullptr;

  // x with LoRA dropout p applied, or x. x's last dimension: features feature_first .. of
  // `features` (0: all of them).
  torch::Tensor Dropout(const torch::Tensor& x, double p, int64_t feature_first = 0, int64_t features = 0) const {
    if (!dropout) return x;
    return sequence_group ? dropout->Apply(x, p, sequence_offset, x.size(1) * sequence_group->world_size(),
                                           feature_first, features)
                          : dropout->Apply(x, p, 0, 0, feature_first, features);
  }
  // The MLP's tile size: untiled with dropout (its masks are drawn per call, and the
  // backward's call would draw others).
  int64_t MlpTiles() const { return dropout ? 0 : mlp_chunk; }
  // What a tile of a tiled MLP runs with, in its forward and again in its backward: the tensor
  // group alone (it holds no state of the call).
  BlockContext ForTiles() const { return {.tensor_group = tensor_group}; }
};

}  // namespace strata::model
