// Gemma 2 and Gemma 3 (text) as blocks: LLaMA's shape (llama.cc) with Gemma's differences
// (GemmaOptions in model_config.h). Parameter names are Hugging Face's Gemma2ForCausalLM /
// Gemma3ForCausalLM names without the "model." / "model.layers.<i>." prefixes, registered in
// execution order (Note [Block parameters]):
//   embedding  wte.weight [V, C]                  (HF: model.embed_tokens.weight), times sqrt(C)
//   layer      input_layernorm.weight [C]
//              self_attn.q_proj.weight [H*D, C], self_attn.k_proj.weight [Hkv*D, C],
//              self_attn.v_proj.weight [Hkv*D, C]
//                (Gemma 3: self_attn.q_norm.weight [D], self_attn.k_norm.weight [D])
//              self_attn.o_proj.weight [C, H*D]
//              post_attention_layernorm.weight [C], pre_feedforward_layernorm.weight [C]
//              mlp.gate_proj.weight [F, C], mlp.up_proj.weight [F, C], mlp.down_proj.weight [C, F]
//              post_feedforward_layernorm.weight [C]
//   head       norm.weight [C] (the tied embedding as the LM head, or lm_head.weight [V, C])
// With strata.lora the targeted projections carry adapters as LLaMA's do (llama.cc), and a
// tensor group splits the heads and the MLP's width as LLaMA's (Note [Tensor parallel]).
// Every norm is Gemma's: in fp32, scaled by (1 + weight), cast back (weights start at 0).
// Attention scores are scaled by query_pre_attn_scalar^-1/2; with attn_softcap (Gemma 2) they
// are soft-capped, cap * tanh(scores / cap), before the mask and an fp32 softmax, which no
// fused kernel does: those layers build the [T, T] scores as transformers' eager attention
// does. Sliding-window layers (Gemma 3) rotate with their own RoPE base; their window is the
// whole sequence (Validate() keeps seq_len within it).
#include <cmath>
#include <limits>
#include <tuple>

#include "src/model/blocks.h"
#include "src/model/layers.h"
#include "src/model/tiled_rows.h"

namespace strata::model::detail {
namespace {

class GemmaRmsNorm : public Leaf {
 public:
  GemmaRmsNorm(int64_t dim, double eps) : eps_(eps) { weight_ = AddParameter("weight", {dim}); }
  torch::Tensor Forward(const torch::Tensor& x) const { return Normed(x, weight_); }
  // Over a tensor-parallel share of the heads (Gemma 3's per-head norms, Note [Tensor
  // parallel]): the weight's gradient is this rank's heads' part, taken times `scale`.
  torch::Tensor ForwardOnShare(const torch::Tensor& x, double scale) const {
    return Normed(x, WeightSlice(weight_, 0, 0, weight_.size(0), scale));
  }
  void Initialise(WeightDraws&) override { weight_.zero_(); }  // a scale of 1 + 0

 private:
  torch::Tensor Normed(const torch::Tensor& x, const torch::Tensor& weight) const {
    const torch::Tensor x32 = x.to(torch::kFloat32);
    const torch::Tensor normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps_);
    return (normed * (1.0 + weight.to(torch::kFloat32))).to(x.scalar_type());
  }
  torch::Tensor weight_;
  double eps_;
};

class GemmaEmbedding final : public Block {
 public:
  explicit GemmaEmbedding(const ModelConfig& c) : scale_(std::sqrt(static_cast<double>(c.d_model))) {
    wte_ = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.d_model, c.init_std));
  }
  BlockKind kind() const override { return BlockKind::kEmbedding; }
  torch::Tensor Forward(const torch::Tensor& tokens, const BlockContext&) override {
    STRATA_CHECK(tokens.dim() == 2) << "tokens must be [B, T], got " << tokens.sizes();
    const torch::Tensor e = wte_->Forward(tokens);
    return e * torch::scalar_tensor(scale_, e.options());  // sqrt(C) rounded to the dtype, as transformers
  }

 private:
  double scale_;
  std::shared_ptr<Embedding> wte_;
};

