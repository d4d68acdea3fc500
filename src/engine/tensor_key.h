// The names of one rank's state in the store, in checkpoints and in export, and the ranges of
// a block's flat group they cover.
//   {b, kWorking}           "block<b>.working"          compute dtype, the block's working range
//   {b, kMaster, offset}    "block<b>.<offset>.master"  fp32, the sub-group starting at flat
//   {b, kAdamM, offset}     "block<b>.<offset>.adam_m"  element `offset` of block b's group
//   {b, kAdamV, offset}     "block<b>.<offset>.adam_v"
//   {b, kAdapter}           "block<b>.adapter"          compute dtype, BlockPlan::adapter (LoRA,
//                           working weights on NVMe): the trainable end of the working range
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace strata {

enum class TensorRole { kWorking, kMaster, kAdamM, kAdamV, kAdapter };
// A sub-group's optimizer states, in their order k (0 master, 1 m, 2 v).
inline constexpr TensorRole kStateRoles[3] = {TensorRole::kMaster, TensorRole::kAdamM, TensorRole::kAdamV};

struct TensorKey {
  int block = 0;
  TensorRole role = TensorRole::kWorking;
  int64_t offset = 0;  // optimizer states: the sub-group's first flat element; 0 for working
  std::string Name() const;
  // The inverse of Name(); nullopt for any other string.
  static std::optional<TensorKey> Parse(std::string_view name);
  bool operator==(const TensorKey&) const = default;
};

// [begin, begin + len) of a block's flat group, in elements.
struct ElementRange {
  int64_t begin = 0, len = 0;
  int64_t end() const { return begin + len; }
};

}  // namespace strata
