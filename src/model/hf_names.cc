#include "src/model/hf_names.h"

#include <fmt/format.h>

namespace strata::model {

HfName ToHfName(bool gpt2, int n_layer, int block, const std::string& n) {
  if (n == "lm_head.weight") return {"lm_head.weight", false};
  if (gpt2) {
    if (block == 0 || block == n_layer + 1) return {"transformer." + n, false};
    const bool conv1d = (n.starts_with("attn.c_attn.") || n.starts_with("attn.c_proj.") || n.starts_with("mlp.c_fc.") ||
                         n.starts_with("mlp.c_proj.")) &&
                        n.ends_with(".weight");
    return {fmt::format("transformer.h.{}.{}", block - 1, n), conv1d};
  }
  if (block == 0) return {n == "wte.weight" ? "model.embed_tokens.weight" : "model." + n, false};
  if (block == n_layer + 1) return {"model." + n, false};
  return {fmt::format("model.layers.{}.{}", block - 1, n), false};
}

bool IsHfBuffer(const std::string& k) {
  return k.ends_with(".attn.bias") || k.ends_with(".attn.masked_bias") || k.ends_with("rotary_emb.inv_freq");
}

std::string CanonicalHfName(bool gpt2, const std::string& k) {
  if (k == "lm_head.weight") return k;
  const std::string prefix = gpt2 ? "transformer." : "model.";
  return k.starts_with(prefix) ? k : prefix + k;
}

}  // namespace strata::model
