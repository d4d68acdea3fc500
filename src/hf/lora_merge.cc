// MergeAdapters (lora_export.h): a LoRA checkpoint's adapters folded into its base weights,
// per projection, per fused projection (Phi-3's) and per expert of a sparse layer's adapted
// fused tensors.
#include <algorithm>
#include <map>
#include <vector>

#include <fmt/ranges.h>

#include "src/hf/lora_export.h"

namespace strata::ckpt {
namespace {

// One parameter of a block's layout, checked to lie in the flat group (and, for an adapter,
// to have been read).
struct Param {
  float* at = nullptr;
  std::vector<int64_t> shape;
};

class BlockParams {
 public:
  BlockParams(const nlohmann::json& params, const std::string& where, FlatBlock* flat) : where_(where), flat_(flat) {
    for (const nlohmann::json& p : params) by_name_[p.at("name").get<std::string>()] = &p;
  }
  bool Has(const std::string& name) const { return by_name_.contains(name); }
  const std::map<std::string, const nlohmann::json*>& all() const { return by_name_; }

  // `name` with `dims` dimensions; `read`: every element must come from a rank file.
  StatusOr<Param> Get(const std::string& name, size_t dims, bool read) const {
    const auto it = by_name_.find(name);
    if (it == by_name_.end())
      return Error(StatusCode::kDataLoss, "'{}/manifest.json': block {} has no '{}'", where_, flat_->block, name);
    Param p;
    p.shape = it->second->at("shape").get<std::vector<int64_t>>();
    if (p.shape.size() != dims)
      return Error(StatusCode::kDataLoss, "'{}/manifest.json': block {}: '{}' is [{}], not {}-dimensional", where_,
                   flat_->block, name, fmt::join(p.shape, ", "), dims);
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    const int64_t off = it->second->at("offset").get<int64_t>();
    if (off < 0 || n < 0 || off + n > static_cast<int64_t>(flat_->values.size()))
      return Error(StatusCode::kDataLoss, "'{}': parameter '{}' of block {} lies outside its flat group", where_, name,
                   flat_->block);
    if (read)
      for (int64_t i = off; i < off + n; ++i)
        if (!flat_->seen[i])
          return Error(StatusCode::kDataLoss, "'{}': no rank file holds element {} of block {} ('{}')", where_, i,
                       flat_->block, name);
    p.at = flat_->values.data() + off;
    return p;
  }
  Status Mismatch(const std::string& what) const {
    return Error(StatusCode::kDataLoss, "'{}/manifest.json': block {}: {} do not compose", where_, flat_->block, what);
  }

