// A token-wise function over a [B, T, C] activation applied a tile of tokens at a time in
// forward and backward (Note [Tiled MLP], tiled_rows.cc); a block's MLP takes its tile size
// from its BlockContext.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "src/model/block_context.h"

namespace strata::model {

// Row r of its output depends on row r of its input only (an MLP, a norm): [N, C] -> [N, C'].
using RowFunction = std::function<torch::Tensor(const torch::Tensor&)>;

// f over x [B, T, C] (rows B*T), `chunk` rows at a time. Only x is kept for the backward,
// which runs f again one tile at a time; the gradients of `params` (those f reads that need
// one) are summed over the tiles in fp32. Within rounding of f applied whole.
torch::Tensor TiledRows(const RowFunction& f, const torch::Tensor& x, const std::vector<torch::Tensor>& params,
                        int64_t chunk);

// An MLP's f(x, ctx) as its block's context says (an MLP's Forward: Note [Tiled MLP]): whole,
// with the context, when BlockContext::MlpTiles is 0 or x has no more rows than that; else in
// tiles of that many rows with `owner`'s parameters, each tile (and its run again in the
// backward) with BlockContext::ForTiles: tiles exist only without dropout, and the graph keeps
// no pointer into the caller's context (the tensor group is the engine's, which outlives it).
using ContextRowFunction = std::function<torch::Tensor(const torch::Tensor&, const BlockContext&)>;
torch::Tensor RowWise(const ContextRowFunction& f, const torch::Tensor& x, const torch::nn::Module& owner,
                      const BlockContext& ctx);

}  // namespace strata::model
