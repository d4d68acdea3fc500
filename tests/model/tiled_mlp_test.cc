// Note [Tiled MLP] (src/model/tiled_rows.cc): a layer whose MLP runs a tile of tokens at a time
// (recomputed a tile at a time in backward) equals the untiled layer within fp32 rounding: the
// output, the input's gradient and every parameter's (LoRA adapters on the MLP included), for
// LLaMA (SwiGLU) and GPT-2 (GELU) layers, at tiles of 1 token, an odd size, all and more; and
// with LoRA dropout in the block's context the MLP stays untiled (its masks are drawn per call).
#include <gtest/gtest.h>

#include <vector>

#include "model/model_test_util.h"
#include "src/model/tiled_rows.h"

namespace strata::model {
namespace {

struct LayerRun {
  torch::Tensor y;
  std::vector<torch::Tensor> grads;  // input, then every parameter
};

LayerRun RunLayer(Block& layer, const torch::Tensor& x0, const torch::Tensor& dy, int64_t chunk) {
  for (auto& p : layer.parameters()) p.mutable_grad() = torch::Tensor();
  torch::Tensor x = x0.clone().requires_grad_(true);
  torch::Tensor y = layer.Forward(x, BlockContext{.mlp_chunk = chunk});
  y.backward(dy);
  LayerRun r{y.detach(), {x.grad()}};
  for (auto& p : layer.parameters()) r.grads.push_back(p.grad());
  return r;
}

TEST(TiledMlp, EqualsTheUntiledLayerWithinFp32Rounding) {
  for (Arch arch : {Arch::kLlama, Arch::kGpt2}) {
    for (bool lora : {false, true}) {
      if (lora && arch == Arch::kGpt2) continue;  // (GPT-2's MLP takes no adapters)
      SCOPED_TRACE(::testing::Message() << (arch == Arch::kLlama ? "llama" : "gpt2") << (lora ? " + LoRA" : ""));
      ModelConfig c = testing::Tiny(arch, /*tie=*/false);
      if (lora) {
        c.lora.r = 4;
        c.lora.alpha = 8;
        c.lora.target_modules = {"gate_proj", "up_proj", "down_proj"};
      }
      const ModelSpec spec(c);
      std::shared_ptr<Block> layer = MakeBlock(spec, 1);
      if (lora) {  // B starts at zero: give the adapters something to carry
        torch::NoGradGuard no_grad;
        for (auto& item : layer->named_parameters())
          if (item.key().find("lora_B") != std::string::npos) item.value().normal_(0, 0.1);
      }
      auto gen = at::make_generator<at::CPUGeneratorImpl>(21);
      const torch::Tensor x = torch::randn({3, c.seq_len, c.d_model}, gen), dy = torch::randn(x.sizes(), gen);
      const LayerRun want = RunLayer(*layer, x, dy, 0);
      const int64_t rows = x.size(0) * x.size(1);
      for (int64_t chunk : {int64_t{1}, int64_t{7}, rows - 1, rows + 3}) {
        SCOPED_TRACE(::testing::Message() << "tiles of " << chunk);
        const LayerRun got = RunLayer(*layer, x, dy, chunk);
        EXPECT_LE(testing::NormRelativeError(got.y, want.y), 1e-6);
        ASSERT_EQ(got.grads.size(), want.grads.size());
        for (size_t i = 0; i < want.grads.size(); ++i) {
          if (!want.grads[i].defined()) {
            EXPECT_FALSE(got.grads[i].defined()) << "gradient " << i;
            continue;
          }
          ASSERT_TRUE(got.grads[i].defined()) << "gradient " << i;
          EXPECT_LE(testing::NormRelativeError(got.grads[i], want.grads[i]), 1e-5) << "gradient " << i;
        }
      }
    }
  }
}

TEST(TiledMlp, StaysUntiledWithLoraDropoutArmed) {
  BlockContext ctx{.mlp_chunk = 8};
  EXPECT_EQ(ctx.MlpTiles(), 8);
  LoraDropout dropout(5);
  ctx.dropout = &dropout;
  EXPECT_EQ(ctx.MlpTiles(), 0);
}

}  // namespace
}  // namespace strata::model
