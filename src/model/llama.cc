// LLaMA as blocks (also Mistral, Qwen2/2.5, Qwen3 and the mixtures of experts Mixtral, Qwen3-MoE
// and OLMoE, which share its names; their sparse MLPs are moe.h's, registered as "mlp" or, in
// Mixtral, "block_sparse_moe": gate.weight [E, C], experts.<j>.{gate,up,down}_proj.weight or
// experts.<j>.{w1,w3,w2}.weight; OLMoE's q_norm / k_norm [H*D], [Hkv*D] normalise whole projections). Parameter
// names are Hugging Face's LlamaForCausalLM names without the "model." / "model.layers.<i>."
// prefixes, registered in execution order (Note [Block parameters]); D = HeadDim() (C / n_head
// unless head_dim is set), Hkv = n_kv_head, F = FfnHidden():
//   embedding  wte.weight [V, C]                      (HF: model.embed_tokens.weight)
//   layer      input_layernorm.weight [C]
//              self_attn.q_proj.weight [H*D, C], self_attn.k_proj.weight [Hkv*D, C],
//              self_attn.v_proj.weight [Hkv*D, C]
//                (qkv_bias, Qwen2: self_attn.{q,k,v}_proj.bias [H*D], [Hkv*D], [Hkv*D])
//                (qk_norm, Qwen3: self_attn.q_norm.weight [D], self_attn.k_norm.weight [D])
//              self_attn.o_proj.weight [C, H*D]
//              post_attention_layernorm.weight [C]
//              mlp.gate_proj.weight [F, C], mlp.up_proj.weight [F, C], mlp.down_proj.weight [C, F]
//   head       norm.weight [C], lm_head.weight [V, C] (absent when tied)
// With strata.lora each targeted projection X also has X.lora_A [r, in] and X.lora_B [out, r],
// placed after every base parameter in the flat layout (Note [Block parameters]).
// No other biases. HF stores the same [out, in] layouts, so weights load without transposes;
// q_proj/k_proj rows are in HF's rotate-half order (no permutation as for Meta's files).
#include <optional>
#include <tuple>

#include "src/model/model_family.h"
#include "src/model/blocks.h"
#include "src/model/layers.h"
#include "src/model/moe.h"
#include "src/model/tiled_rows.h"

namespace strata::model::detail {
namespace {

int64_t KvHeads(const ModelConfig& c) { return c.n_kv_head > 0 ? c.n_kv_head : c.n_head; }

class LlamaEmbedding final : public Block {
 public:
  explicit LlamaEmbedding(const ModelConfig& c) {
    wte_ = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.d_model, c.init_std));
  }
  BlockKind kind() const override { return BlockKind::kEmbedding; }
  torch::Tensor Forward(const torch::Tensor& tokens, const BlockContext&) override {
    STRATA_CHECK(tokens.dim() == 2) << "tokens must be [B, T], got " << tokens.sizes();
    return wte_->Forward(tokens);  // positions enter through RoPE in every layer
  }

 private:
  std::shared_ptr<Embedding> wte_;
};

class LlamaAttention final : public torch::nn::Module {
 public:
  explicit LlamaAttention(const ModelConfig& c)
      : n_head_(c.n_head), n_kv_head_(KvHeads(c)), head_dim_(HeadDim(c)), rotary_dim_(RotaryDim(c)),
        rope_theta_(c.rope_theta), rope_scaling_(c.rope_scaling) {
    rope_scaling_.attention_factor = RopeAttentionFactor(c);
    const int64_t C = c.d_model, q_out = n_head_ * head_dim_, kv_out = n_kv_head_ * head_dim_;
    q_proj_ = register_module("q_proj", std::make_shared<Linear>(C, q_out, c.qkv_bias, c.init_std, AdapterFor(c.lora, "q_proj")));
    k_proj_ = register_module("k_proj", std::make_shared<Linear>(C, kv_out, c.qkv_bias, c.init_std, AdapterFor(c.lora, "k_proj")));
    v_proj_ = register_module("v_proj", std::make_shared<Linear>(C, kv_out, c.qkv_bias, c.init_std, AdapterFor(c.lora, "v_proj")));
    if (const Adapter a = AdapterFor(c.lora, "qkv_proj"); a.r > 0)  // Phi-3's fused q, k, v: one adapter
      qkv_lora_ = register_module("qkv_proj", std::make_shared<StackedAdapter>(1, C, q_out + 2 * kv_out, a));
    if (c.qk_norm) {
      q_norm_ = register_module("q_norm", std::make_shared<RmsNorm>(head_dim_, c.norm_eps));
      k_norm_ = register_module("k_norm", std::make_shared<RmsNorm>(head_dim_, c.norm_eps));
    }
    if (FamilyOf(c).qk_norm_whole) {  // OLMoE: over the whole projections, before the heads are split
      q_norm_full_ = register_module("q_norm", std::make_shared<RmsNorm>(q_out, c.norm_eps));
      k_norm_full_ = register_module("k_norm", std::make_shared<RmsNorm>(kv_out, c.norm_eps));
    }
    o_proj_ = register_module("o_proj", std::make_shared<Linear>(q_out, C, false, c.init_std, AdapterFor(c.lora, "o_proj")));
  }
  torch::Tensor Forward(const torch::Tensor& x, const BlockContext& ctx) {
    if (ctx.tensor_group) return ForwardHeadsShare(x, ctx, *ctx.tensor_group);
    auto [q, k, v] = Project(x, ctx.sequence_offset, ctx);  // RoPE at this rank's positions
    return o_proj_->Forward(Attention(q, k, v, ctx), ctx);
  }
  torch::Tensor ForwardCached(const torch::Tensor& x, int64_t past, KvCache& cache) {
    const BlockContext plain;
    auto [q, k, v] = Project(x, past, plain);
    return o_proj_->Forward(CachedCausalAttention(q, k, v, cache), plain);
  }

