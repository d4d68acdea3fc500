// Strata's parameter names (block index + the block's own name, see src/model/gpt2.cc and
// llama.cc) <-> the names Hugging Face transformers writes with save_pretrained:
//   GPT2LMHeadModel   transformer.wte.weight, transformer.wpe.weight,
//                     transformer.h.<i>.<name>, transformer.ln_f.*, lm_head.weight
//   LlamaForCausalLM  model.embed_tokens.weight, model.layers.<i>.<name>, model.norm.weight,
//                     lm_head.weight
// GPT-2's attn.c_attn / attn.c_proj / mlp.c_fc / mlp.c_proj weights are Conv1D in HF,
// stored [in, out]; Strata's Linear is [out, in]: those four are transposed both ways.
// A tied LM head is absent from HF files (HF re-ties lm_head.weight to the embedding).
// Phi-3 (Phi3ForCausalLM) names its layers as LLaMA does but fuses two groups of projections
// into one tensor each, rows stacked in this order: self_attn.qkv_proj = q, k, v and
// mlp.gate_up_proj = gate, up. Strata keeps them apart (the LLaMA block); the HF side of
// loading and export splits and joins them (FusedRowsOf).
// Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "src/model/model_config.h"

namespace strata::model {

struct HfName {
  std::string name;        // full HF key
  bool transpose = false;  // 2-D, [out, in] in Strata vs [in, out] in the file
};

// `block` 0 = embedding, 1..n_layer = layers, n_layer+1 = head.
HfName ToHfName(bool gpt2, int n_layer, int block, const std::string& strata_name);

// Tensors that HF files may carry but that are buffers, not parameters (GPT-2's causal
// mask "attn.bias" / "attn.masked_bias", LLaMA's "rotary_emb.inv_freq"): skipped on load.
bool IsHfBuffer(const std::string& hf_name);

// For a projection that `config`'s family fuses (Phi-3's q/k/v and gate/up, by their unfused
// HF names): the fused tensor's name and the rows of it this projection is; `part` of
// `parts`, in stacking order. nullopt for every other name and family.
struct FusedRows {
  std::string fused;
  int64_t begin = 0, rows = 0, total_rows = 0;
  int part = 0, parts = 0;
};
std::optional<FusedRows> FusedRowsOf(const ModelConfig& config, const std::string& hf_name);

// The parameter of transformers' model (5.x) that Strata's tensor `strata_name` of `block` is
// or is part of: its HF name; for a projection transformers fuses, the fused tensor's (Phi-3's
// self_attn.qkv_proj and mlp.gate_up_proj; a sparse layer's experts, all of them in one
// <mlp>.experts.gate_up_proj and one <mlp>.experts.down_proj). What a per-tensor rule (LAMB's
// trust ratio) takes as one tensor.
std::string HfParameterOf(const ModelConfig& config, int block, const std::string& strata_name);

// HF's prefix-less variants (GPT2Model / LlamaModel save without "transformer." /
// "model."): the key as written in a file -> the canonical full key above.
std::string CanonicalHfName(bool gpt2, const std::string& key);

}  // namespace strata::model