// Causal attention of q [B, H, T, D] over k, v [B, Hkv, S, D] (`keep`: bool [T, S], or
// undefined for plain causal with S = T), scores scaled by `scale` and soft-capped by `cap`
// (0: none, SDPA's kernels). Returns [B, H, T, D].
torch::Tensor GemmaAttend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          const torch::Tensor& keep, double scale, double cap) {
  if (cap == 0)
    return Attend(q, k, v, keep.defined() ? std::optional<torch::Tensor>(keep) : std::nullopt, !keep.defined(), scale);
  const int64_t H = q.size(1), T = q.size(2), S = k.size(2);
  torch::Tensor scores = torch::matmul(q, RepeatKv(k, H).transpose(2, 3)) * scale;
  scores = torch::tanh(scores / cap) * cap;
  const torch::Tensor allowed =
      keep.defined() ? keep : torch::ones({T, S}, q.options().dtype(torch::kBool)).tril(S - T);
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  const torch::Tensor p = torch::softmax(scores, -1, torch::kFloat32).to(q.scalar_type());
  return torch::matmul(p, RepeatKv(v, H));
}

class GemmaAttention final : public torch::nn::Module {
 public:
  GemmaAttention(const ModelConfig& c, bool sliding)
      : n_head_(c.n_head), n_kv_head_(c.n_kv_head > 0 ? c.n_kv_head : c.n_head), head_dim_(HeadDim(c)),
        rope_theta_(sliding && c.gemma.rope_local_theta > 0 ? c.gemma.rope_local_theta : c.rope_theta),
        scale_(1.0 / std::sqrt(c.gemma.query_pre_attn_scalar > 0 ? c.gemma.query_pre_attn_scalar
                                                                  : static_cast<double>(HeadDim(c)))),
        cap_(c.gemma.attn_softcap) {
    const int64_t C = c.d_model, q_out = n_head_ * head_dim_, kv_out = n_kv_head_ * head_dim_;
    q_proj_ = register_module("q_proj", std::make_shared<Linear>(C, q_out, false, c.init_std, AdapterFor(c.lora, "q_proj")));
    k_proj_ = register_module("k_proj", std::make_shared<Linear>(C, kv_out, false, c.init_std, AdapterFor(c.lora, "k_proj")));
    v_proj_ = register_module("v_proj", std::make_shared<Linear>(C, kv_out, false, c.init_std, AdapterFor(c.lora, "v_proj")));
    if (c.qk_norm) {
      q_norm_ = register_module("q_norm", std::make_shared<GemmaRmsNorm>(head_dim_, c.norm_eps));
      k_norm_ = register_module("k_norm", std::make_shared<GemmaRmsNorm>(head_dim_, c.norm_eps));
    }
    o_proj_ = register_module("o_proj", std::make_shared<Linear>(q_out, C, false, c.init_std, AdapterFor(c.lora, "o_proj")));
  }
  torch::Tensor Forward(const torch::Tensor& x, const BlockContext& ctx) {
    if (ctx.tensor_group) return ForwardHeadsShare(x, ctx, *ctx.tensor_group);
    auto [q, k, v] = Project(x, ctx.sequence_offset, ctx);  // RoPE at this rank's positions (Note [Ulysses])
    return o_proj_->Forward(Attention(q, k, v, ctx), ctx);
  }
  torch::Tensor ForwardCached(const torch::Tensor& x, int64_t past, KvCache& cache) {
    const BlockContext plain;
    auto [q, k, v] = Project(x, past, plain);
    cache.k = past == 0 ? k : torch::cat({cache.k, k}, 2);
    cache.v = past == 0 ? v : torch::cat({cache.v, v}, 2);
    const int64_t B = q.size(0), T = q.size(2);
    auto i64 = torch::TensorOptions().dtype(torch::kLong).device(q.device());
    const torch::Tensor keep = torch::arange(past + T, i64).unsqueeze(0) <= (torch::arange(T, i64) + past).unsqueeze(1);
    return o_proj_->Forward(
        GemmaAttend(q, cache.k, cache.v, keep, scale_, cap_).transpose(1, 2).reshape({B, T, -1}), plain);
  }