 private:
  torch::Tensor Attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          const BlockContext& ctx) const {
    if (ctx.sequence_group) return ShardedCausalAttention(q, k, v, *ctx.sequence_group, ctx.packing);  // Note [Ulysses]
    return CausalAttention(q, k, v, ctx.packing);
  }

  // Note [Tensor parallel]: this rank's share of the heads (and of the key/value heads), its
  // columns of o_proj, summed over the group.
  torch::Tensor ForwardHeadsShare(const torch::Tensor& x, const BlockContext& ctx, Communicator& group) {
    STRATA_CHECK(!qkv_lora_ && !q_norm_full_) << "tensor parallel with Phi-3's fused adapter or OLMoE's whole-projection norms";
    const double size = group.world_size();
    const int64_t D = head_dim_;
    const TensorShare heads = ShareOf(n_head_, group), kv_heads = ShareOf(n_kv_head_, group);
    const torch::Tensor in = EnterTensorGroup(x, group);
    // One statement each: adapters draw their dropout masks in the unsplit run's order.
    torch::Tensor q_share = q_proj_->ForwardRows(in, {heads.first * D, heads.count * D}, size, ctx);
    torch::Tensor k_share = k_proj_->ForwardRows(in, {kv_heads.first * D, kv_heads.count * D}, size, ctx);
    torch::Tensor v_share = v_proj_->ForwardRows(in, {kv_heads.first * D, kv_heads.count * D}, size, ctx);
    auto [q, k, v] = Project(in, ctx.sequence_offset, ctx, std::make_tuple(q_share, k_share, v_share));
    const torch::Tensor mine =
        o_proj_->ForwardColumns(Attention(q, k, v, ctx), {heads.first * D, heads.count * D}, size, ctx);
    return o_proj_->AddBias(LeaveTensorGroup(mine, group));
  }

  // q [B, H, T, D], k, v [B, Hkv, T, D] for positions past..past+T-1, RoPE applied. `shares`:
  // the projections already taken, of a share of the heads (Note [Tensor parallel]).
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> Project(
      const torch::Tensor& x, int64_t past, const BlockContext& ctx,
      std::optional<std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>> shares = std::nullopt) const {
    const int64_t B = x.size(0), T = x.size(1), D = head_dim_;
    torch::Tensor q, k, v;
    if (shares) {
      std::tie(q, k, v) = *shares;
    } else {
      q = q_proj_->Forward(x, ctx), k = k_proj_->Forward(x, ctx), v = v_proj_->Forward(x, ctx);
      if (qkv_lora_) qkv_lora_->AddTo(x, {&q, &k, &v}, ctx);
    }
    if (q_norm_full_) {  // OLMoE
      q = q_norm_full_->Forward(q);
      k = k_norm_full_->Forward(k);
    }
    q = q.view({B, T, q.size(-1) / D, D});
    k = k.view({B, T, k.size(-1) / D, D});
    if (q_norm_ && shares) {  // on a share of the heads: Note [Tensor parallel]
      const double size = ctx.tensor_group->world_size();
      q = q_norm_->ForwardOnShare(q, size);
      k = k_norm_->ForwardOnShare(k, size);
    } else if (q_norm_) {  // Qwen3: per head, before RoPE
      q = q_norm_->Forward(q);
      k = k_norm_->Forward(k);
    }
    q = q.transpose(1, 2);  // [B, H, T, D]
    k = k.transpose(1, 2);  // [B, Hkv, T, D]
    v = v.view({B, T, v.size(-1) / D, D}).transpose(1, 2);
    // rotary_dim_: D, or fewer (partial rotary: the rest of each head passes)
    auto [cos, sin] = RopeTablesFor(q, rotary_dim_, rope_theta_, rope_scaling_, past, ctx.packing);
    return {ApplyRope(q, cos, sin), ApplyRope(k, cos, sin), v};
  }

  int64_t n_head_, n_kv_head_, head_dim_, rotary_dim_;
  double rope_theta_;
  RopeScaling rope_scaling_;
  std::shared_ptr<Linear> q_proj_, k_proj_, v_proj_, o_proj_;
  std::shared_ptr<StackedAdapter> qkv_lora_;  // LoRA on Phi-3's qkv_proj; null else
  std::shared_ptr<RmsNorm> q_norm_, k_norm_;  // null unless qk_norm
  std::shared_ptr<RmsNorm> q_norm_full_, k_norm_full_;  // OLMoE only
};

