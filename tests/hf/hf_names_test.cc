// Strata's parameter names <-> Hugging Face's (hf_names.h).
#include <gtest/gtest.h>

#include "src/model/hf_names.h"

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

}  // namespace
}  // namespace strata::model
