// GPT-2 as blocks. Parameter names are Hugging Face's GPT2LMHeadModel names without the
// "transformer." / "transformer.h.<i>." prefixes, in HF's order (Note [Block parameters]):
//   embedding  wte.weight [V, C], wpe.weight [MaxPositions(), C] (max_positions, else seq_len)
//   layer      ln_1.{weight,bias} [C]
//              attn.c_attn.{weight [3C, C], bias [3C]}   (q, k, v stacked along out)
//              attn.c_proj.{weight [C, C], bias [C]}
//              ln_2.{weight,bias} [C]
//              mlp.c_fc.{weight [F, C], bias [F]}, mlp.c_proj.{weight [C, F], bias [C]}
//   head       ln_f.{weight,bias} [C], lm_head.weight [V, C] (absent when tied)
// Linear weights are [out, in]; HF's Conv1D stores [in, out], so a checkpoint loader
// transposes attn.* and mlp.* weights.
#include <cmath>

#include "src/model/blocks.h"
#include "src/model/layers.h"
#include "src/model/tiled_rows.h"

namespace strata::model::detail {
namespace {

class Gpt2Embedding final : public Block {
 public:
  explicit Gpt2Embedding(const ModelConfig& c) {
    wte_ = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.d_model, c.init_std));
    wpe_ = register_module("wpe", std::make_shared<Embedding>(MaxPositions(c), c.d_model, c.init_std));
  }
  BlockKind kind() const override { return BlockKind::kEmbedding; }
  torch::Tensor Forward(const torch::Tensor& tokens, const BlockContext& ctx) override {
    return Embed(tokens, ctx.sequence_offset, ctx.packing);  // this rank's positions (Note [Ulysses])
  }
  torch::Tensor ForwardCached(const torch::Tensor& tokens, int64_t past, KvCache&) override {
    return Embed(tokens, past, nullptr);
  }

 private:
  // Tokens past..past+T-1 at those positions, or of packed examples at their own (`packed`).
  torch::Tensor Embed(const torch::Tensor& tokens, int64_t past, const PackedLayout* packed) const {
    STRATA_CHECK(tokens.dim() == 2) << "tokens must be [B, T], got " << tokens.sizes();
    const int64_t T = tokens.size(1);
    STRATA_CHECK(past + T <= wpe_->weight().size(0))
        << "position " << past + T << " exceeds seq_len " << wpe_->weight().size(0);
    if (packed)  // Note [Packed sequences] (a sequence shard's part of them: Note [Ulysses])
      return wte_->Forward(tokens) + wpe_->Forward(PackedPositions(*packed, tokens.device(), past, T));  // [B, T, C] + [B, T, C]
    torch::Tensor positions = torch::arange(past, past + T, tokens.options().dtype(torch::kLong));
    return wte_->Forward(tokens) + wpe_->Forward(positions);  // [B, T, C] + [T, C]
  }

  std::shared_ptr<Embedding> wte_, wpe_;
};

class Gpt2Attention final : public torch::nn::Module {
 public:
  Gpt2Attention(const ModelConfig& c, double proj_std) : n_head_(c.n_head) {
    c_attn_ = register_module("c_attn", std::make_shared<Linear>(c.d_model, 3 * c.d_model, true, c.init_std));
    c_proj_ = register_module("c_proj", std::make_shared<Linear>(c.d_model, c.d_model, true, proj_std));
  }
  torch::Tensor Forward(const torch::Tensor& x, const BlockContext& ctx) {
    if (ctx.tensor_group) return ForwardHeadsShare(x, ctx, *ctx.tensor_group);
    return c_proj_->Forward(Attention(Qkv(x, c_attn_->Forward(x, ctx)), ctx), ctx);
  }
  torch::Tensor ForwardCached(const torch::Tensor& x, KvCache& cache) {
    const BlockContext plain;
    torch::Tensor qkv = Qkv(x, c_attn_->Forward(x, plain));
    return c_proj_->Forward(CachedCausalAttention(qkv[0], qkv[1], qkv[2], cache), plain);
  }

 private:
  static torch::Tensor Attention(const torch::Tensor& qkv, const BlockContext& ctx) {
    if (ctx.sequence_group)  // Note [Ulysses]
      return ShardedCausalAttention(qkv[0], qkv[1], qkv[2], *ctx.sequence_group, ctx.packing);
    return CausalAttention(qkv[0], qkv[1], qkv[2], ctx.packing);
  }

