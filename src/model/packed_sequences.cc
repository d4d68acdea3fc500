// Note [Packed sequences]
// With strata.data.packing "packed" a row of a batch holds several whole examples back to
// back (and padding after them); with "none" one example and its padding. No example may
// see another: Hugging Face's models run on one example alone give the same logits. So
//   * positions restart at 0 with each example (RoPE's angles, GPT-2's position table), read
//     from the batch's positions, which also say where the examples are: a run 0, 1, 2, ...;
//   * attention runs once per example over that example's queries and keys only, as a
//     variable-length kernel would: nothing is computed across a boundary, so changing
//     one example's tokens leaves the others' results bitwise the same (a block-diagonal
//     mask would be equal in value, but would compute the masked [T, T] scores and depend on
//     the kernel treating fully masked tiles exactly);
//   * everything else in a block is token by token (norms, projections, the MLP) and the
//     loss is per target, so padding needs only the loss mask.
// The layout reaches the blocks in their BlockContext, beside LoRA dropout's masks; it is made
// once per micro-batch (its examples found, its positions copied to the device once), not per
// block.
#include "src/model/packed_sequences.h"

#include "src/model/layers.h"
#include "strata/check.h"

namespace strata::model {
PackedLayout::PackedLayout(const torch::Tensor& positions) {
  STRATA_CHECK(positions.dim() == 2 && positions.scalar_type() == torch::kInt64 && positions.is_cpu())
      << "packed positions must be int64 [B, T] on the CPU, got " << positions.sizes() << " "
      << positions.scalar_type() << " on " << positions.device();
  positions_ = positions.contiguous();
  const int64_t B = positions_.size(0), T = positions_.size(1);
  length_ = T;
  segments_.resize(B);
  const int64_t* p = positions_.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t* row = p + b * T;
    STRATA_CHECK(T == 0 || row[0] == 0) << "row " << b << " of the packed positions does not start at 0";
    for (int64_t t = 0; t < T; ++t) {
      if (row[t] == 0) {
        segments_[b].push_back({t, 1});
      } else {
        STRATA_CHECK(row[t] == row[t - 1] + 1) << "packed positions: row " << b << " position " << t << " is "
                                               << row[t] << " after " << row[t - 1];
        ++segments_[b].back().second;
      }
    }
  }
}

std::shared_ptr<const PackedLayout> PackedLayout::Of(const torch::Tensor& positions) {
  return positions.defined() ? std::make_shared<const PackedLayout>(positions) : nullptr;
}

const torch::Tensor& PackedLayout::PositionsOn(const torch::Device& device) const {
  if (device.is_cpu()) return positions_;
  if (!on_device_.defined() || on_device_.device() != device) on_device_ = positions_.to(device);
  return on_device_;
}

namespace detail {

torch::Tensor PackedCausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const PackedLayout& layout, const SegmentAttention& attend) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  STRATA_CHECK(layout.rows() == B && layout.length() == T)
      << "packed layout of " << layout.rows() << " x " << layout.length() << " for queries " << q.sizes();
  std::vector<torch::Tensor> rows;
  rows.reserve(B);
  for (int64_t b = 0; b < B; ++b) {
    const auto& segments = layout.segments(b);
    std::vector<torch::Tensor> parts;
    parts.reserve(segments.size());
    for (const auto& [start, length] : segments) {
      auto slice = [&](const torch::Tensor& x) { return x.narrow(0, b, 1).narrow(2, start, length); };
      parts.push_back(attend ? attend(slice(q), slice(k), slice(v))
                             : Attend(slice(q), slice(k), slice(v), std::nullopt, /*causal=*/true));
    }
    rows.push_back(parts.size() == 1 ? parts[0] : torch::cat(parts, 2));  // [1, H, T, D]
  }
  torch::Tensor out = B == 1 ? rows[0] : torch::cat(rows, 0);
  return out.transpose(1, 2).reshape({B, T, H * D});
}

}  // namespace detail
}  // namespace strata::model
