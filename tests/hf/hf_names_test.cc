// Strata's parameter names <-> Hugging Face's (hf_names.h).
#include <gtest/gtest.h>

#include "src/model/hf_names.h"

#include <vector>

namespace strata::model {
namespace {

TEST(HfNames, Gpt2Conv1DIsTransposedAndPrefixed) {
  EXPECT_EQ(ToHfName(true, 2, 0, "wte.weight").name, "transformer.wte.weight");
  const HfName c = ToHfName(true, 2, 2, "attn.c_attn.weight");
  EXPECT_EQ(c.name, "transformer.h.1.attn.c_attn.weight");
  EXPECT_TRUE(c.transpose);
  EXPECT_FALSE(ToHfName(true, 2, 1, "attn.c_attn.bias").transpose);
  EXPECT_FALSE(ToHfName(true, 2, 1, "ln_1.weight").transpose);
  EXPECT_EQ(ToHfName(true, 2, 3, "ln_f.bias").name, "transformer.ln_f.bias");
  EXPECT_EQ(CanonicalHfName(true, "h.0.ln_1.weight"), "transformer.h.0.ln_1.weight");
}

TEST(HfNames, LlamaNames) {
  EXPECT_EQ(ToHfName(false, 2, 0, "wte.weight").name, "model.embed_tokens.weight");
  EXPECT_EQ(ToHfName(false, 2, 1, "self_attn.q_proj.weight").name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_FALSE(ToHfName(false, 2, 1, "self_attn.q_proj.weight").transpose);
  EXPECT_EQ(ToHfName(false, 2, 3, "norm.weight").name, "model.norm.weight");
  EXPECT_EQ(ToHfName(false, 2, 3, "lm_head.weight").name, "lm_head.weight");
  EXPECT_TRUE(IsHfBuffer("model.layers.0.self_attn.rotary_emb.inv_freq"));
}

// A Phi-3 of 2 layers, 4 heads of 16 (2 key/value heads) and an MLP of 192.
ModelConfig SmallPhi3() {
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.hf_model_type = "phi3";
  c.n_layer = 2;
  c.d_model = 64;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.ffn_hidden = 192;
  return c;
}

// Phi-3: q, k, v are rows [0, H*d), [H*d, +KV*d), [+KV*d, +KV*d) of qkv_proj; gate and up
// the two halves of gate_up_proj; nothing is fused in any other family.
TEST(HfNames, Phi3FusesQkvAndGateUp) {
  ModelConfig c = SmallPhi3();
  const auto q = FusedRowsOf(c, "model.layers.1.self_attn.q_proj.weight");
  const auto k = FusedRowsOf(c, "model.layers.1.self_attn.k_proj.weight");
  const auto v = FusedRowsOf(c, "model.layers.1.self_attn.v_proj.weight");
  const auto up = FusedRowsOf(c, "model.layers.0.mlp.up_proj.weight");
  ASSERT_TRUE(q && k && v && up);
  EXPECT_EQ(q->fused, "model.layers.1.self_attn.qkv_proj.weight");
  EXPECT_EQ((std::vector<int64_t>{q->begin, q->rows, k->begin, k->rows, v->begin, v->rows, v->total_rows}),
            (std::vector<int64_t>{0, 64, 64, 32, 96, 32, 128}));
  EXPECT_EQ((std::vector<int>{q->part, k->part, v->part, v->parts}), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(up->fused, "model.layers.0.mlp.gate_up_proj.weight");
  EXPECT_EQ((std::vector<int64_t>{up->begin, up->rows, up->total_rows, up->part}),
            (std::vector<int64_t>{192, 192, 384, 1}));
  EXPECT_FALSE(FusedRowsOf(c, "model.layers.0.self_attn.o_proj.weight"));
  EXPECT_FALSE(FusedRowsOf(c, "model.layers.0.mlp.down_proj.weight"));
  c.hf_model_type = "mistral";
  EXPECT_FALSE(FusedRowsOf(c, "model.layers.1.self_attn.q_proj.weight"));
}

// The parameters of transformers 5 a tensor is part of (LAMB's groups): Phi-3's fused
// projections, and a sparse layer's experts, gate and up of all of them in one tensor.
TEST(HfNames, HfParameterOfIsTheFusedTensorWhereTransformersFuses) {
  ModelConfig c = SmallPhi3();
  EXPECT_EQ(HfParameterOf(c, 1, "self_attn.k_proj.weight"), "model.layers.0.self_attn.qkv_proj.weight");
  EXPECT_EQ(HfParameterOf(c, 2, "mlp.gate_proj.weight"), "model.layers.1.mlp.gate_up_proj.weight");
  EXPECT_EQ(HfParameterOf(c, 1, "self_attn.o_proj.weight"), "model.layers.0.self_attn.o_proj.weight");
  c.hf_model_type = "mixtral";
  EXPECT_EQ(HfParameterOf(c, 1, "self_attn.q_proj.weight"), "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(HfParameterOf(c, 1, "block_sparse_moe.experts.3.w1.weight"),
            HfParameterOf(c, 1, "block_sparse_moe.experts.0.w3.weight"));
  EXPECT_NE(HfParameterOf(c, 1, "block_sparse_moe.experts.3.w1.weight"),
            HfParameterOf(c, 1, "block_sparse_moe.experts.3.w2.weight"));
  EXPECT_NE(HfParameterOf(c, 1, "block_sparse_moe.experts.3.w1.weight"),
            HfParameterOf(c, 2, "block_sparse_moe.experts.3.w1.weight"));
  EXPECT_EQ(HfParameterOf(c, 2, "mlp.experts.7.down_proj.weight"), "model.layers.1.mlp.experts.down_proj");
  EXPECT_EQ(HfParameterOf(c, 1, "block_sparse_moe.gate.weight"), "model.layers.0.block_sparse_moe.gate.weight");
}

// Phi-3's adapters are on its fused projections, as PEFT names them; the unfused names are
// refused, naming the fused ones.
TEST(HfNames, Phi3LoraTargetsItsFusedProjections) {
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.hf_model_type = "phi3";
  c.lora.r = 8;
  c.lora.target_modules = {"q_proj", "v_proj"};
  const Status s = Validate(c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("strata.lora.target_modules"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("qkv_proj"), std::string::npos) << s.ToString();
  c.lora.target_modules = {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};
  EXPECT_TRUE(Validate(c).ok()) << Validate(c).ToString();
}

}  // namespace
}  // namespace strata::model