  // Note [Tensor parallel]: this rank's share of the heads: its rows of each of c_attn's q, k
  // and v, its columns of c_proj, summed over the group.
  torch::Tensor ForwardHeadsShare(const torch::Tensor& x, const BlockContext& ctx, Communicator& group) {
    const double size = group.world_size();
    const int64_t D = x.size(2) / n_head_;
    const TensorShare heads = ShareOf(n_head_, group), columns{heads.first * D, heads.count * D};
    const torch::Tensor in = EnterTensorGroup(x, group);
    const torch::Tensor mine = c_proj_->ForwardColumns(
        Attention(Qkv(x, c_attn_->ForwardRows(in, columns, size, ctx, /*stack=*/3)), ctx), columns, size, ctx);
    return c_proj_->AddBias(LeaveTensorGroup(mine, group));
  }

  // x [B, T, C], its projection [B, T, 3n] (n = C, or a share of the heads' columns) -> [3, B,
  // n / D, T, D]: the first n columns are q, split into heads of D.
  torch::Tensor Qkv(const torch::Tensor& x, const torch::Tensor& projected) const {
    const int64_t B = x.size(0), T = x.size(1), D = x.size(2) / n_head_;
    return projected.view({B, T, 3, projected.size(2) / (3 * D), D}).permute({2, 0, 3, 1, 4});
  }

  int64_t n_head_;
  std::shared_ptr<Linear> c_attn_, c_proj_;
};

class Gpt2Mlp final : public torch::nn::Module {
 public:
  Gpt2Mlp(const ModelConfig& c, double proj_std) {
    const int64_t F = FfnHidden(c);
    c_fc_ = register_module("c_fc", std::make_shared<Linear>(c.d_model, F, true, c.init_std));
    c_proj_ = register_module("c_proj", std::make_shared<Linear>(F, c.d_model, true, proj_std));
  }
  torch::Tensor Forward(const torch::Tensor& x, const BlockContext& ctx) {
    return RowWise([this](const torch::Tensor& t, const BlockContext& c) { return Whole(t, c); }, x, *this, ctx);  // Note [Tiled MLP]
  }
  torch::Tensor Whole(const torch::Tensor& x, const BlockContext& ctx) {
    if (ctx.tensor_group) {  // Note [Tensor parallel]: this rank's share of the width
      Communicator& group = *ctx.tensor_group;
      const double size = group.world_size();
      const TensorShare width = ShareOf(c_fc_->weight().size(0), group);
      const torch::Tensor h = torch::gelu(c_fc_->ForwardRows(EnterTensorGroup(x, group), width, size, ctx), "tanh");
      return c_proj_->AddBias(LeaveTensorGroup(c_proj_->ForwardColumns(h, width, size, ctx), group));
    }
    return c_proj_->Forward(torch::gelu(c_fc_->Forward(x, ctx), "tanh"), ctx);  // GPT-2's gelu_new
  }

 private:
  std::shared_ptr<Linear> c_fc_, c_proj_;
};

class Gpt2Layer final : public Block {
 public:
  explicit Gpt2Layer(const ModelConfig& c) {
    // GPT-2's scaled init: each residual projection adds to the stream 2*n_layer times.
    const double proj_std = c.init_std / std::sqrt(2.0 * static_cast<double>(c.n_layer));
    ln_1_ = register_module("ln_1", std::make_shared<LayerNorm>(c.d_model, c.norm_eps));
    attn_ = register_module("attn", std::make_shared<Gpt2Attention>(c, proj_std));
    ln_2_ = register_module("ln_2", std::make_shared<LayerNorm>(c.d_model, c.norm_eps));
    mlp_ = register_module("mlp", std::make_shared<Gpt2Mlp>(c, proj_std));
  }
  BlockKind kind() const override { return BlockKind::kLayer; }
  torch::Tensor Forward(const torch::Tensor& x, const BlockContext& ctx) override {
    torch::Tensor h = x + attn_->Forward(ln_1_->Forward(x), ctx);
    return h + mlp_->Forward(ln_2_->Forward(h), ctx);
  }
  torch::Tensor ForwardCached(const torch::Tensor& x, int64_t, KvCache& cache) override {
    torch::Tensor h = x + attn_->ForwardCached(ln_1_->Forward(x), cache);
    return h + mlp_->Forward(ln_2_->Forward(h), BlockContext{});
  }

 private:
  std::shared_ptr<LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<Gpt2Attention> attn_;
  std::shared_ptr<Gpt2Mlp> mlp_;
};

}  // namespace

std::shared_ptr<Block> MakeGpt2Block(const ModelConfig& config, int index) {
  std::shared_ptr<Block> block;
  switch (KindOf(config, index)) {
    case BlockKind::kEmbedding: block = std::make_shared<Gpt2Embedding>(config); break;
    case BlockKind::kLayer: block = std::make_shared<Gpt2Layer>(config); break;
    case BlockKind::kHead: block = std::make_shared<LmHead<LayerNorm>>(config, "ln_f"); break;
  }
  InitialiseBlock(*block, config.seed, index);
  return block;
}

}  // namespace strata::model::detail
