// Packed sequences: several examples in one row of a batch, each attending to itself only,
// with its positions starting at 0 (Note [Packed sequences], packed_sequences.cc).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace strata::model {

// While it lives, the blocks run on this thread treat their rows as packed examples laid
// out by `positions` (int64 [B, T] on the CPU): an example is a run of positions 0, 1, 2, ...;
// a 0 starts the next one. Undefined positions arm nothing (plain causal rows). The engine
// arms it around a micro-batch's forward, its recomputation and its evaluation.
class PackedSequencesScope {
 public:
  explicit PackedSequencesScope(const torch::Tensor& positions);
  ~PackedSequencesScope();
  PackedSequencesScope(const PackedSequencesScope&) = delete;
  PackedSequencesScope& operator=(const PackedSequencesScope&) = delete;

 private:
  const void* previous_;
};

namespace detail {

// The armed layout: the positions, and each row's examples as (first token, length).
class PackedLayout {
 public:
  explicit PackedLayout(const torch::Tensor& positions);
  static const PackedLayout* Current();  // null when no scope is armed on this thread
  int64_t rows() const { return static_cast<int64_t>(segments_.size()); }
  int64_t length() const { return length_; }
  const std::vector<std::pair<int64_t, int64_t>>& segments(int64_t row) const { return segments_[row]; }
  // Positions [B, T] on `device` (copied there once).
  const torch::Tensor& PositionsOn(const torch::Device& device) const;

 private:
  torch::Tensor positions_;
  mutable torch::Tensor on_device_;
  int64_t length_ = 0;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> segments_;
};

// Causal attention of q [B, H, T, D] over k, v [B, Hkv, T, D] within each example of the
// layout: one kernel call per example (a variable-length attention), nothing computed
// across examples. Returns [B, T, H * D] like CausalAttention.
torch::Tensor PackedCausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const PackedLayout& layout);

}  // namespace detail
}  // namespace strata::model
