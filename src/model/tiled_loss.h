// The language-model loss computed a tile of tokens at a time (Note [Tiled loss],
// tiled_loss.cc): the LM head's logits never exist for more than `chunk` tokens at once.
#pragma once

#include <torch/types.h>

#include <cstdint>

#include "strata/communicator.h"

namespace strata::model {

// The mean cross-entropy of `hidden` [B, T, C] (the final norm's output, in the compute
// dtype) through the LM head's `weight` [V, C] against `targets` [B, T], as LanguageModelLoss
// computes it from full logits: the logits of each tile in the compute dtype, the softmax in
// fp32. With `mask` (bool [B, T]) as MaskedLanguageModelLoss: the mean over unmasked targets,
// and 0 with no gradient where none is unmasked. Differentiable in `hidden` and `weight`;
// the backward recomputes each tile's logits. `chunk` > 0 tokens per tile. `softcap` > 0: the
// logits are soft-capped first, as the head's Forward does (Block::LogitSoftcap). With
// `vocab_group` (a tensor group, Note [Tensor parallel]) each rank computes its share of the
// vocabulary's logits; every member returns the same loss and input gradient.
torch::Tensor TiledLanguageModelLoss(const torch::Tensor& hidden, const torch::Tensor& weight,
                                     const torch::Tensor& targets, const torch::Tensor& mask, int64_t chunk,
                                     double softcap = 0, Communicator* vocab_group = nullptr);

}  // namespace strata::model
