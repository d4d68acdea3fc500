// Folder-private: the architecture factories behind MakeBlock, which the family's row chooses
// (ModelFamily::blocks). Each architecture file (gpt2.cc, llama.cc, gemma.cc) builds its three
// block kinds; their parameter counts are computed
// without building them in model_config.cc (a model may be larger than this machine's memory).
#pragma once

#include <cstdint>
#include <memory>

#include "src/model/model.h"

namespace strata::model::detail {

// Block `index` of a validated config: 0 = embedding, 1..n_layer = layers, n_layer+1 = head.
std::shared_ptr<Block> MakeGpt2Block(const ModelConfig& config, int index);
std::shared_ptr<Block> MakeLlamaBlock(const ModelConfig& config, int index);
std::shared_ptr<Block> MakeGemmaBlock(const ModelConfig& config, int index);

}  // namespace strata::model::detail
