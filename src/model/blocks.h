// Folder-private: the architecture factories behind ModelSpec. Each architecture file
// (gpt2.cc, llama.cc) builds its three block kinds and counts their parameters without
// building them (a model may be larger than this machine's memory).
#pragma once

#include <cstdint>
#include <memory>

#include "src/model/model.h"

namespace strata::model::detail {

// Block `index` of a validated config: 0 = embedding, 1..n_layer = layers, n_layer+1 = head.
std::shared_ptr<Block> MakeGpt2Block(const ModelConfig& config, int index);
std::shared_ptr<Block> MakeLlamaBlock(const ModelConfig& config, int index);

// Elements in the block's own parameters (a tied head has no lm_head).
int64_t Gpt2BlockParameters(const ModelConfig& config, int index);
int64_t LlamaBlockParameters(const ModelConfig& config, int index);

// The MLP width after defaults: GPT-2 4*C; LLaMA 8/3*C rounded up to a multiple of 64.
int64_t FfnHidden(const ModelConfig& config);

inline BlockKind KindOf(const ModelConfig& config, int index) {
  if (index == 0) return BlockKind::kEmbedding;
  return index <= config.n_layer ? BlockKind::kLayer : BlockKind::kHead;
}

}  // namespace strata::model::detail
