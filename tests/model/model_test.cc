// Model structure: validation, parameter names/shapes/counts, deterministic per-block
// initialisation, the tied embedding, and blocks composed = FullModel (also after the
// engine-style re-pointing of parameters at views of one flat buffer).
#include <gtest/gtest.h>

#include <vector>

#include "src/model/model.h"
#include "tests/model/model_test_util.h"

namespace strata::model {
namespace {

using testing::Tiny;
using testing::Tokens;

std::vector<std::string> Names(const torch::nn::Module& m) {
  std::vector<std::string> names;
  for (const auto& p : m.named_parameters()) names.push_back(p.key());
  return names;
}

int64_t Numel(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

TEST(ModelConfigTest, ValidateNamesTheField) {
  EXPECT_TRUE(Validate(Tiny(Arch::kGpt2)).ok());
  EXPECT_TRUE(Validate(Tiny(Arch::kLlama)).ok());
  struct Case {
    void (*edit)(ModelConfig&);
    const char* field;
  };
  const Case cases[] = {
      {[](ModelConfig& c) { c.vocab_size = 0; }, "vocab_size"},
      {[](ModelConfig& c) { c.seq_len = -1; }, "seq_len"},
      {[](ModelConfig& c) { c.n_layer = 0; }, "n_layer"},
      {[](ModelConfig& c) { c.d_model = 30; }, "n_head"},
      {[](ModelConfig& c) { c.n_kv_head = 3; }, "n_kv_head"},
      {[](ModelConfig& c) { c.arch = Arch::kGpt2, c.n_kv_head = 2; }, "n_kv_head"},
      {[](ModelConfig& c) { c.d_model = 20, c.n_head = 4, c.n_kv_head = 0; }, "RoPE"},
      {[](ModelConfig& c) { c.ffn_hidden = -5; }, "ffn_hidden"},
      {[](ModelConfig& c) { c.norm_eps = 0; }, "norm_eps"},
      {[](ModelConfig& c) { c.rope_theta = 0; }, "rope_theta"},
  };
  for (const Case& k : cases) {
    ModelConfig c = Tiny(Arch::kLlama);
    k.edit(c);
    Status s = Validate(c);
    EXPECT_FALSE(s.ok()) << k.field;
    EXPECT_NE(s.message().find(k.field), std::string::npos) << s.message();
  }
}

TEST(ModelSpecTest, Gpt2NamesShapesAndCounts) {
  ModelSpec spec(Tiny(Arch::kGpt2, /*tie=*/false));
  ASSERT_EQ(spec.num_blocks(), 4);
  EXPECT_EQ(Names(*MakeBlock(spec, 0)), (std::vector<std::string>{"wte.weight", "wpe.weight"}));
  EXPECT_EQ(Names(*MakeBlock(spec, 1)),
            (std::vector<std::string>{"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                      "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                      "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"}));
  EXPECT_EQ(Names(*MakeBlock(spec, 3)), (std::vector<std::string>{"ln_f.weight", "ln_f.bias", "lm_head.weight"}));
  auto layer = MakeBlock(spec, 2)->named_parameters();
  EXPECT_EQ(layer["attn.c_attn.weight"].sizes(), (std::vector<int64_t>{96, 32}));  // [out, in]
  EXPECT_EQ(layer["mlp.c_fc.weight"].sizes(), (std::vector<int64_t>{128, 32}));
  for (int i = 0; i < spec.num_blocks(); ++i) {
    auto block = MakeBlock(spec, i);
    EXPECT_EQ(spec.block_parameters(i), Numel(*block)) << i;
    for (const auto& p : block->parameters()) EXPECT_EQ(p.dtype(), torch::kFloat32);
  }
  EXPECT_FALSE(spec.tie().has_value());
  // Hand count: wte 64*32 + wpe 16*32; layer 12704; head 2*32 + 64*32.
  EXPECT_EQ(spec.block_parameters(1), 4 * 32 + (96 * 32 + 96) + (32 * 32 + 32) + (128 * 32 + 128) + (32 * 128 + 32));
  EXPECT_EQ(spec.num_parameters(), 64 * 32 + 16 * 32 + 2 * 12704 + 2 * 32 + 64 * 32);
}

TEST(ModelSpecTest, LlamaNamesShapesAndCounts) {
  ModelSpec spec(Tiny(Arch::kLlama, /*tie=*/false));
  EXPECT_EQ(Names(*MakeBlock(spec, 0)), (std::vector<std::string>{"wte.weight"}));
  EXPECT_EQ(Names(*MakeBlock(spec, 1)),
            (std::vector<std::string>{"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                      "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                      "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                                      "mlp.down_proj.weight"}));
  EXPECT_EQ(Names(*MakeBlock(spec, 3)), (std::vector<std::string>{"norm.weight", "lm_head.weight"}));
  auto layer = MakeBlock(spec, 1)->named_parameters();
  EXPECT_EQ(layer["self_attn.k_proj.weight"].sizes(), (std::vector<int64_t>{16, 32}));  // 2 kv heads of 8
  EXPECT_EQ(layer["mlp.gate_proj.weight"].sizes(), (std::vector<int64_t>{128, 32}));    // ceil(8*32/3) -> 64k
  for (int i = 0; i < spec.num_blocks(); ++i) EXPECT_EQ(spec.block_parameters(i), Numel(*MakeBlock(spec, i))) << i;
}

// Made into a caller's buffer (the engine's creation path), a block's parameters are
// consecutive ranges of it in named_parameters() order, initialised exactly as when made
// into fresh tensors; the buffer's tail is left alone.
TEST(ModelSpecTest, BlockMadeIntoStorageIsItsFlatLayout) {
  std::vector<ModelConfig> configs;
  for (Arch arch : {Arch::kGpt2, Arch::kLlama})
    for (bool tie : {true, false}) configs.push_back(Tiny(arch, tie));
  ModelConfig qwen2 = Tiny(Arch::kLlama), qwen3 = Tiny(Arch::kLlama);
  qwen2.qkv_bias = true;
  qwen3.qk_norm = true;
  qwen3.head_dim = 16;
  configs.push_back(qwen2);
  configs.push_back(qwen3);
  for (const ModelConfig& config : configs) {
    {
      ModelSpec spec(config);
      for (int i = 0; i < spec.num_blocks(); ++i) {
        const int64_t n = spec.block_parameters(i);
        torch::Tensor storage = torch::full({n + 5}, 7.0f);
        auto in_place = MakeBlock(spec, i, storage);
        auto fresh = MakeBlock(spec, i);
        auto a = in_place->named_parameters(), b = fresh->named_parameters();
        ASSERT_EQ(a.size(), b.size());
        int64_t offset = 0;
        for (size_t k = 0; k < a.size(); ++k) {
          const torch::Tensor& p = a[k].value();
          EXPECT_EQ(p.data_ptr<float>(), storage.data_ptr<float>() + offset) << a[k].key();
          EXPECT_TRUE(p.requires_grad()) << a[k].key();
          EXPECT_TRUE(torch::equal(p, b[k].value())) << a[k].key();
          offset += p.numel();
        }
        EXPECT_EQ(offset, n);
        EXPECT_TRUE(torch::equal(storage.narrow(0, n, 5), torch::full({5}, 7.0f)));
      }
    }
  }
}

TEST(ModelSpecTest, FlopsPerToken) {
  ModelConfig c = Tiny(Arch::kGpt2);
  ModelSpec spec(c);
  const double matmul = 2.0 * spec.block_parameters(1) + spec.block_parameters(3) + 64.0 * 32;  // + tied lm_head
  EXPECT_DOUBLE_EQ(spec.train_flops_per_token(), 6 * matmul + 12.0 * 2 * 32 * 16);
}

TEST(ModelSpecTest, BlockOutputShapes) {
  for (Arch arch : {Arch::kGpt2, Arch::kLlama}) {
    ModelSpec spec(Tiny(arch, /*tie=*/false));
    torch::NoGradGuard no_grad;
    torch::Tensor x = MakeBlock(spec, 0)->Forward(Tokens(3, 10, 64, 1));
    EXPECT_EQ(x.sizes(), (std::vector<int64_t>{3, 10, 32}));
    x = MakeBlock(spec, 1)->Forward(x);
    EXPECT_EQ(x.sizes(), (std::vector<int64_t>{3, 10, 32}));
    auto head = MakeBlock(spec, 3);
    EXPECT_EQ(head->kind(), BlockKind::kHead);
    EXPECT_EQ(head->Forward(x).sizes(), (std::vector<int64_t>{3, 10, 64}));
  }
}

void ExpectSameParameters(const torch::nn::Module& a, const torch::nn::Module& b, bool equal) {
  auto pa = a.parameters(), pb = b.parameters();
  ASSERT_EQ(pa.size(), pb.size());
  bool all_equal = true;
  for (size_t i = 0; i < pa.size(); ++i) all_equal = all_equal && torch::equal(pa[i], pb[i]);
  EXPECT_EQ(all_equal, equal);
}

TEST(ModelSpecTest, MakeBlockIsDeterministicAndIndependent) {
  for (Arch arch : {Arch::kGpt2, Arch::kLlama}) {
    ModelSpec spec(Tiny(arch));
    torch::manual_seed(1);
    auto first = MakeBlock(spec, 2);
    torch::manual_seed(99);  // the global RNG plays no part
    (void)torch::rand({100});
    (void)MakeBlock(spec, 1);  // nor do the blocks made before
    ExpectSameParameters(*first, *MakeBlock(spec, 2), /*equal=*/true);
    torch::manual_seed(5);  // ... and is left untouched
    torch::Tensor expected = torch::rand({4});
    torch::manual_seed(5);
    (void)MakeBlock(spec, 0);
    EXPECT_TRUE(torch::equal(torch::rand({4}), expected));
    ExpectSameParameters(*MakeBlock(spec, 1), *MakeBlock(spec, 2), /*equal=*/false);
    ModelConfig other = Tiny(arch);
    other.seed = 8;
    ExpectSameParameters(*first, *MakeBlock(ModelSpec(other), 2), /*equal=*/false);
    // Init: norm weights one, biases zero, weights ~ N(0, std) with the residual scaling on c_proj.
    auto p = first->named_parameters();
    const char* norm = arch == Arch::kGpt2 ? "ln_1.weight" : "input_layernorm.weight";
    EXPECT_TRUE(torch::equal(p[norm], torch::ones({32})));
    if (arch == Arch::kGpt2) {
      EXPECT_TRUE(torch::equal(p["attn.c_attn.bias"], torch::zeros({96})));
      EXPECT_NEAR(p["mlp.c_fc.weight"].std().item<double>(), 0.02, 0.002);
      EXPECT_NEAR(p["mlp.c_proj.weight"].std().item<double>(), 0.01, 0.001);  // 0.02 / sqrt(2 * 2)
    }
  }
}

TEST(FullModelTest, TiedEmbeddingIsOneParameterAndAccumulatesBothGradients) {
  for (Arch arch : {Arch::kGpt2, Arch::kLlama}) {
    ModelSpec spec(Tiny(arch, /*tie=*/true));
    ASSERT_TRUE(spec.tie().has_value());
    EXPECT_EQ(spec.tie()->owner_block, 0);
    EXPECT_EQ(spec.tie()->owner_param, "wte.weight");
    EXPECT_EQ(spec.tie()->user_block, 3);
    FullModel tied(spec);
    EXPECT_EQ(Numel(tied), spec.num_parameters());
    EXPECT_EQ(spec.num_parameters(), ModelSpec(Tiny(arch, false)).num_parameters() - 64 * 32);

    // The untied twin with lm_head := wte: its two gradients must sum to the tied one.
    FullModel untied{ModelSpec(Tiny(arch, /*tie=*/false))};
    {
      torch::NoGradGuard no_grad;
      untied.named_parameters()["3.lm_head.weight"].copy_(untied.named_parameters()["0.wte.weight"]);
    }
    torch::Tensor tokens = Tokens(2, 12, 64, 3), targets = Tokens(2, 12, 64, 4);
    LanguageModelLoss(tied.Forward(tokens), targets).backward();
    LanguageModelLoss(untied.Forward(tokens), targets).backward();
    torch::Tensor tied_grad = tied.named_parameters()["0.wte.weight"].grad();
    torch::Tensor sum = untied.named_parameters()["0.wte.weight"].grad() +
                        untied.named_parameters()["3.lm_head.weight"].grad();
    EXPECT_TRUE(torch::allclose(tied_grad, sum, 1e-5, 1e-7));
  }
}

TEST(FullModelTest, BlocksComposedEqualFullModel) {
  for (Arch arch : {Arch::kGpt2, Arch::kLlama}) {
    ModelSpec spec(Tiny(arch));
    FullModel full(spec);
    torch::NoGradGuard no_grad;
    torch::Tensor tokens = Tokens(2, 16, 64, 5);
    torch::Tensor x = tokens;
    std::vector<std::shared_ptr<Block>> blocks;
    for (int i = 0; i < spec.num_blocks(); ++i) blocks.push_back(MakeBlock(spec, i));
    blocks.back()->BindTiedWeight(blocks[0]->named_parameters()["wte.weight"]);
    for (auto& b : blocks) x = b->Forward(x);
    EXPECT_TRUE(torch::equal(x, full.Forward(tokens)));
  }
}

// What the engine does: one flat buffer per block, parameters re-pointed at its views,
// in bf16; the blocks must compute from the views.
TEST(FullModelTest, ParametersRepointedAtFlatViewsInBf16) {
  for (Arch arch : {Arch::kGpt2, Arch::kLlama}) {
    ModelSpec spec(Tiny(arch));
    torch::NoGradGuard no_grad;
    std::vector<std::shared_ptr<Block>> blocks;
    std::vector<torch::Tensor> flats;
    for (int i = 0; i < spec.num_blocks(); ++i) {
      auto block = MakeBlock(spec, i);
      std::vector<torch::Tensor> pieces;
      for (const auto& p : block->parameters()) pieces.push_back(p.reshape({-1}));
      torch::Tensor flat = torch::cat(pieces).to(torch::kBFloat16);
      int64_t offset = 0;
      for (auto& p : block->parameters()) {
        p.set_data(flat.narrow(0, offset, p.numel()).view(p.sizes()));
        offset += p.numel();
      }
      EXPECT_EQ(offset, spec.block_parameters(i));
      blocks.push_back(block);
      flats.push_back(flat);
    }
    blocks.back()->BindTiedWeight(blocks[0]->named_parameters()["wte.weight"]);
    torch::Tensor tokens = Tokens(2, 16, 64, 6), x = tokens;
    for (auto& b : blocks) x = b->Forward(x);
    EXPECT_EQ(x.scalar_type(), torch::kBFloat16);

    FullModel full(spec);
    full.to(torch::kBFloat16);
    EXPECT_TRUE(torch::equal(x, full.Forward(tokens)));
    flats[1].zero_();  // the layer reads the buffer, not a copy
    torch::Tensor y = tokens;
    for (auto& b : blocks) y = b->Forward(y);
    EXPECT_FALSE(torch::equal(x, y));
  }
}

}  // namespace
}  // namespace strata::model
