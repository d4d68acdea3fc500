// Note [Tiled MLP]: an MLP's intermediates are [tokens, F], F 2.7-4x the width: for LLaMA's
// SwiGLU gate, up, their silu and product, and in backward as many gradients, the largest part
// of a layer's working set at long sequences. Applied a tile of tokens at a time, and recomputed
// a tile at a time in backward (only its input kept), they exist for one tile: the same
// arithmetic per token; the weight gradients summed over tiles in fp32 (within fp32 rounding of
// the one product over all tokens; in bf16, each tile's rounded before the sum). The cost is one
// more forward of the MLP per step (its backward re-runs it). The tile is strata.mlp_chunk.
#include "src/model/tiled_rows.h"

#include <ATen/core/ivalue.h>
#include <torch/autograd.h>
#include <torch/custom_class.h>

#include <algorithm>
#include <memory>

#include "src/model/layers.h"
#include "strata/check.h"

namespace strata::model {
namespace {

// Keeps the row function alive from the forward to the backward.
struct RowFunctionHolder : torch::CustomClassHolder {
  explicit RowFunctionHolder(RowFunction f) : f(std::move(f)) {}
  RowFunction f;
};

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class TiledRowsFunction : public torch::autograd::Function<TiledRowsFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, at::TensorList params, int64_t chunk,
                               c10::intrusive_ptr<RowFunctionHolder> holder) {
    const int64_t n = x.size(0);
    std::vector<torch::Tensor> tiles;
    for (int64_t at = 0; at < n; at += chunk) tiles.push_back(holder->f(x.narrow(0, at, std::min(chunk, n - at))));
    std::vector<torch::Tensor> saved{x};  // x, then the parameters
    saved.insert(saved.end(), params.begin(), params.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["f"] = c10::IValue::make_capsule(holder);
    return torch::cat(tiles, 0);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const std::vector<torch::Tensor> params(saved.begin() + 1, saved.end());
    const int64_t chunk = ctx->saved_data["chunk"].toInt(), count = static_cast<int64_t>(params.size());
    const auto holder = c10::static_intrusive_pointer_cast<RowFunctionHolder>(ctx->saved_data["f"].toCapsule());
    std::vector<torch::Tensor> sums(count);
    torch::Tensor grad_x = torch::empty_like(x);
    const int64_t n = x.size(0);
    for (int64_t at = 0; at < n; at += chunk) {
      const int64_t len = std::min(chunk, n - at);
      torch::AutoGradMode enable(true);
      torch::Tensor tile = x.narrow(0, at, len).detach().requires_grad_(true);
      torch::Tensor y = holder->f(tile);
      std::vector<torch::Tensor> inputs{tile};
      inputs.insert(inputs.end(), params.begin(), params.end());
      const variable_list g = torch::autograd::grad({y}, inputs, {grads[0].narrow(0, at, len)}, /*retain_graph=*/false,
                                                    /*create_graph=*/false, /*allow_unused=*/true);
      grad_x.narrow(0, at, len).copy_(g[0]);
      for (int64_t i = 0; i < count; ++i) {
        if (!g[i + 1].defined()) continue;
        torch::Tensor part = g[i + 1].to(torch::kFloat32);
        sums[i] = sums[i].defined() ? sums[i].add_(part) : part.clone();
      }
    }
    variable_list out{grad_x};
    for (int64_t i = 0; i < count; ++i)
      out.push_back(sums[i].defined() ? sums[i].to(params[i].scalar_type()) : torch::Tensor());
    out.push_back(torch::Tensor());  // chunk
    out.push_back(torch::Tensor());  // holder
    return out;
  }
};

}  // namespace

torch::Tensor TiledRows(const RowFunction& f, const torch::Tensor& x, const std::vector<torch::Tensor>& params,
                        int64_t chunk) {
  STRATA_CHECK(x.dim() >= 2 && chunk > 0) << "x " << x.sizes() << " chunk " << chunk;
  const int64_t width = x.size(-1), rows = x.numel() / width;
  std::vector<torch::Tensor> trained;  // those that need a gradient
  for (const torch::Tensor& p : params)
    if (p.requires_grad()) trained.push_back(p);
  auto holder = c10::make_intrusive<RowFunctionHolder>(f);
  torch::Tensor y = TiledRowsFunction::apply(x.reshape({rows, width}), at::TensorList(trained), chunk, holder);
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = y.size(1);
  return y.reshape(shape);
}

torch::Tensor RowWise(const ContextRowFunction& f, const torch::Tensor& x, const torch::nn::Module& owner,
                      const BlockContext& ctx) {
  const int64_t chunk = ctx.MlpTiles();
  if (chunk <= 0 || x.numel() / x.size(-1) <= chunk) return f(x, ctx);
  return TiledRows([f, tiles = ctx.ForTiles()](const torch::Tensor& t) { return f(t, tiles); }, x, owner.parameters(),
                   chunk);
}


}  // namespace strata::model
