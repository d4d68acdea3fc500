// config.json -> ModelConfig and back (hf_config.h). Keys and defaults follow transformers'
// GPT2Config, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config, Phi3Config, Gemma2Config,
// Gemma3TextConfig, MixtralConfig, Qwen3MoeConfig and OlmoeConfig.
#include "src/model/hf_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "src/base/input_file.h"
#include "src/base/json_text.h"
#include "src/model/model_family.h"

namespace strata::model {
namespace {

using R = ModelRanges;  // the bounds strata.model reads the same settings against

using Family = ModelFamily;  // (model_family.h: one row per family)

// Typed reads of config.json keys; errors name the file and the key.
class Keys {
 public:
  Keys(const nlohmann::json& j, std::string origin) : j_(j), origin_(std::move(origin)) {}
  bool Present(const std::string& k) const { return j_.contains(k) && !j_[k].is_null(); }
  // Numbers are read against the range the same setting has in strata.model (ModelRanges).
  Status Int(const std::string& k, int64_t* out, bool required, ValueRange range = kAny) const {
    if (!Present(k)) return required ? Missing(k) : Status();
    if (!j_[k].is_number_integer()) return Bad(k, "an integer");
    STRATA_RETURN_IF_ERROR(InRange(k, j_[k].get<double>(), range));
    *out = j_[k].get<int64_t>();
    return Status();
  }
  Status Double(const std::string& k, double* out, ValueRange range = kAny) const {
    if (!Present(k)) return Status();
    if (!j_[k].is_number()) return Bad(k, "a number");
    STRATA_RETURN_IF_ERROR(InRange(k, j_[k].get<double>(), range));
    *out = j_[k].get<double>();
    return Status();
  }
  Status InRange(const std::string& k, double v, ValueRange range) const {
    if (range.Holds(v)) return Status();
    return InvalidArgument("{}: \"{}\" = {} is outside [{}, {}], the range Strata accepts", origin_, k, j_[k].dump(),
                           range.lo, range.hi);
  }
  static constexpr ValueRange kAny{-1e300, 1e300};
  Status Bool(const std::string& k, bool* out) const {
    if (!Present(k)) return Status();
    if (!j_[k].is_boolean()) return Bad(k, "true or false");
    *out = j_[k].get<bool>();
    return Status();
  }
  Status String(const std::string& k, std::string* out) const {
    if (!Present(k)) return Status();
    if (!j_[k].is_string()) return Bad(k, "a string");
    *out = j_[k].get<std::string>();
    return Status();
  }
  // A key whose value must be `want` for the math Strata implements.
  template <typename T>
  Status Expect(const std::string& k, const T& want, const std::string& why) const {
    if (!Present(k) || j_[k] == nlohmann::json(want)) return Status();
    return InvalidArgument("{}: \"{}\": {} is not supported ({}; Strata needs {})", origin_, k, j_[k].dump(), why,
                           nlohmann::json(want).dump());
  }
  Status Missing(const std::string& k) const { return InvalidArgument("{}: the key \"{}\" is missing", origin_, k); }
  Status Bad(const std::string& k, const char* what) const {
    return InvalidArgument("{}: \"{}\" must be {}, got {}", origin_, k, what, j_[k].dump());
  }
  const nlohmann::json& json() const { return j_; }
  const std::string& origin() const { return origin_; }

