// A token-wise function over a [B, T, C] activation applied a tile of tokens at a time in
// forward and backward (Note [Tiled MLP], tiled_rows.cc), and the scope that turns it on for
// the blocks run on this thread.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace strata::model {

// Row r of its output depends on row r of its input only (an MLP, a norm): [N, C] -> [N, C'].
using RowFunction = std::function<torch::Tensor(const torch::Tensor&)>;

// f over x [B, T, C] (rows B*T), `chunk` rows at a time. Only x is kept for the backward,
// which runs f again one tile at a time; the gradients of `params` (those f reads that need
// one) are summed over the tiles in fp32. Within rounding of f applied whole.
torch::Tensor TiledRows(const RowFunction& f, const torch::Tensor& x, const std::vector<torch::Tensor>& params,
                        int64_t chunk);

// f over x as a MlpTilingScope on this thread says: whole, or TiledRows at its tile size with
// `owner`'s parameters (an MLP's Forward: Note [Tiled MLP]).
torch::Tensor RowWise(const RowFunction& f, const torch::Tensor& x, const torch::nn::Module& owner);

// strata.mlp_chunk for the blocks run on this thread while it lives (0: untiled); LoRA
// dropout armed leaves MLPs untiled (its masks are drawn per call, and the backward's call
// would draw others).
class MlpTilingScope {
 public:
  explicit MlpTilingScope(int64_t chunk);
  ~MlpTilingScope();
  MlpTilingScope(const MlpTilingScope&) = delete;
  MlpTilingScope& operator=(const MlpTilingScope&) = delete;
  static int64_t Current();  // tokens per tile, 0 for untiled

 private:
  int64_t previous_;
};

}  // namespace strata::model
