// A model's shape without LibTorch: the architecture config, its validation, and the
// arithmetic of its blocks ([embedding, layer 0 .. layer L-1, head]: how many, how many
// parameters each, which weight the head borrows, FLOPs per token). The estimator, the
// shard plan and the config tools use this; the blocks themselves are in model.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "strata/status.h"

namespace strata::model {

enum class Arch { kGpt2, kLlama };

// LLaMA 3.1's RoPE frequency scaling ("rope_type": "llama3" in a Hugging Face config.json):
// wavelengths above original_max_positions / low_freq_factor are stretched by `factor`,
// those below original_max_positions / high_freq_factor kept, the band between blended.
// factor 0 = none (plain RoPE).
// Or Phi-3.5/4's "longrope" (short_factor set): each frequency divided by its short factor,
// and cos / sin times attention_factor (0: sqrt(1 + ln(max / original) / ln(original)), 1 when
// max_positions <= original). Its long factors, for sequences past original_max_positions,
// are kept for export only: seq_len must stay within original_max_positions.
struct RopeScaling {
  double factor = 0;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int64_t original_max_positions = 8192;
  std::vector<double> short_factor, long_factor;  // longrope: one per rotated frequency
  double attention_factor = 0;
  bool longrope() const { return !short_factor.empty(); }
  static RopeScaling Llama3(double factor, double low, double high, int64_t original) {
    RopeScaling r;
    r.factor = factor;
    r.low_freq_factor = low;
    r.high_freq_factor = high;
    r.original_max_positions = original;
    return r;
  }
  bool operator==(const RopeScaling&) const = default;
};

// Low-rank adapters (strata.lora, PEFT's LoRA): each targeted projection y = x W^T + b gains
// (alpha / r) * (x A^T) B^T with A [r, in] and B [out, r], B starting at zero; W and every
// other base parameter is frozen. r = 0: none. LLaMA family only; targets are HF's
// projection names (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj; Phi-3's
// are qkv_proj, o_proj, gate_up_proj, down_proj, its q/k/v and gate/up fused).
// A mixture of experts' experts are adapted through target_parameters, as PEFT adapts
// transformers' fused expert tensors (Note [Expert adapters] in moe.h): "experts.gate_up_proj"
// and "experts.down_proj" (also written "gate_up_proj", "mlp.experts.gate_up_proj", ...).
struct LoraConfig {
  int64_t r = 0;
  double alpha = 16;
  double dropout = 0;  // on the adapter's input, training only (Note [LoRA dropout])
  std::vector<std::string> target_modules;
  std::vector<std::string> target_parameters;
  // (base_dtype) "" = the compute dtype; "nf4" = QLoRA: the frozen base's projection weights
  // stored and moved in NF4 (Note [NF4 base] in nf4_blob.h), dequantised per block for compute.
  std::string base_dtype;
  bool enabled() const { return r > 0; }
  bool nf4_base() const { return enabled() && base_dtype == "nf4"; }
  bool Targets(const std::string& projection) const;
  // Whether target_parameters names the experts' fused `tensor` (gate_up_proj or down_proj).
  bool TargetsExperts(const std::string& tensor) const;
  double scale() const { return alpha / static_cast<double>(r); }
  bool operator==(const LoraConfig&) const = default;
};
inline constexpr const char* kLoraExpertTensors[] = {"gate_up_proj", "down_proj"};

// Gemma 2 and Gemma 3 (text) (hf_model_type "gemma2", "gemma3_text"; gemma.cc): LLaMA's block
// with Gemma's (1 + w) RMSNorms computed in fp32, norms before and after the attention and
// the MLP, the embedding scaled by sqrt(d_model), a tanh-GELU MLP and the options below
// (Hugging Face config.json names in parentheses). Gemma 3 also normalises q and k per head
// (qk_norm). Empty for every other family.
struct GemmaOptions {
  double query_pre_attn_scalar = 0;  // (query_pre_attn_scalar) attention scores scaled by its -1/2 power; 0 = head dim
  double attn_softcap = 0;           // (attn_logit_softcapping) scores = cap * tanh(scores / cap); 0 = none
  double final_softcap = 0;          // (final_logit_softcapping) the same on the logits; 0 = none
  double rope_local_theta = 0;       // (rope_local_base_freq) RoPE base of the sliding-window layers; 0 = rope_theta
  std::vector<bool> sliding_layers;  // (layer_types) which layers are "sliding_attention"; empty = none
  bool operator==(const GemmaOptions&) const = default;
};

// Mixtures of experts (hf_model_type "mixtral", "qwen3_moe", "olmoe"; moe.cc): a sparse layer's
// MLP is a router (gate [E, C]) choosing top_k of num_experts SwiGLU experts per token, whose
// outputs are summed weighted by the router's softmax probabilities (renormalised over the
// chosen with norm_topk_prob; Mixtral always). Every expert's weights are in the layer's
// block and move with it. Empty (num_experts 0) for dense families.
struct MoeOptions {
  int64_t num_experts = 0;       // (num_local_experts / num_experts)
  int64_t top_k = 0;             // (num_experts_per_tok)
  int64_t expert_ffn = 0;        // (moe_intermediate_size; Mixtral, OLMoE: intermediate_size) each expert's hidden width
  bool norm_topk_prob = false;   // (norm_topk_prob) the chosen probabilities renormalised to sum to 1
  std::vector<bool> dense_layers;  // (mlp_only_layers, decoder_sparse_step) layers with a dense MLP instead; empty = none
  // (router_aux_loss_coef, when output_router_logits) the Switch Transformer load-balancing
  // loss of each micro-batch's routing, times this, added to its training loss (Note [Router
  // loss] in router_loss.h); 0 = none.
  double aux_loss_coef = 0;
  bool operator==(const MoeOptions&) const = default;
};

// The LLaMA-shaped variants (Mistral, Qwen2/2.5, Qwen3, Phi-3) are Arch::kLlama with the
// flags below; hf_model_type says which Hugging Face family `export` writes back (and, for
// Phi-3, that its HF tensors fuse some projections: hf_names.h). Every
// field added after GPT-2 / LLaMA defaults to the older behaviour, so configs and
// checkpoints written before it read unchanged.
struct ModelConfig {
  Arch arch = Arch::kGpt2;
  int64_t vocab_size = 256;  // the byte tokenizer's
  int64_t seq_len = 128;     // max positions (GPT-2's learned position table size)
  int64_t n_layer = 2;
  int64_t d_model = 128;
  int64_t n_head = 4;
  int64_t n_kv_head = 0;     // LLaMA grouped-query attention; 0 = n_head
  int64_t ffn_hidden = 0;    // 0 = GPT-2: 4*d_model; LLaMA: 8/3*d_model rounded up to a multiple of 64
  bool tie_embeddings = true;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  double init_std = 0.02;
  uint64_t seed = 1234;
  // LLaMA family extensions (Hugging Face config.json names in parentheses).
  int64_t head_dim = 0;         // (head_dim) 0 = d_model / n_head; Qwen3 sets it, n_head * head_dim may differ from d_model
  bool qkv_bias = false;        // Qwen2: q_proj, k_proj, v_proj carry biases (o_proj does not)
  bool qk_norm = false;         // Qwen3: RMSNorm over each head of q and k, before RoPE
  RopeScaling rope_scaling;     // (rope_scaling / rope_parameters, rope_type "llama3" or "longrope")
  double partial_rotary = 1;    // (partial_rotary_factor) RoPE on the first head_dim * this dims of each head (Phi-4-mini)
  int64_t max_positions = 0;    // (max_position_embeddings, GPT-2 n_positions) 0 = seq_len; GPT-2's wpe rows
  int64_t sliding_window = 0;   // (sliding_window) Mistral/Qwen: 0 = none; seq_len must not exceed it
  std::string hf_model_type;    // "" = the arch's own ("gpt2", "llama"); "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text"
  GemmaOptions gemma;           // Gemma 2 / 3 only
  MoeOptions moe;               // Mixtral, Qwen3-MoE, OLMoE only
  LoraConfig lora;              // adapters (strata.lora); off by default
};

// LoRA's parameters ("self_attn.q_proj.lora_A", "mlp.down_proj.lora_B"): trainable, never in
// a base model's files.
bool IsAdapterName(const std::string& name);
// The dims of each head RoPE rotates (head_dim * partial_rotary, truncated as transformers does).
int64_t RotaryDim(const ModelConfig& config);
// The factor cos and sin are scaled by (longrope's attention factor; else 1).
double RopeAttentionFactor(const ModelConfig& config);
// Gemma 2 or Gemma 3 (text): gemma.cc's blocks.
bool IsGemma(const ModelConfig& config);
// Mixtral, Qwen3-MoE or OLMoE; and whether layer `layer` (0-based) has experts.
bool IsMoe(const ModelConfig& config);
bool SparseLayer(const ModelConfig& config, int64_t layer);
// QLoRA: whether parameter `name` of block `index` is stored in NF4 (a layer's *_proj.weight).
bool StoredInNf4(const ModelConfig& config, int index, const std::string& name);

// Per-head width: head_dim, or d_model / n_head when it is 0.
int64_t HeadDim(const ModelConfig& config);
// Rows of the position table (GPT-2) / the longest sequence the model was made for.
int64_t MaxPositions(const ModelConfig& config);

// The largest sizes a model config may hold, whatever its source (strata.model, a Hugging
// Face config.json, a checkpoint's manifest): far beyond today's models, and small enough
// that no product of them overflows the arithmetic of parameter and byte counts.
struct ModelLimits {
  static constexpr int64_t kVocab = int64_t{1} << 24;
  static constexpr int64_t kSeqLen = int64_t{1} << 20;
  static constexpr int64_t kLayers = 10000;
  static constexpr int64_t kDModel = int64_t{1} << 20;
  static constexpr int64_t kHeads = 4096;
  static constexpr int64_t kFfnHidden = int64_t{1} << 22;
  static constexpr int64_t kHeadDim = int64_t{1} << 16;
  static constexpr int64_t kPositions = int64_t{1} << 24;  // max_positions, sliding_window
};

// The range [lo, hi] each setting may take, whatever its source: strata.model (and --set), a
// Hugging Face config.json and a checkpoint's manifest are read against these same bounds,
// and Validate checks every one again, so that no source lets through what another refuses.
struct ValueRange {
  double lo, hi;
  bool Holds(double v) const { return v >= lo && v <= hi; }  // (NaN: never)
};
struct ModelRanges {
  using L = ModelLimits;
  static constexpr ValueRange kVocab{2, L::kVocab};
  static constexpr ValueRange kSeqLen{1, L::kSeqLen};
  static constexpr ValueRange kLayers{1, L::kLayers};
  static constexpr ValueRange kDModel{1, L::kDModel};
  static constexpr ValueRange kHeads{1, L::kHeads};
  static constexpr ValueRange kKvHeads{0, L::kHeads};          // 0 = n_head
  static constexpr ValueRange kFfnHidden{0, L::kFfnHidden};    // 0 = the arch's default
  static constexpr ValueRange kHeadDim{0, L::kHeadDim};        // 0 = d_model / n_head
  static constexpr ValueRange kPositions{0, L::kPositions};    // max_positions (0 = seq_len), sliding_window (0 = none)
  static constexpr ValueRange kOriginalPositions{1, L::kPositions};
  static constexpr ValueRange kNormEps{0, 1};                   // and > 0
  static constexpr ValueRange kRopeTheta{1, 1e9};
  static constexpr ValueRange kInitStd{0, 10};
  static constexpr ValueRange kPartialRotary{0, 1};             // and > 0
  static constexpr ValueRange kRopeFactor{0, 1e6};              // llama3's factor, low and high frequency factors
  static constexpr ValueRange kLongropeFactor{0, 1e6};          // each short / long factor, and > 0
  static constexpr ValueRange kAttentionFactor{0, 1e3};
  static constexpr ValueRange kGemmaScale{0, 1e9};              // query_pre_attn_scalar, the soft-caps
  static constexpr ValueRange kRopeLocalTheta{0, 1e12};
  static constexpr ValueRange kExperts{1, 4096};                // num_experts, top_k
  static constexpr ValueRange kExpertFfn{1, L::kFfnHidden};
  static constexpr ValueRange kAuxLossCoef{0, 1e3};
};

// Checks sizes (within ModelLimits; positive, d_model divisible by n_head unless head_dim is
// set, n_head divisible by n_kv_head, even head dim for RoPE, seq_len within max_positions and
// sliding_window, the LLaMA-only flags off for GPT-2); the error names the field and the
// allowed range.
Status Validate(const ModelConfig& config);

// The same model with every default spelled out (ffn_hidden, n_kv_head, max_positions as
// the sizes they stand for; head_dim 0 when it is d_model / n_head): two configs describe the
// same model exactly when their canonical forms are equal. For `config` that passed Validate.
ModelConfig Canonical(const ModelConfig& config);

enum class BlockKind { kEmbedding, kLayer, kHead };

// Block `index` of a config: 0 = embedding, 1..n_layer = layers, n_layer+1 = head.
inline BlockKind KindOf(const ModelConfig& config, int index) {
  if (index == 0) return BlockKind::kEmbedding;
  return index <= config.n_layer ? BlockKind::kLayer : BlockKind::kHead;
}

// The MLP width after defaults: GPT-2 4*C; LLaMA 8/3*C rounded up to a multiple of 64.
int64_t FfnHidden(const ModelConfig& config);

// The head (user) reuses the owner's parameter named owner_param.
struct Tie {
  int owner_block = 0;
  std::string owner_param;  // e.g. "wte.weight"
  int user_block = 0;
};

// A mixture-of-experts layer's experts in its block's flat layout: `count` experts of `numel`
// elements each (gate, up, down), one after another from element `begin`; the router and
// attention lie before them, LoRA's adapters after (Note [Expert-aware fetching]).
struct ExpertSpan {
  int64_t begin = 0, numel = 0, count = 0;  // count 0: a dense block
  int64_t end() const { return begin + numel * count; }
  bool operator==(const ExpertSpan&) const = default;
};

class ModelSpec {
 public:
  explicit ModelSpec(ModelConfig config);  // config must pass Validate() (STRATA_CHECKed)
  const ModelConfig& config() const { return config_; }
  int num_blocks() const;  // n_layer + 2
  std::optional<Tie> tie() const;
  int64_t block_parameters(int index) const;  // elements in that block's own parameters (adapters included)
  // Of those, the trainable ones: all of them, or with LoRA the adapters only, which come
  // last in the block's flat layout (Note [Block parameters]): [base | adapters].
  int64_t trainable_parameters(int index) const;
  // QLoRA (lora.nf4_base()): the elements of that block's weights stored in NF4 (the layers'
  // seven projection weights, in flat order), and the bytes their NF4 forms take (blobs of
  // Nf4BlobBytes each); none otherwise.
  std::vector<int64_t> nf4_weights(int index) const;
  int64_t nf4_parameters(int index) const;
  int64_t nf4_bytes(int index) const;
  // A sparse layer's experts (count 0 for every other block).
  ExpertSpan experts(int index) const;
  int64_t num_parameters() const;             // all blocks (a tied weight counted once)
  // Training FLOPs per token: 6 * parameters (embedding tables excluded; the LM head's
  // [V, C] matmul counted, tied or not; of a sparse layer's experts only top_k) + attention
  // 12 * n_layer * n_head * head dim * seq_len (forward + backward, no recomputation).
  double train_flops_per_token() const;

 private:
  ModelConfig config_;
};

}  // namespace strata::model
