#include "src/model/model_family.h"

#include "src/model/model_config.h"

namespace strata::model {
namespace {

constexpr const char* kDense[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
constexpr const char* kFused[] = {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};  // Phi-3's modules
constexpr const char* kAttention[] = {"q_proj", "k_proj", "v_proj", "o_proj"};          // beside experts

// transformers' config classes say what each row fixes: Qwen2Config's q/k/v always carry
// biases, Qwen3's and Gemma 3's heads always normalise q and k, OLMoE normalises the whole
// projections, Mixtral's experts are MixtralSparseMoeBlock's (always renormalised).
constexpr ModelFamily kFamilies[] = {
    {.model_type = "gpt2", .causal_lm = "GPT2LMHeadModel", .base_model = "GPT2Model", .display = "GPT-2",
     .blocks = Blocks::kGpt2, .ties_embeddings = true},
    {.model_type = "llama", .causal_lm = "LlamaForCausalLM", .base_model = "LlamaModel", .display = "LLaMA",
     .qkv_bias = Has::kFree, .qk_norm = Has::kFree,
     .lora_targets = kDense, .bias_keys = BiasKeys::kAttentionAndMlp, .sliding_window_key = false},
    {.model_type = "mistral", .causal_lm = "MistralForCausalLM", .base_model = "MistralModel", .display = "Mistral",
     .sliding = Sliding::kAll,
     .lora_targets = kDense},
    {.model_type = "qwen2", .causal_lm = "Qwen2ForCausalLM", .base_model = "Qwen2Model", .display = "Qwen2",
     .qkv_bias = Has::kAlways, .sliding = Sliding::kWhenEnabled,
     .lora_targets = kDense},
    {.model_type = "qwen3", .causal_lm = "Qwen3ForCausalLM", .base_model = "Qwen3Model", .display = "Qwen3",
     .qk_norm = Has::kAlways, .sliding = Sliding::kWhenEnabled,
     .lora_targets = kDense, .bias_keys = BiasKeys::kAttention},
    {.model_type = "phi3", .causal_lm = "Phi3ForCausalLM", .base_model = "Phi3Model", .display = "Phi-3/4",
     .fused_projections = true, .sliding = Sliding::kAll,
     .lora_targets = kFused},
    {.model_type = "gemma2", .causal_lm = "Gemma2ForCausalLM", .base_model = "Gemma2Model", .display = "Gemma 2",
     .blocks = Blocks::kGemma, .sliding = Sliding::kPerLayer, .ties_embeddings = true,
     .lora_targets = kDense},
    {.model_type = "gemma3_text", .causal_lm = "Gemma3ForCausalLM", .base_model = "Gemma3TextModel",
     .display = "Gemma 3", .qk_norm = Has::kAlways, .blocks = Blocks::kGemma, .sliding = Sliding::kPerLayer,
     .ties_embeddings = true,
     .lora_targets = kDense},
    {.model_type = "mixtral", .causal_lm = "MixtralForCausalLM", .base_model = "MixtralModel", .display = "Mixtral",
     .experts = true, .mixtral_experts = true, .sliding = Sliding::kAll,
     .lora_targets = kAttention, .bias_keys = BiasKeys::kAttention},
    {.model_type = "qwen3_moe", .causal_lm = "Qwen3MoeForCausalLM", .base_model = "Qwen3MoeModel",
     .display = "Qwen3-MoE", .qk_norm = Has::kAlways, .experts = true, .sliding = Sliding::kWhenEnabled,
     .lora_targets = kAttention, .bias_keys = BiasKeys::kAttention},
    {.model_type = "olmoe", .causal_lm = "OlmoeForCausalLM", .base_model = "OlmoeModel", .display = "OLMoE",
     .qk_norm_whole = true, .experts = true,
     .lora_targets = kAttention, .bias_keys = BiasKeys::kAttention},
};

}  // namespace

std::span<const ModelFamily> ModelFamilies() { return kFamilies; }

const ModelFamily* FindFamily(std::string_view model_type) {
  if (model_type.empty()) model_type = "llama";
  for (const ModelFamily& f : kFamilies)
    if (f.model_type == model_type) return &f;
  return nullptr;
}

const ModelFamily& FamilyOf(const ModelConfig& c) {
  if (c.hf_model_type.empty()) return *FindFamily(c.arch == Arch::kGpt2 ? "gpt2" : "llama");
  const ModelFamily* f = FindFamily(c.hf_model_type);
  return f ? *f : *FindFamily("llama");  // (Validate refuses an unknown type before anything asks)
}

std::string FamilyTypesAndClasses() {
  std::string s;
  for (const ModelFamily& f : kFamilies)
    s += std::string(s.empty() ? "" : ", ") + std::string(f.model_type) + " (" + std::string(f.causal_lm) + ")";
  return s;
}

std::string FamilyDisplayNames() {
  std::string s;
  for (const ModelFamily& f : kFamilies) s += std::string(s.empty() ? "" : ", ") + std::string(f.display);
  return s;
}

}  // namespace strata::model