 private:
  std::string where_;
  FlatBlock* flat_;
  std::map<std::string, const nlohmann::json*> by_name_;
};

// W[o, i] += s * sum_k B[o * b_row + k * b_rank] * A[k * in + i] for o < out, k < r: each
// element's delta summed over the r terms first, then added once.
void AddLowRank(const float* A, const float* B, int64_t b_row, int64_t b_rank, int64_t r, int64_t in, int64_t out,
                float s, float* W) {
  std::vector<float> delta(in);
  for (int64_t o = 0; o < out; ++o) {
    std::fill(delta.begin(), delta.end(), 0.f);
    for (int64_t k = 0; k < r; ++k) {
      const float c = B[o * b_row + k * b_rank];
      const float* a = A + k * in;
      for (int64_t i = 0; i < in; ++i) delta[i] += c * a[i];
    }
    float* w = W + o * in;
    for (int64_t i = 0; i < in; ++i) w[i] += s * delta[i];
  }
}

// A projection's X.lora_A [r, in] and X.lora_B [out, r] into X.weight [out, in].
Status MergeProjection(const BlockParams& ps, const std::string& module, float s) {
  STRATA_ASSIGN_OR_RETURN(const Param a, ps.Get(module + ".lora_A", 2, true));
  STRATA_ASSIGN_OR_RETURN(const Param b, ps.Get(module + ".lora_B", 2, true));
  STRATA_ASSIGN_OR_RETURN(const Param w, ps.Get(module + ".weight", 2, false));
  const int64_t r = a.shape[0], in = a.shape[1], out = w.shape[0];
  if (b.shape[1] != r || b.shape[0] != out || w.shape[1] != in)
    return ps.Mismatch(fmt::format("'{}.lora_A' [{}], '{}.lora_B' [{}] and '{}.weight' [{}]", module,
                                   fmt::join(a.shape, ", "), module, fmt::join(b.shape, ", "), module,
                                   fmt::join(w.shape, ", ")));
  AddLowRank(a.at, b.at, r, 1, r, in, out, s, w.at);
  return Status();
}

// A StackedAdapter's lora_A [r * E, in] and lora_B [out, r * E] (model/layers.h) into the
// weights `targets[e]` of each matrix e: its delta's rows in their order, each weight taking
// as many as it has.
Status MergeStacked(const BlockParams& ps, const std::string& module, const std::vector<std::vector<std::string>>& targets,
                    float s) {
  STRATA_ASSIGN_OR_RETURN(const Param a, ps.Get(module + ".lora_A", 2, true));
  STRATA_ASSIGN_OR_RETURN(const Param b, ps.Get(module + ".lora_B", 2, true));
  const auto E = static_cast<int64_t>(targets.size());
  if (E == 0 || a.shape[0] % E != 0 || b.shape[1] != a.shape[0])
    return ps.Mismatch(fmt::format("'{}.lora_A' [{}] and '{}.lora_B' [{}] of {} stacked matrices", module,
                                   fmt::join(a.shape, ", "), module, fmt::join(b.shape, ", "), E));
  const int64_t r = a.shape[0] / E, in = a.shape[1];
  for (int64_t e = 0; e < E; ++e) {
    int64_t row = 0;
    for (const std::string& name : targets[e]) {
      STRATA_ASSIGN_OR_RETURN(const Param w, ps.Get(name, 2, false));
      if (w.shape[1] != in || row + w.shape[0] > b.shape[0])
        return ps.Mismatch(fmt::format("'{}.lora_B' [{}] and '{}' [{}]", module, fmt::join(b.shape, ", "), name,
                                       fmt::join(w.shape, ", ")));
      // Matrix e's A rows e*r.., its B columns e, E + e, ... (rank-major), from row `row`.
      AddLowRank(a.at + e * r * in, b.at + row * r * E + e, r * E, E, r, in, w.shape[0], s, w.at);
      row += w.shape[0];
    }
    if (row != b.shape[0])
      return ps.Mismatch(fmt::format("'{}.lora_B' [{}] and the {} rows of {}", module, fmt::join(b.shape, ", "), row,
                                     fmt::join(targets[e], ", ")));
  }
  return Status();
}

// The weights a fused adapter adapts (Note [Expert adapters]; Phi-3's fused projections):
// "<mlp>.experts.gate_up_proj" each expert's gate and up (Mixtral: w1, w3), ".down_proj" its
// down (w2); "self_attn.qkv_proj" q, k, v; "mlp.gate_up_proj" gate, up. Empty: a plain projection.
std::vector<std::vector<std::string>> FusedTargets(const BlockParams& ps, const std::string& module) {
  const std::string parent = module.substr(0, module.rfind('.') + 1);
  const bool gate_up = module.ends_with(".gate_up_proj");
  if (parent.ends_with(".experts.")) {
    const bool mixtral = ps.Has(parent + "0.w1.weight");
    const std::vector<std::string> names = gate_up ? std::vector<std::string>{mixtral ? "w1" : "gate_proj",
                                                                              mixtral ? "w3" : "up_proj"}
                                                   : std::vector<std::string>{mixtral ? "w2" : "down_proj"};
    std::vector<std::vector<std::string>> targets;
    while (ps.Has(fmt::format("{}{}.{}.weight", parent, targets.size(), names[0]))) {
      targets.emplace_back();
      for (const std::string& n : names) targets.back().push_back(fmt::format("{}{}.{}.weight", parent, targets.size() - 1, n));
    }
    return targets.empty() ? std::vector<std::vector<std::string>>{{}} : targets;  // (none found: a mismatch)
  }
  if (module.ends_with("self_attn.qkv_proj"))
    return {{parent + "q_proj.weight", parent + "k_proj.weight", parent + "v_proj.weight"}};
  if (gate_up) return {{parent + "gate_proj.weight", parent + "up_proj.weight"}};
  return {};
}

}  // namespace

Status MergeAdapters(const nlohmann::json& params, double scale, const std::string& where, FlatBlock* flat) {
  const BlockParams ps(params, where, flat);
  const float s = static_cast<float>(scale);
  for (const auto& [name, p] : ps.all()) {
    if (!name.ends_with(".lora_A")) continue;
    const std::string module = name.substr(0, name.size() - 7);
    if (!ps.Has(module + ".lora_B"))
      return Error(StatusCode::kDataLoss, "'{}/manifest.json': block {} has '{}' but no '{}.lora_B'", where,
                   flat->block, name, module);
    const std::vector<std::vector<std::string>> fused = FusedTargets(ps, module);
    STRATA_RETURN_IF_ERROR(fused.empty() ? MergeProjection(ps, module, s) : MergeStacked(ps, module, fused, s));
  }
  return Status();
}

}  // namespace strata::ckpt