// SwiGLU: down(silu(gate(x)) * up(x)).
class LlamaMlp final : public FeedForward {
 public:
  explicit LlamaMlp(const ModelConfig& c) {
    const int64_t C = c.d_model, F = FfnHidden(c);
    gate_proj_ = register_module("gate_proj", std::make_shared<Linear>(C, F, false, c.init_std, AdapterFor(c.lora, "gate_proj")));
    up_proj_ = register_module("up_proj", std::make_shared<Linear>(C, F, false, c.init_std, AdapterFor(c.lora, "up_proj")));
    if (const Adapter a = AdapterFor(c.lora, "gate_up_proj"); a.r > 0)  // Phi-3's fused gate, up: one adapter
      gate_up_lora_ = register_module("gate_up_proj", std::make_shared<StackedAdapter>(1, C, 2 * F, a));
    down_proj_ = register_module("down_proj", std::make_shared<Linear>(F, C, false, c.init_std, AdapterFor(c.lora, "down_proj")));
  }
  torch::Tensor Forward(const torch::Tensor& x, const BlockContext& ctx) override {
    return RowWise([this](const torch::Tensor& t, const BlockContext& c) { return Whole(t, c); }, x, *this, ctx);  // Note [Tiled MLP]
  }
  torch::Tensor Whole(const torch::Tensor& x, const BlockContext& ctx) {
    if (ctx.tensor_group) {  // Note [Tensor parallel]: this rank's share of the width
      STRATA_CHECK(!gate_up_lora_) << "tensor parallel with Phi-3's fused adapter";
      Communicator& group = *ctx.tensor_group;
      const double size = group.world_size();
      const TensorShare width = ShareOf(gate_proj_->weight().size(0), group);
      const torch::Tensor in = EnterTensorGroup(x, group);
      const torch::Tensor gate = gate_proj_->ForwardRows(in, width, size, ctx);  // (before up: dropout's order)
      const torch::Tensor h = torch::silu(gate) * up_proj_->ForwardRows(in, width, size, ctx);
      return LeaveTensorGroup(down_proj_->ForwardColumns(h, width, size, ctx), group);
    }
    torch::Tensor gate = gate_proj_->Forward(x, ctx), up = up_proj_->Forward(x, ctx);
    if (gate_up_lora_) gate_up_lora_->AddTo(x, {&gate, &up}, ctx);
    return down_proj_->Forward(torch::silu(gate) * up, ctx);
  }

 private:
  std::shared_ptr<Linear> gate_proj_, up_proj_, down_proj_;
  std::shared_ptr<StackedAdapter> gate_up_lora_;  // LoRA on Phi-3's gate_up_proj; null else
};

class LlamaLayer final : public Block {
 public:
  LlamaLayer(const ModelConfig& c, int64_t layer) {
    input_layernorm_ = register_module("input_layernorm", std::make_shared<RmsNorm>(c.d_model, c.norm_eps));
    self_attn_ = register_module("self_attn", std::make_shared<LlamaAttention>(c));
    post_attention_layernorm_ =
        register_module("post_attention_layernorm", std::make_shared<RmsNorm>(c.d_model, c.norm_eps));
    if (SparseLayer(c, layer))  // Mixtral's sparse MLP is block_sparse_moe
      mlp_ = register_module(FamilyOf(c).mixtral_experts ? "block_sparse_moe" : "mlp", std::make_shared<MoeMlp>(c));
    else
      mlp_ = register_module("mlp", std::make_shared<LlamaMlp>(c));
  }
  BlockKind kind() const override { return BlockKind::kLayer; }
  torch::Tensor Forward(const torch::Tensor& x, const BlockContext& ctx) override {
    torch::Tensor h = x + self_attn_->Forward(input_layernorm_->Forward(x), ctx);
    return h + mlp_->Forward(post_attention_layernorm_->Forward(h), ctx);
  }
  torch::Tensor ForwardCached(const torch::Tensor& x, int64_t past, KvCache& cache) override {
    torch::Tensor h = x + self_attn_->ForwardCached(input_layernorm_->Forward(x), past, cache);
    return h + mlp_->Forward(post_attention_layernorm_->Forward(h), BlockContext{});
  }

 private:
  std::shared_ptr<RmsNorm> input_layernorm_, post_attention_layernorm_;
  std::shared_ptr<LlamaAttention> self_attn_;
  std::shared_ptr<FeedForward> mlp_;
};

}  // namespace

std::shared_ptr<Block> MakeLlamaBlock(const ModelConfig& config, int index) {
  std::shared_ptr<Block> block;
  switch (KindOf(config, index)) {
    case BlockKind::kEmbedding: block = std::make_shared<LlamaEmbedding>(config); break;
    case BlockKind::kLayer: block = std::make_shared<LlamaLayer>(config, index - 1); break;
    case BlockKind::kHead: block = std::make_shared<LmHead<RmsNorm>>(config, "norm"); break;
  }
  InitialiseBlock(*block, config.seed, index);
  return block;
}

}  // namespace strata::model::detail
