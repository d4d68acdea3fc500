// Packed sequences: several examples in one row of a batch, each attending to itself only,
// with its positions starting at 0 (Note [Packed sequences], packed_sequences.cc).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace strata::model {

// A batch's packed examples, laid out by `positions` (int64 [B, T] on the CPU): an example is a
// run of positions 0, 1, 2, ...; a 0 starts the next one. Made once per micro-batch: each
// block's forward and recomputation reads the same one (and its copy of the positions on the
// device, made once).
class PackedLayout {
 public:
  explicit PackedLayout(const torch::Tensor& positions);
  // A layout of `positions`, or null when they are undefined (plain causal rows).
  static std::shared_ptr<const PackedLayout> Of(const torch::Tensor& positions);
  int64_t rows() const { return static_cast<int64_t>(segments_.size()); }
  int64_t length() const { return length_; }
  // Row `row`'s examples as (first token, length).
  const std::vector<std::pair<int64_t, int64_t>>& segments(int64_t row) const { return segments_[row]; }
  // Positions [B, T] on `device` (copied there once).
  const torch::Tensor& PositionsOn(const torch::Device& device) const;

 private:
  torch::Tensor positions_;
  mutable torch::Tensor on_device_;
  int64_t length_ = 0;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> segments_;
};

namespace detail {

// Causal attention of q [B, H, T, D] over k, v [B, Hkv, T, D] within each example of the
// layout: one kernel call per example (a variable-length attention), nothing computed across
// examples. Returns [B, T, H * D] like CausalAttention.
// `attend` (q, k, v of one example, [1, H|Hkv, t, D]) -> [1, H, t, D] causal attention; none:
// SDPA's, as CausalAttention's.
using SegmentAttention =
    std::function<torch::Tensor(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v)>;
torch::Tensor PackedCausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const PackedLayout& layout, const SegmentAttention& attend = {});

}  // namespace detail
}  // namespace strata::model
