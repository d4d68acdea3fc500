// Note [Model families]
// One row per model family Strata trains: the names Hugging Face gives it (config.json's
// model_type and architectures), how users read its name, its arch, and what its blocks fix
// about the architecture that config.json does not say. Whatever differs by family asks the
// row instead of comparing hf_model_type strings: the config.json reader and writer
// (hf_config.cc; only Gemma's and the mixtures' own keys are spelled there per type), Validate,
// the block factory (`blocks`), the tensor names, the LoRA targets, the help texts. Adding a
// family is its row here, its blocks where they differ, the keys of its config.json, and its
// tests (one round trip of config.json per row: HfConfig.EveryFamilyRoundTrips).
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace strata::model {

struct ModelConfig;

// Whether a family's blocks carry a feature: always (config.json does not say), never, or as
// the config says (a plain LLaMA config may have q/k/v biases or q/k norms).
enum class Has { kNever, kAlways, kFree };

// Which layers attend within a sliding window: none, all of them (sliding_window set), only
// with use_sliding_window or a "sliding_attention" layer type (Qwen), or as layer_types says
// (Gemma).
enum class Sliding { kNone, kAll, kWhenEnabled, kPerLayer };

// The bias keys export writes (false: Strata's blocks have no o_proj or MLP biases) as the
// family's config class spells them: LlamaConfig has attention_bias and mlp_bias, Qwen3's and
// the experts' configs attention_bias, the others neither (their class fixes the biases).
enum class BiasKeys { kNone, kAttention, kAttentionAndMlp };

// Which architecture file builds the family's blocks (MakeBlock, model.cc): gpt2.cc (Arch::kGpt2),
// llama.cc (every other family: the LLaMA shape, dense or with experts, moe.cc), or gemma.cc
// (Gemma's norms, GeGLU and soft-caps).
enum class Blocks { kGpt2, kLlama, kGemma };

struct ModelFamily {
  std::string_view model_type;  // config.json's model_type and strata.model.hf_model_type
  std::string_view causal_lm;   // the architectures entry export writes
  std::string_view base_model;  // also accepted when read (GPT2Model, LlamaModel, ...)
  std::string_view display;     // for people: "LLaMA", "Qwen3-MoE"
  Has qkv_bias = Has::kNever;   // q/k/v projection biases (Qwen2)
  Has qk_norm = Has::kNever;    // RMSNorm per head of q and k (Qwen3, Gemma 3)
  bool qk_norm_whole = false;   // OLMoE: RMSNorm over the whole q and k projections
  Blocks blocks = Blocks::kLlama;
  bool experts = false;         // a mixture of experts (moe.cc)
  bool gpt2() const { return blocks == Blocks::kGpt2; }
  bool gemma() const { return blocks == Blocks::kGemma; }
  // Mixtral's tensor names and routing: its sparse MLP is "block_sparse_moe" (else "mlp"), its
  // experts' projections w1, w3, w2 (else gate_proj, up_proj, down_proj), and the chosen
  // probabilities always renormalised (MixtralConfig has no norm_topk_prob).
  bool mixtral_experts = false;
  bool fused_projections = false;  // Phi-3: qkv_proj, gate_up_proj in its files (hf_names.h)
  Sliding sliding = Sliding::kNone;
  bool ties_embeddings = false;    // tie_word_embeddings' default in its config class
  // The projections strata.lora.target_modules may name, as PEFT names them in the family's
  // modules (Phi-3's fused ones); empty: no adapters (GPT-2). The experts of a mixture are
  // adapted through target_parameters, so its rows name the attention projections only.
  std::span<const char* const> lora_targets = {};
  BiasKeys bias_keys = BiasKeys::kNone;
  bool sliding_window_key = true;  // export writes sliding_window (null when off); LlamaConfig has none
};

// Every family, the arch's own first (gpt2, llama), in the order help texts list them.
std::span<const ModelFamily> ModelFamilies();

// The row of `model_type` ("" = llama), or null.
const ModelFamily* FindFamily(std::string_view model_type);

// The row of a config (its hf_model_type, "" = its arch's own). For a config that passed
// Validate (which refuses an unknown type).
const ModelFamily& FamilyOf(const ModelConfig& config);

// "gpt2 (GPT2LMHeadModel), llama (LlamaForCausalLM), ...": what config.json's errors list.
std::string FamilyTypesAndClasses();
// "GPT-2, LLaMA, Mistral, ...": what help texts list.
std::string FamilyDisplayNames();

}  // namespace strata::model
