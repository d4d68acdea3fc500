#include "src/model/hf_names.h"

#include "src/model/model_family.h"

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

std::optional<FusedRows> FusedRowsOf(const ModelConfig& c, const std::string& n) {
  if (!FamilyOf(c).fused_projections || !n.starts_with("model.layers.") || !n.ends_with("_proj.weight")) return std::nullopt;
  const int64_t hd = HeadDim(c), kv = (c.n_kv_head > 0 ? c.n_kv_head : c.n_head) * hd, q = c.n_head * hd;
  const int64_t ffn = FfnHidden(c);
  struct Part {
    const char* name;
    const char* fused;
    int64_t begin, rows, total;
    int part, parts;
  };
  const Part kParts[] = {{"self_attn.q_proj.weight", "self_attn.qkv_proj.weight", 0, q, q + 2 * kv, 0, 3},
                         {"self_attn.k_proj.weight", "self_attn.qkv_proj.weight", q, kv, q + 2 * kv, 1, 3},
                         {"self_attn.v_proj.weight", "self_attn.qkv_proj.weight", q + kv, kv, q + 2 * kv, 2, 3},
                         {"mlp.gate_proj.weight", "mlp.gate_up_proj.weight", 0, ffn, 2 * ffn, 0, 2},
                         {"mlp.up_proj.weight", "mlp.gate_up_proj.weight", ffn, ffn, 2 * ffn, 1, 2}};
  for (const Part& p : kParts) {
    const std::string suffix = std::string(".") + p.name;
    if (!n.ends_with(suffix)) continue;
    const std::string layer = n.substr(0, n.size() - suffix.size());  // model.layers.<i>
    return FusedRows{layer + "." + p.fused, p.begin, p.rows, p.total, p.part, p.parts};
  }
  return std::nullopt;
}

std::string HfParameterOf(const ModelConfig& c, int block, const std::string& strata_name) {
  const std::string name = ToHfName(c.arch == Arch::kGpt2, static_cast<int>(c.n_layer), block, strata_name).name;
  if (const auto fused = FusedRowsOf(c, name)) return fused->fused;
  // <mlp>.experts.<e>.<projection>.weight: gate and up (Mixtral's w1, w3) fused, down (w2) apart.
  const size_t experts = name.find(".experts.");
  if (experts == std::string::npos) return name;
  const size_t dot = name.find('.', experts + 9);
  if (dot == std::string::npos || dot == experts + 9) return name;
  for (size_t i = experts + 9; i < dot; ++i)
    if (name[i] < '0' || name[i] > '9') return name;  // (not a numbered expert)
  const std::string projection = name.substr(dot + 1);
  const bool down = projection.starts_with("down_proj") || projection.starts_with("w2");
  return name.substr(0, experts) + (down ? ".experts.down_proj" : ".experts.gate_up_proj");
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
