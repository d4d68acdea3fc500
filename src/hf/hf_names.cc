#include "src/hf/hf_names.h"

#include <fmt/format.h>

namespace strata::ckpt {
namespace {

bool EndsWith(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}
bool StartsWith(const std::string& s, const std::string& t) { return s.rfind(t, 0) == 0; }

}  // namespace

HfName ToHfName(bool gpt2, int n_layer, int block, const std::string& n) {
  if (n == "lm_head.weight") return {"lm_head.weight", false};
  if (gpt2) {
    if (block == 0 || block == n_layer + 1) return {"transformer." + n, false};
    const bool conv1d = (StartsWith(n, "attn.c_attn.") || StartsWith(n, "attn.c_proj.") || StartsWith(n, "mlp.c_fc.") ||
                         StartsWith(n, "mlp.c_proj.")) &&
                        EndsWith(n, ".weight");
    return {fmt::format("transformer.h.{}.{}", block - 1, n), conv1d};
  }
  if (block == 0) return {n == "wte.weight" ? "model.embed_tokens.weight" : "model." + n, false};
  if (block == n_layer + 1) return {"model." + n, false};
  return {fmt::format("model.layers.{}.{}", block - 1, n), false};
}

bool IsHfBuffer(const std::string& k) {
  return EndsWith(k, ".attn.bias") || EndsWith(k, ".attn.masked_bias") || EndsWith(k, "rotary_emb.inv_freq");
}

std::string CanonicalHfName(bool gpt2, const std::string& k) {
  if (k == "lm_head.weight") return k;
  const std::string prefix = gpt2 ? "transformer." : "model.";
  return StartsWith(k, prefix) ? k : prefix + k;
}

}  // namespace strata::ckpt