 private:
  // [B, T, H * D]: the attention of q's heads (all of them, or a tensor-parallel share).
  torch::Tensor Attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          const BlockContext& ctx) const {
    auto attend = [this](const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c) {
      return GemmaAttend(a, b, c, {}, scale_, cap_);
    };
    if (ctx.sequence_group) return ShardedCausalAttention(q, k, v, *ctx.sequence_group, ctx.packing, attend);
    if (ctx.packing) return PackedCausalAttention(q, k, v, *ctx.packing, attend);  // Note [Packed sequences]
    const int64_t B = q.size(0), T = q.size(2);
    return GemmaAttend(q, k, v, {}, scale_, cap_).transpose(1, 2).reshape({B, T, -1});
  }

  // Note [Tensor parallel]: this rank's share of the heads (and of the key/value heads), its
  // columns of o_proj, summed over the group (one statement per projection: LoRA dropout's order).
  torch::Tensor ForwardHeadsShare(const torch::Tensor& x, const BlockContext& ctx, Communicator& group) {
    const double size = group.world_size();
    const int64_t D = head_dim_;
    const TensorShare heads = ShareOf(n_head_, group), kv_heads = ShareOf(n_kv_head_, group);
    const torch::Tensor in = EnterTensorGroup(x, group);
    const torch::Tensor q = q_proj_->ForwardRows(in, {heads.first * D, heads.count * D}, size, ctx);
    const torch::Tensor k = k_proj_->ForwardRows(in, {kv_heads.first * D, kv_heads.count * D}, size, ctx);
    const torch::Tensor v = v_proj_->ForwardRows(in, {kv_heads.first * D, kv_heads.count * D}, size, ctx);
    auto [qh, kh, vh] = Heads(q, k, v, ctx.sequence_offset, ctx, size);
    return LeaveTensorGroup(o_proj_->ForwardColumns(Attention(qh, kh, vh, ctx), {heads.first * D, heads.count * D}, size, ctx),
                            group);
  }

  // q [B, H, T, D], k, v [B, Hkv, T, D] for positions past..past+T-1, RoPE applied.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> Project(const torch::Tensor& x, int64_t past,
                                                                  const BlockContext& ctx) const {
    torch::Tensor q = q_proj_->Forward(x, ctx), k = k_proj_->Forward(x, ctx), v = v_proj_->Forward(x, ctx);
    return Heads(q, k, v, past, ctx);
  }
  // The projections' outputs [B, T, n * D] as heads, normed (Gemma 3: per head, before RoPE;
  // `share` > 0: over a tensor-parallel share of the heads, Note [Tensor parallel]) and rotated.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> Heads(torch::Tensor q, torch::Tensor k, torch::Tensor v,
                                                                int64_t past, const BlockContext& ctx,
                                                                double share = 0) const {
    const int64_t B = q.size(0), T = q.size(1), D = head_dim_;
    q = q.view({B, T, q.size(-1) / D, D});
    k = k.view({B, T, k.size(-1) / D, D});
    if (q_norm_) {
      q = share > 0 ? q_norm_->ForwardOnShare(q, share) : q_norm_->Forward(q);
      k = share > 0 ? k_norm_->ForwardOnShare(k, share) : k_norm_->Forward(k);
    }
    q = q.transpose(1, 2);
    k = k.transpose(1, 2);
    v = v.view({B, T, v.size(-1) / D, D}).transpose(1, 2);
    auto [cos, sin] = RopeTablesFor(q, D, rope_theta_, {}, past, ctx.packing);
    return {ApplyRope(q, cos, sin), ApplyRope(k, cos, sin), v};
  }

  int64_t n_head_, n_kv_head_, head_dim_;
  double rope_theta_, scale_, cap_;
  std::shared_ptr<Linear> q_proj_, k_proj_, v_proj_, o_proj_;
  std::shared_ptr<GemmaRmsNorm> q_norm_, k_norm_;
};