 private:
  const nlohmann::json& j_;
  std::string origin_;
};

// The family from model_type (else architectures); an unknown one is named with the list.
StatusOr<const Family*> FamilyOfConfigJson(const Keys& k) {
  std::string type;
  STRATA_RETURN_IF_ERROR(k.String("model_type", &type));
  std::vector<std::string> archs;
  if (k.Present("architectures")) {
    const nlohmann::json& a = k.json()["architectures"];
    if (!a.is_array() || !std::all_of(a.begin(), a.end(), [](const auto& v) { return v.is_string(); }))
      return k.Bad("architectures", "a list of class names");
    for (const auto& v : a) archs.push_back(v.get<std::string>());
  }
  for (const Family& f : ModelFamilies()) {
    const bool arch_match = std::any_of(archs.begin(), archs.end(),
                                        [&](const std::string& a) { return a == f.causal_lm || a == f.base_model; });
    if (type == f.model_type || (type.empty() && arch_match)) {
      if (!archs.empty() && !arch_match)
        return InvalidArgument("{}: architectures {} is not supported for model_type \"{}\" (Strata reads {} or {})",
                               k.origin(), k.json()["architectures"].dump(), type, f.causal_lm, f.base_model);
      return &f;
    }
  }
  if (type.empty() && archs.empty())
    return InvalidArgument("{}: neither \"model_type\" nor \"architectures\" says which model this is", k.origin());
  return InvalidArgument("{}: model_type {} / architectures {} is not supported; Strata reads {}", k.origin(),
                         k.Present("model_type") ? k.json()["model_type"].dump() : "(none)",
                         k.Present("architectures") ? k.json()["architectures"].dump() : "(none)",
                         FamilyTypesAndClasses());
}

Status ReadGpt2(const Keys& k, ModelConfig* c) {
  c->arch = Arch::kGpt2;
  c->tie_embeddings = true;  // GPT2Config's default
  STRATA_RETURN_IF_ERROR(k.Int("vocab_size", &c->vocab_size, true, R::kVocab));
  STRATA_RETURN_IF_ERROR(k.Int("n_embd", &c->d_model, true, R::kDModel));
  STRATA_RETURN_IF_ERROR(k.Int("n_layer", &c->n_layer, true, R::kLayers));
  STRATA_RETURN_IF_ERROR(k.Int("n_head", &c->n_head, true, R::kHeads));
  STRATA_RETURN_IF_ERROR(k.Int("n_positions", &c->max_positions, true, R::kPositions));
  STRATA_RETURN_IF_ERROR(k.Int("n_inner", &c->ffn_hidden, false, R::kFfnHidden));
  STRATA_RETURN_IF_ERROR(k.Double("layer_norm_epsilon", &c->norm_eps, R::kNormEps));
  STRATA_RETURN_IF_ERROR(k.Bool("tie_word_embeddings", &c->tie_embeddings));
  std::string act = "gelu_new";
  STRATA_RETURN_IF_ERROR(k.String("activation_function", &act));
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    return InvalidArgument("{}: \"activation_function\": \"{}\" is not supported (Strata's GPT-2 uses the tanh GELU, "
                           "gelu_new)", k.origin(), act);
  STRATA_RETURN_IF_ERROR(k.Expect("scale_attn_by_inverse_layer_idx", false, "a per-layer attention scale"));
  STRATA_RETURN_IF_ERROR(k.Expect("scale_attn_weights", true, "unscaled attention scores"));
  return k.Expect("add_cross_attention", false, "cross-attention layers");
}

// transformers 5's Gemma 3: {"full_attention": {...}, "sliding_attention": {...}}, plain RoPE
// each, the sliding layers' base kept apart (rope_local_theta).
Status ReadRopePerLayerType(const Keys& k, const std::string& key, ModelConfig* c) {
  for (const auto& [layer_type, params] : k.json()[key].items()) {
    const Keys rk(params, fmt::format("{}: \"{}\": \"{}\"", k.origin(), key, layer_type));
    if (!params.is_object() || (layer_type != "full_attention" && layer_type != "sliding_attention"))
      return InvalidArgument("{}: expected an object per layer type (full_attention, sliding_attention)", rk.origin());
    std::string type = "default";
    STRATA_RETURN_IF_ERROR(rk.String(rk.Present("rope_type") ? "rope_type" : "type", &type));
    if (type != "default")
      return InvalidArgument("{}: rope_type \"{}\" is not supported for Gemma (plain RoPE, \"default\", only)",
                             rk.origin(), type);
    STRATA_RETURN_IF_ERROR(rk.Double("rope_theta", layer_type == "full_attention" ? &c->rope_theta : &c->gemma.rope_local_theta,
                                     layer_type == "full_attention" ? R::kRopeTheta : R::kRopeLocalTheta));
  }
  return Status();
}

// A list of positive numbers at `key` of `rk`.
Status ReadFactors(const Keys& rk, const std::string& key, std::vector<double>* out) {
  if (!rk.Present(key)) return rk.Missing(key);
  const nlohmann::json& l = rk.json()[key];
  if (!l.is_array() || l.empty() || !std::all_of(l.begin(), l.end(), [](const auto& v) { return v.is_number(); }))
    return rk.Bad(key, "a list of numbers");
  out->clear();
  for (const auto& v : l) out->push_back(v.get<double>());
  return Status();
}

// Phi-3.5/4's longrope (RopeScaling): its factors, the original length (in the rope entry or,
// as Phi3Config keeps it, at the top level) and an optional attention factor.
Status ReadLongrope(const Keys& k, const Keys& rk, ModelConfig* c) {
  RopeScaling& s = c->rope_scaling;
  STRATA_RETURN_IF_ERROR(ReadFactors(rk, "short_factor", &s.short_factor));
  STRATA_RETURN_IF_ERROR(ReadFactors(rk, "long_factor", &s.long_factor));
  const Keys& at = rk.Present("original_max_position_embeddings") ? rk : k;
  STRATA_RETURN_IF_ERROR(at.Int("original_max_position_embeddings", &s.original_max_positions, true, R::kOriginalPositions));
  return rk.Double("attention_factor", &s.attention_factor, R::kAttentionFactor);
}

// rope_theta and the scaling, from transformers 5's rope_parameters or 4's rope_theta +
// rope_scaling (whose type may be spelled "rope_type" or "type").
Status ReadRope(const Keys& k, ModelConfig* c) {
  const bool v5 = k.Present("rope_parameters");
  const std::string key = v5 ? "rope_parameters" : "rope_scaling";
  STRATA_RETURN_IF_ERROR(k.Double("rope_theta", &c->rope_theta, R::kRopeTheta));
  STRATA_RETURN_IF_ERROR(k.Double("partial_rotary_factor", &c->partial_rotary, R::kPartialRotary));  // Phi3Config keeps it here
  if (!k.Present(key)) return Status();
  const nlohmann::json& r = k.json()[key];
  if (!r.is_object()) return k.Bad(key, "an object");
  if (r.contains("full_attention") || r.contains("sliding_attention"))  // Gemma 3: per layer type
    return ReadRopePerLayerType(k, key, c);
  const Keys rk(r, fmt::format("{}: \"{}\"", k.origin(), key));
  STRATA_RETURN_IF_ERROR(rk.Double("rope_theta", &c->rope_theta, R::kRopeTheta));
  std::string type = "default";
  STRATA_RETURN_IF_ERROR(rk.String(rk.Present("rope_type") ? "rope_type" : "type", &type));
  STRATA_RETURN_IF_ERROR(rk.Double("partial_rotary_factor", &c->partial_rotary, R::kPartialRotary));
  if (type == "default") return Status();
  if (type == "longrope") return ReadLongrope(k, rk, c);
  if (type != "llama3")
    return InvalidArgument("{}: rope_type \"{}\" is not supported (Strata implements plain RoPE, \"default\", "
                           "LLaMA 3.1's \"llama3\" and Phi's \"longrope\")", rk.origin(), type);
  RopeScaling& s = c->rope_scaling;
  for (const char* req : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
    if (!rk.Present(req)) return rk.Missing(req);
  STRATA_RETURN_IF_ERROR(rk.Double("factor", &s.factor, R::kRopeFactor));
  STRATA_RETURN_IF_ERROR(rk.Double("low_freq_factor", &s.low_freq_factor, R::kRopeFactor));
  STRATA_RETURN_IF_ERROR(rk.Double("high_freq_factor", &s.high_freq_factor, R::kRopeFactor));
  STRATA_RETURN_IF_ERROR(rk.Int("original_max_position_embeddings", &s.original_max_positions, true, R::kOriginalPositions));
  if (!(s.factor >= 1 && s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor && s.original_max_positions > 0))
    return InvalidArgument("{}: llama3 scaling needs factor >= 1 and 0 < low_freq_factor < high_freq_factor (got "
                           "factor {}, low_freq_factor {}, high_freq_factor {})", rk.origin(), s.factor,
                           s.low_freq_factor, s.high_freq_factor);
  return Status();
}

// Mistral's window applies to every layer; Qwen's only with use_sliding_window (or a
// "sliding_attention" entry in layer_types). Strata's full causal attention equals it for
// sequences up to the window, which Validate() checks against seq_len.
Status ReadSlidingWindow(const Keys& k, const Family& f, ModelConfig* c) {
  bool active = f.sliding == Sliding::kAll;
  if (f.sliding == Sliding::kWhenEnabled) {
    STRATA_RETURN_IF_ERROR(k.Bool("use_sliding_window", &active));
    if (k.Present("layer_types") && k.json()["layer_types"].is_array())
      for (const auto& t : k.json()["layer_types"]) active = active || t == "sliding_attention";
  }
  if (active) STRATA_RETURN_IF_ERROR(k.Int("sliding_window", &c->sliding_window, false, R::kPositions));
  return Status();
}

// What Gemma 2 / 3 add (GemmaOptions), with Gemma2Config's and Gemma3TextConfig's defaults.
Status ReadGemma(const Keys& k, const std::string& type, ModelConfig* c) {
  GemmaOptions& g = c->gemma;
  const bool v2 = type == "gemma2";
  g.query_pre_attn_scalar = 256;
  g.attn_softcap = v2 ? 50.0 : 0;
  g.final_softcap = v2 ? 30.0 : 0;
  if (!v2 && g.rope_local_theta == 0) g.rope_local_theta = 10000;
  STRATA_RETURN_IF_ERROR(k.Double("query_pre_attn_scalar", &g.query_pre_attn_scalar, R::kGemmaScale));
  for (auto [key, cap] : {std::pair{"attn_logit_softcapping", &g.attn_softcap},
                          std::pair{"final_logit_softcapping", &g.final_softcap}}) {
    if (k.json().contains(key) && k.json()[key].is_null()) *cap = 0;  // null: none
    STRATA_RETURN_IF_ERROR(k.Double(key, cap, R::kGemmaScale));
  }
  STRATA_RETURN_IF_ERROR(k.Double("rope_local_base_freq", &g.rope_local_theta, R::kRopeLocalTheta));
  if (g.rope_local_theta == c->rope_theta) g.rope_local_theta = 0;
  std::string act = "gelu_pytorch_tanh";
  STRATA_RETURN_IF_ERROR(k.String(k.Present("hidden_activation") ? "hidden_activation" : "hidden_act", &act));
  if (act != "gelu_pytorch_tanh")
    return InvalidArgument("{}: \"hidden_activation\": \"{}\" is not supported (Strata's Gemma MLP is GeGLU with the "
                           "tanh GELU, gelu_pytorch_tanh)", k.origin(), act);
  // Which layers slide: layer_types, else the family's pattern (every 2nd / 6th layer global).
  g.sliding_layers.clear();
  if (k.Present("layer_types")) {
    const nlohmann::json& t = k.json()["layer_types"];
    if (!t.is_array() || static_cast<int64_t>(t.size()) != c->n_layer) return k.Bad("layer_types", "a list, one per layer");
    for (const auto& v : t) {
      if (v != "sliding_attention" && v != "full_attention")
        return k.Bad("layer_types", "\"sliding_attention\" or \"full_attention\" per layer");
      g.sliding_layers.push_back(v == "sliding_attention");
    }
  } else {
    int64_t pattern = v2 ? 2 : 6;
    STRATA_RETURN_IF_ERROR(k.Int(k.Present("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern",
                                 &pattern, false));
    for (int64_t i = 0; i < c->n_layer; ++i) g.sliding_layers.push_back(pattern <= 0 || (i + 1) % pattern != 0);
  }
  if (std::none_of(g.sliding_layers.begin(), g.sliding_layers.end(), [](bool b) { return b; })) g.sliding_layers.clear();
  else STRATA_RETURN_IF_ERROR(k.Int("sliding_window", &c->sliding_window, false, R::kPositions));
  STRATA_RETURN_IF_ERROR(k.Expect("attention_dropout", 0.0, "dropout while training"));
  return k.Expect("use_bidirectional_attention", false, "bidirectional attention");
}

// The experts of Mixtral, Qwen3-MoE and OLMoE (MoeOptions), with their configs' defaults.
Status ReadMoe(const Keys& k, const std::string& type, ModelConfig* c) {
  MoeOptions& m = c->moe;
  const bool mixtral = type == "mixtral", qwen = type == "qwen3_moe";
  m.num_experts = mixtral ? 8 : qwen ? 128 : 64;
  m.top_k = mixtral ? 2 : 8;
  // transformers 5 writes num_local_experts for Qwen3-MoE too; its 4.x configs say num_experts.
  STRATA_RETURN_IF_ERROR(
      k.Int(k.Present("num_local_experts") ? "num_local_experts" : "num_experts", &m.num_experts, false, R::kExperts));
  STRATA_RETURN_IF_ERROR(k.Int("num_experts_per_tok", &m.top_k, false, R::kExperts));
  m.expert_ffn = c->ffn_hidden;  // Mixtral's and OLMoE's experts are intermediate_size wide
  if (qwen) STRATA_RETURN_IF_ERROR(k.Int("moe_intermediate_size", &m.expert_ffn, true, R::kExpertFfn));
  m.norm_topk_prob = mixtral;  // Mixtral always renormalises
  if (!mixtral) STRATA_RETURN_IF_ERROR(k.Bool("norm_topk_prob", &m.norm_topk_prob));
  if (qwen) {  // a dense MLP in mlp_only_layers and off the decoder_sparse_step
    int64_t step = 1;
    STRATA_RETURN_IF_ERROR(k.Int("decoder_sparse_step", &step, false));
    std::vector<int64_t> dense;
    if (k.Present("mlp_only_layers")) {
      const nlohmann::json& l = k.json()["mlp_only_layers"];
      if (!l.is_array() || !std::all_of(l.begin(), l.end(), [](const auto& v) { return v.is_number_integer(); }))
        return k.Bad("mlp_only_layers", "a list of layer indices");
      for (const auto& v : l) dense.push_back(v.get<int64_t>());
    }
    for (int64_t i = 0; i < c->n_layer; ++i)
      m.dense_layers.push_back(std::find(dense.begin(), dense.end(), i) != dense.end() || step < 1 || (i + 1) % step != 0);
    if (std::none_of(m.dense_layers.begin(), m.dense_layers.end(), [](bool b) { return b; })) m.dense_layers.clear();
  }
  if (type == "olmoe") STRATA_RETURN_IF_ERROR(k.Expect("clip_qkv", nullptr, "clipping q, k and v"));
  if (mixtral) STRATA_RETURN_IF_ERROR(k.Expect("router_jitter_noise", 0.0, "noise on the router's input"));
  bool aux = false;  // the load-balancing loss joins the training loss only with output_router_logits
  STRATA_RETURN_IF_ERROR(k.Bool("output_router_logits", &aux));
  m.aux_loss_coef = type == "olmoe" ? 0.01 : 0.001;
  STRATA_RETURN_IF_ERROR(k.Double("router_aux_loss_coef", &m.aux_loss_coef, R::kAuxLossCoef));
  if (!aux) m.aux_loss_coef = 0;
  return Status();
}

Status ReadLlamaFamily(const Keys& k, const Family& f, ModelConfig* c) {
  const std::string type(f.model_type);
  c->arch = Arch::kLlama;
  c->hf_model_type = type == "llama" ? "" : type;
  c->tie_embeddings = f.ties_embeddings;  // the default of the family's config class
  c->norm_eps = 1e-6;
  STRATA_RETURN_IF_ERROR(k.Int("vocab_size", &c->vocab_size, true, R::kVocab));
  STRATA_RETURN_IF_ERROR(k.Int("hidden_size", &c->d_model, true, R::kDModel));
  STRATA_RETURN_IF_ERROR(k.Int("intermediate_size", &c->ffn_hidden, true, R::kFfnHidden));
  STRATA_RETURN_IF_ERROR(k.Int("num_hidden_layers", &c->n_layer, true, R::kLayers));
  STRATA_RETURN_IF_ERROR(k.Int("num_attention_heads", &c->n_head, true, R::kHeads));
  STRATA_RETURN_IF_ERROR(k.Int("num_key_value_heads", &c->n_kv_head, false, R::kKvHeads));
  STRATA_RETURN_IF_ERROR(k.Int("head_dim", &c->head_dim, false, R::kHeadDim));
  STRATA_RETURN_IF_ERROR(k.Int("max_position_embeddings", &c->max_positions, true, R::kPositions));
  STRATA_RETURN_IF_ERROR(k.Double("rms_norm_eps", &c->norm_eps, R::kNormEps));
  STRATA_RETURN_IF_ERROR(k.Bool("tie_word_embeddings", &c->tie_embeddings));
  // The default, spelled out (divided, not multiplied: a hostile head_dim must not overflow).
  if (c->n_head > 0 && c->head_dim > 0 && c->d_model % c->n_head == 0 && c->head_dim == c->d_model / c->n_head)
    c->head_dim = 0;
  STRATA_RETURN_IF_ERROR(ReadRope(k, c));
  // What the family's blocks always have (Qwen2's q/k/v biases, Qwen3's and Gemma 3's q/k norms).
  c->qkv_bias = f.qkv_bias == Has::kAlways;
  c->qk_norm = f.qk_norm == Has::kAlways;
  if (f.gemma()) {
    if (c->head_dim == 0 && !k.Present("head_dim")) c->head_dim = 256;  // Gemma's default
    STRATA_RETURN_IF_ERROR(ReadGemma(k, type, c));
    return k.Expect("attention_bias", false, "biases on q_proj, k_proj, v_proj and o_proj");
  }
  STRATA_RETURN_IF_ERROR(ReadSlidingWindow(k, f, c));
  STRATA_RETURN_IF_ERROR(k.Expect("hidden_act", "silu", "Strata's LLaMA-family MLP is SwiGLU"));
  STRATA_RETURN_IF_ERROR(k.Expect("mlp_bias", false, "biases in the MLP"));
  if (f.experts) STRATA_RETURN_IF_ERROR(ReadMoe(k, type, c));
  if (f.fused_projections) {  // LLaMA's block under fused names (hf_names.h); what else Phi3Config may say
    for (const char* dropout : {"resid_pdrop", "embd_pdrop", "attention_dropout"})
      STRATA_RETURN_IF_ERROR(k.Expect(dropout, 0.0, "dropout while training"));
  }
  if (f.qkv_bias != Has::kAlways)
    STRATA_RETURN_IF_ERROR(k.Expect("attention_bias", false, "biases on q_proj, k_proj, v_proj and o_proj"));
  return Status();
}

}  // namespace

StatusOr<ModelConfig> ModelConfigFromHf(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) return InvalidArgument("{}: not a JSON object", origin);
  const Keys k(j, origin);
  STRATA_ASSIGN_OR_RETURN(const Family* f, FamilyOfConfigJson(k));
  ModelConfig c;
  STRATA_RETURN_IF_ERROR(f->gpt2() ? ReadGpt2(k, &c) : ReadLlamaFamily(k, *f, &c));
  c.seq_len = std::min(c.max_positions, kDefaultHfSeqLen);
  if (c.sliding_window > 0) c.seq_len = std::min(c.seq_len, c.sliding_window);
  if (c.rope_scaling.longrope()) c.seq_len = std::min(c.seq_len, c.rope_scaling.original_max_positions);
  if (Status s = Validate(c); !s.ok()) return s.WithContext(origin);
  return c;
}

StatusOr<ModelConfig> ReadHfModelConfig(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    if (!std::filesystem::is_directory(dir, ec))
      return Error(StatusCode::kNotFound, "'{}' is not a Hugging Face model folder (no such folder)", dir);
    return Error(StatusCode::kNotFound, "'{}' is not a Hugging Face model folder: it has no config.json", dir);
  }
  STRATA_ASSIGN_OR_RETURN(nlohmann::json j, ReadJsonFile(path, kMaxConfigFileBytes));
  return ModelConfigFromHf(j, "'" + path + "'");
}

namespace {

// Gemma's keys (ReadGemma's), replacing LLaMA's activation and rope entries.
void GemmaConfigJson(const ModelConfig& c, nlohmann::ordered_json* j) {
  const GemmaOptions& g = c.gemma;
  const bool v2 = c.hf_model_type == "gemma2";
  j->erase("hidden_act");
  j->erase("rope_scaling");
  (*j)["hidden_activation"] = "gelu_pytorch_tanh";
  // An integer in Gemma's configs (transformers checks the type).
  (*j)["query_pre_attn_scalar"] = g.query_pre_attn_scalar > 0 ? std::llround(g.query_pre_attn_scalar) : HeadDim(c);
  (*j)["attn_logit_softcapping"] = g.attn_softcap > 0 ? nlohmann::json(g.attn_softcap) : nlohmann::json(nullptr);
  (*j)["final_logit_softcapping"] = g.final_softcap > 0 ? nlohmann::json(g.final_softcap) : nlohmann::json(nullptr);
  nlohmann::json types = nlohmann::json::array();
  for (int64_t i = 0; i < c.n_layer; ++i)
    types.push_back(!g.sliding_layers.empty() && g.sliding_layers[i] ? "sliding_attention" : "full_attention");
  (*j)["layer_types"] = types;
  (*j)["attention_bias"] = false;
  (*j)["attention_dropout"] = 0.0;
  const double local = g.rope_local_theta > 0 ? g.rope_local_theta : c.rope_theta;
  if (v2) {
    (*j)["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
  } else {
    (*j)["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", c.rope_theta}}},
                               {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", local}}}};
  }
}

// The experts' keys (ReadMoe's).
void MoeConfigJson(const ModelConfig& c, nlohmann::ordered_json* j) {
  const MoeOptions& m = c.moe;
  const std::string type = c.hf_model_type;
  (*j)[type == "olmoe" ? "num_experts" : "num_local_experts"] = m.num_experts;  // as transformers 5 writes them
  (*j)["num_experts_per_tok"] = m.top_k;
  if (type != "qwen3_moe") (*j)["intermediate_size"] = m.expert_ffn;  // the experts' width there
  (*j)["output_router_logits"] = m.aux_loss_coef > 0;
  if (m.aux_loss_coef > 0) (*j)["router_aux_loss_coef"] = m.aux_loss_coef;
  if (type == "mixtral") (*j)["router_jitter_noise"] = 0.0;
  if (type != "mixtral") (*j)["norm_topk_prob"] = m.norm_topk_prob;
  if (type == "olmoe") (*j)["clip_qkv"] = nullptr;
  if (type == "qwen3_moe") {
    (*j)["moe_intermediate_size"] = m.expert_ffn;
    (*j)["decoder_sparse_step"] = 1;
    nlohmann::json dense = nlohmann::json::array();
    for (size_t i = 0; i < m.dense_layers.size(); ++i)
      if (m.dense_layers[i]) dense.push_back(i);
    (*j)["mlp_only_layers"] = dense;
  }
}

}  // namespace

std::string HfModelType(const ModelConfig& c) { return std::string(FamilyOf(c).model_type); }

nlohmann::ordered_json HfConfigJson(const ModelConfig& c, const std::string& torch_dtype) {
  const std::string type = HfModelType(c);
  const Family& f = FamilyOf(c);
  nlohmann::ordered_json j = {{"architectures", {std::string(f.causal_lm)}}, {"model_type", type},
                              {"vocab_size", c.vocab_size}};
  if (c.arch == Arch::kGpt2) {
    j.update({{"n_embd", c.d_model}, {"n_layer", c.n_layer}, {"n_head", c.n_head}, {"n_positions", MaxPositions(c)},
              {"n_inner", FfnHidden(c)}, {"layer_norm_epsilon", c.norm_eps}, {"activation_function", "gelu_new"}});
  } else {
    j.update({{"hidden_size", c.d_model}, {"intermediate_size", FfnHidden(c)}, {"num_hidden_layers", c.n_layer},
              {"num_attention_heads", c.n_head}, {"num_key_value_heads", c.n_kv_head > 0 ? c.n_kv_head : c.n_head},
              {"head_dim", HeadDim(c)}, {"max_position_embeddings", MaxPositions(c)}, {"rms_norm_eps", c.norm_eps},
              {"hidden_act", "silu"}, {"rope_theta", c.rope_theta}, {"rope_scaling", nullptr}});
    if (c.partial_rotary != 1) j["partial_rotary_factor"] = c.partial_rotary;
    if (c.rope_scaling.longrope()) {
      const RopeScaling& r = c.rope_scaling;
      j["rope_scaling"] = {{"rope_type", "longrope"}, {"short_factor", r.short_factor}, {"long_factor", r.long_factor}};
      if (r.attention_factor > 0) j["rope_scaling"]["attention_factor"] = r.attention_factor;
      j["original_max_position_embeddings"] = r.original_max_positions;
    }
    if (c.rope_scaling.factor != 0)
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", c.rope_scaling.factor},
                           {"low_freq_factor", c.rope_scaling.low_freq_factor},
                           {"high_freq_factor", c.rope_scaling.high_freq_factor},
                           {"original_max_position_embeddings", c.rope_scaling.original_max_positions}};
    if (f.bias_keys == BiasKeys::kAttentionAndMlp) j.update({{"attention_bias", false}, {"mlp_bias", false}});
    if (f.bias_keys == BiasKeys::kAttention) j["attention_bias"] = false;
    if (f.sliding_window_key) j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nullptr;
    if (f.sliding == Sliding::kWhenEnabled) j["use_sliding_window"] = c.sliding_window > 0;
    if (IsGemma(c)) GemmaConfigJson(c, &j);
    if (IsMoe(c)) MoeConfigJson(c, &j);
  }
  j.update({{"tie_word_embeddings", c.tie_embeddings}, {"torch_dtype", torch_dtype}});
  return j;
}

}  // namespace strata::model