// GeGLU: down(gelu_tanh(gate(x)) * up(x)).
class GemmaMlp final : public torch::nn::Module {
 public:
  explicit GemmaMlp(const ModelConfig& c) {
    const int64_t C = c.d_model, F = FfnHidden(c);
    gate_proj_ = register_module("gate_proj", std::make_shared<Linear>(C, F, false, c.init_std, AdapterFor(c.lora, "gate_proj")));
    up_proj_ = register_module("up_proj", std::make_shared<Linear>(C, F, false, c.init_std, AdapterFor(c.lora, "up_proj")));
    down_proj_ = register_module("down_proj", std::make_shared<Linear>(F, C, false, c.init_std, AdapterFor(c.lora, "down_proj")));
  }
  torch::Tensor Forward(const torch::Tensor& x, const BlockContext& ctx) {
    return RowWise([this](const torch::Tensor& t, const BlockContext& c) { return Whole(t, c); }, x, *this, ctx);  // Note [Tiled MLP]
  }
  torch::Tensor Whole(const torch::Tensor& x, const BlockContext& ctx) {
    if (ctx.tensor_group) {  // Note [Tensor parallel]: this rank's share of the width
      Communicator& group = *ctx.tensor_group;
      const double size = group.world_size();
      const TensorShare width = ShareOf(gate_proj_->weight().size(0), group);
      const torch::Tensor in = EnterTensorGroup(x, group);
      const torch::Tensor gate = gate_proj_->ForwardRows(in, width, size, ctx);  // (before up: dropout's order)
      const torch::Tensor h = torch::gelu(gate, "tanh") * up_proj_->ForwardRows(in, width, size, ctx);
      return LeaveTensorGroup(down_proj_->ForwardColumns(h, width, size, ctx), group);
    }
    const torch::Tensor gate = gate_proj_->Forward(x, ctx);  // (before up: LoRA dropout's order)
    return down_proj_->Forward(torch::gelu(gate, "tanh") * up_proj_->Forward(x, ctx), ctx);
  }

 private:
  std::shared_ptr<Linear> gate_proj_, up_proj_, down_proj_;
};

class GemmaLayer final : public Block {
 public:
  GemmaLayer(const ModelConfig& c, bool sliding) {
    input_layernorm_ = register_module("input_layernorm", std::make_shared<GemmaRmsNorm>(c.d_model, c.norm_eps));
    self_attn_ = register_module("self_attn", std::make_shared<GemmaAttention>(c, sliding));
    post_attention_layernorm_ =
        register_module("post_attention_layernorm", std::make_shared<GemmaRmsNorm>(c.d_model, c.norm_eps));
    pre_feedforward_layernorm_ =
        register_module("pre_feedforward_layernorm", std::make_shared<GemmaRmsNorm>(c.d_model, c.norm_eps));
    mlp_ = register_module("mlp", std::make_shared<GemmaMlp>(c));
    post_feedforward_layernorm_ =
        register_module("post_feedforward_layernorm", std::make_shared<GemmaRmsNorm>(c.d_model, c.norm_eps));
  }
  BlockKind kind() const override { return BlockKind::kLayer; }
  torch::Tensor Forward(const torch::Tensor& x, const BlockContext& ctx) override {
    return Mlp(x + post_attention_layernorm_->Forward(self_attn_->Forward(input_layernorm_->Forward(x), ctx)), ctx);
  }
  torch::Tensor ForwardCached(const torch::Tensor& x, int64_t past, KvCache& cache) override {
    const torch::Tensor a = self_attn_->ForwardCached(input_layernorm_->Forward(x), past, cache);
    return Mlp(x + post_attention_layernorm_->Forward(a), BlockContext{});
  }

 private:
  torch::Tensor Mlp(const torch::Tensor& h, const BlockContext& ctx) {
    return h + post_feedforward_layernorm_->Forward(mlp_->Forward(pre_feedforward_layernorm_->Forward(h), ctx));
  }
  std::shared_ptr<GemmaRmsNorm> input_layernorm_, post_attention_layernorm_, pre_feedforward_layernorm_,
      post_feedforward_layernorm_;
  std::shared_ptr<GemmaAttention> self_attn_;
  std::shared_ptr<GemmaMlp> mlp_;
};

}  // namespace

std::shared_ptr<Block> MakeGemmaBlock(const ModelConfig& config, int index) {
  std::shared_ptr<Block> block;
  switch (KindOf(config, index)) {
    case BlockKind::kEmbedding: block = std::make_shared<GemmaEmbedding>(config); break;
    case BlockKind::kLayer: {
      const auto& sliding = config.gemma.sliding_layers;
      block = std::make_shared<GemmaLayer>(config, !sliding.empty() && sliding[index - 1]);
      break;
    }
    case BlockKind::kHead:
      block = std::make_shared<LmHead<GemmaRmsNorm>>(config, "norm", config.gemma.final_softcap);
      break;
  }
  InitialiseBlock(*block, config.seed, index);
  return block;
}

}  // namespace strata::model::detail
