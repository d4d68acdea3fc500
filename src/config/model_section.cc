// strata.model (model_section.h) and the model section of checkpoint manifests.
#include "src/config/model_section.h"

#include <algorithm>

#include "src/model/hf_config.h"
#include "src/model/model_family.h"

namespace strata {

Status ParseLora(JsonReader& l, model::LoraConfig* lora) {
  STRATA_RETURN_IF_ERROR(l.Int("r", &lora->r, 0, 1 << 16));
  STRATA_RETURN_IF_ERROR(l.Double("alpha", &lora->alpha, 0, 1e9));
  STRATA_RETURN_IF_ERROR(l.Double("dropout", &lora->dropout, 0, 1));
  STRATA_RETURN_IF_ERROR(l.Choice("base_dtype", &lora->base_dtype, {"", "nf4"}));
  STRATA_RETURN_IF_ERROR(l.StringList("target_parameters", &lora->target_parameters));
  // PEFT's default for LLaMA, unless only parameters (a mixture of experts' experts) are targeted.
  if (lora->target_modules.empty() && lora->target_parameters.empty()) lora->target_modules = {"q_proj", "v_proj"};
  STRATA_RETURN_IF_ERROR(l.StringList("target_modules", &lora->target_modules));
  // Adapter settings without a rank would build no adapter and train the whole model.
  if (!l.Has("r"))
    for (const char* key : {"target_modules", "target_parameters", "alpha", "dropout"})
      if (l.Has(key))
        return InvalidArgument("{} is set but {} is not: without a rank no adapter is built and the whole model "
                               "would be trained; set {} (e.g. 16) for LoRA, or leave strata.lora out for full "
                               "fine-tuning", l.PathOf(key), l.PathOf("r"), l.PathOf("r"));
  return Status();
}

namespace {

using R = model::ModelRanges;  // the bounds every source of a model config is read against

Status Int(JsonReader& r, const char* key, int64_t* out, model::ValueRange range) {
  return r.Int(key, out, static_cast<int64_t>(range.lo), static_cast<int64_t>(range.hi));
}
Status Double(JsonReader& r, const char* key, double* out, model::ValueRange range) {
  return r.Double(key, out, range.lo, range.hi);
}

// A list at `key` whose every entry `is` accepts, as T; `what` says what each entry is.
template <typename T>
Status ParseList(JsonReader& r, const std::string& key, bool (nlohmann::json::*is)() const noexcept, const char* what,
                 std::vector<T>* out) {
  if (const nlohmann::json* l = r.Raw(key)) {
    if (!l->is_array() || !std::all_of(l->begin(), l->end(), [&](const nlohmann::json& v) { return (v.*is)(); }))
      return InvalidArgument("{}: a list of {}; got {}", r.PathOf(key), what, l->dump());
    out->clear();
    for (const nlohmann::json& v : *l) out->push_back(v.get<T>());
  }
  return Status();
}

// strata.model.gemma (model_config.h GemmaOptions).
Status ParseGemma(JsonReader& g, model::GemmaOptions* o) {
  STRATA_RETURN_IF_ERROR(Double(g, "query_pre_attn_scalar", &o->query_pre_attn_scalar, R::kGemmaScale));
  STRATA_RETURN_IF_ERROR(Double(g, "attn_softcap", &o->attn_softcap, R::kGemmaScale));
  STRATA_RETURN_IF_ERROR(Double(g, "final_softcap", &o->final_softcap, R::kGemmaScale));
  STRATA_RETURN_IF_ERROR(Double(g, "rope_local_theta", &o->rope_local_theta, R::kRopeLocalTheta));
  return ParseList(g, "sliding_layers", &nlohmann::json::is_boolean,
                   "true (a sliding-window layer) or false, one per layer", &o->sliding_layers);
}

// strata.model.moe (model_config.h MoeOptions).
Status ParseMoe(JsonReader& e, model::MoeOptions* o) {
  STRATA_RETURN_IF_ERROR(Int(e, "num_experts", &o->num_experts, R::kExperts));
  STRATA_RETURN_IF_ERROR(Int(e, "top_k", &o->top_k, R::kExperts));
  STRATA_RETURN_IF_ERROR(Int(e, "expert_ffn", &o->expert_ffn, R::kExpertFfn));
  STRATA_RETURN_IF_ERROR(e.Bool("norm_topk_prob", &o->norm_topk_prob));
  STRATA_RETURN_IF_ERROR(Double(e, "aux_loss_coef", &o->aux_loss_coef, R::kAuxLossCoef));
  return ParseList(e, "dense_layers", &nlohmann::json::is_boolean, "true (a dense MLP) or false, one per layer",
                   &o->dense_layers);
}

// The strata.model keys into *mc (each absent key keeps *mc's value).
Status ParseModelKeys(JsonReader& m, model::ModelConfig* mc, std::vector<std::string>* warnings) {
  std::string arch = mc->arch == model::Arch::kGpt2 ? "gpt2" : "llama";
  STRATA_RETURN_IF_ERROR(m.Choice("arch", &arch, {"gpt2", "llama"}));
  mc->arch = arch == "gpt2" ? model::Arch::kGpt2 : model::Arch::kLlama;
  STRATA_RETURN_IF_ERROR(Int(m, "vocab_size", &mc->vocab_size, R::kVocab));
  STRATA_RETURN_IF_ERROR(Int(m, "seq_len", &mc->seq_len, R::kSeqLen));
  STRATA_RETURN_IF_ERROR(Int(m, "n_layer", &mc->n_layer, R::kLayers));
  STRATA_RETURN_IF_ERROR(Int(m, "d_model", &mc->d_model, R::kDModel));
  STRATA_RETURN_IF_ERROR(Int(m, "n_head", &mc->n_head, R::kHeads));
  STRATA_RETURN_IF_ERROR(Int(m, "n_kv_head", &mc->n_kv_head, R::kKvHeads));
  STRATA_RETURN_IF_ERROR(Int(m, "ffn_hidden", &mc->ffn_hidden, R::kFfnHidden));
  STRATA_RETURN_IF_ERROR(m.Bool("tie_embeddings", &mc->tie_embeddings));
  STRATA_RETURN_IF_ERROR(Double(m, "norm_eps", &mc->norm_eps, R::kNormEps));
  STRATA_RETURN_IF_ERROR(Double(m, "rope_theta", &mc->rope_theta, R::kRopeTheta));
  STRATA_RETURN_IF_ERROR(Double(m, "init_std", &mc->init_std, R::kInitStd));
  // The LLaMA-family extensions (Mistral, Qwen2, Qwen3; model_config.h).
  STRATA_RETURN_IF_ERROR(Int(m, "head_dim", &mc->head_dim, R::kHeadDim));
  STRATA_RETURN_IF_ERROR(m.Bool("qkv_bias", &mc->qkv_bias));
  STRATA_RETURN_IF_ERROR(m.Bool("qk_norm", &mc->qk_norm));
  STRATA_RETURN_IF_ERROR(Int(m, "max_positions", &mc->max_positions, R::kPositions));
  STRATA_RETURN_IF_ERROR(Int(m, "sliding_window", &mc->sliding_window, R::kPositions));
  STRATA_RETURN_IF_ERROR(Double(m, "partial_rotary", &mc->partial_rotary, R::kPartialRotary));
  std::vector<std::string> types = {""};
  for (const model::ModelFamily& f : model::ModelFamilies()) types.emplace_back(f.model_type);
  STRATA_RETURN_IF_ERROR(m.Choice("hf_model_type", &mc->hf_model_type, types));
  if (m.Has("moe")) {
    STRATA_ASSIGN_OR_RETURN(JsonReader e, m.Child("moe"));
    STRATA_RETURN_IF_ERROR(ParseMoe(e, &mc->moe));
    e.UnusedKeys(warnings);
  }
  if (m.Has("gemma")) {
    STRATA_ASSIGN_OR_RETURN(JsonReader g, m.Child("gemma"));
    STRATA_RETURN_IF_ERROR(ParseGemma(g, &mc->gemma));
    g.UnusedKeys(warnings);
  }
  STRATA_ASSIGN_OR_RETURN(JsonReader r, m.Child("rope_scaling"));
  model::RopeScaling& rs = mc->rope_scaling;
  STRATA_RETURN_IF_ERROR(Double(r, "factor", &rs.factor, R::kRopeFactor));
  STRATA_RETURN_IF_ERROR(Double(r, "low_freq_factor", &rs.low_freq_factor, R::kRopeFactor));
  STRATA_RETURN_IF_ERROR(Double(r, "high_freq_factor", &rs.high_freq_factor, R::kRopeFactor));
  STRATA_RETURN_IF_ERROR(Int(r, "original_max_positions", &rs.original_max_positions, R::kOriginalPositions));
  STRATA_RETURN_IF_ERROR(
      ParseList(r, "short_factor", &nlohmann::json::is_number, "numbers, one per rotated frequency", &rs.short_factor));
  STRATA_RETURN_IF_ERROR(
      ParseList(r, "long_factor", &nlohmann::json::is_number, "numbers, one per rotated frequency", &rs.long_factor));
  STRATA_RETURN_IF_ERROR(Double(r, "attention_factor", &rs.attention_factor, R::kAttentionFactor));
  r.UnusedKeys(warnings);
  if (m.Has("lora")) {  // checkpoint manifests; users write strata.lora
    STRATA_ASSIGN_OR_RETURN(JsonReader l, m.Child("lora"));
    STRATA_RETURN_IF_ERROR(ParseLora(l, &mc->lora));
    l.UnusedKeys(warnings);
  }
  return Status();
}

// strata.model.from: the architecture from a Hugging Face folder's config.json. seq_len
// (else min(max_position_embeddings, 2048), and the sliding window) and init_std may still
// be set; any other key the folder decides is ignored with a note when it differs.
Status ParseModelFrom(JsonReader& m, TrainConfig* c) {
  auto loaded = model::ReadHfModelConfig(c->model_from);
  if (!loaded.ok()) return loaded.status().WithContext("strata.model.from");
  model::ModelConfig restated = *loaded;
  STRATA_RETURN_IF_ERROR(ParseModelKeys(m, &restated, &c->warnings));
  if (m.Has("seq_len")) {
    loaded->seq_len = restated.seq_len;
  } else {
    c->notes.push_back(fmt::format("strata.model.seq_len: {} (the model folder's max_position_embeddings {}, at most "
                                   "{}{}; set strata.model.seq_len to change it)", loaded->seq_len,
                                   model::MaxPositions(*loaded), model::kDefaultHfSeqLen,
                                   loaded->sliding_window > 0 ? ", within its sliding_window" : ""));
  }
  loaded->init_std = restated.init_std;
  const nlohmann::json want = ModelConfigJson(*loaded), got = ModelConfigJson(restated);
  for (auto it = got.begin(); it != got.end(); ++it)
    if (m.Has(it.key()) && want.value(it.key(), nlohmann::json()) != *it)
      c->notes.push_back(fmt::format("strata.model.{} = {} ignored: '{}/config.json' gives {}", it.key(), it->dump(),
                                     c->model_from, want.value(it.key(), nlohmann::json()).dump()));
  c->model = *loaded;
  return Status();
}

}  // namespace

// strata.model: the architecture, key by key or from a Hugging Face folder ("from").
Status ParseModelSection(JsonReader& s, TrainConfig* c) {
  STRATA_ASSIGN_OR_RETURN(JsonReader m, s.Child("model"));
  STRATA_RETURN_IF_ERROR(m.String("from", &c->model_from));
  STRATA_RETURN_IF_ERROR(c->model_from.empty() ? ParseModelKeys(m, &c->model, &c->warnings) : ParseModelFrom(m, c));
  c->model.seed = c->seed;
  m.UnusedKeys(&c->warnings);
  if (Status v = model::Validate(c->model); !v.ok()) return v.WithContext("strata.model");
  return Status();
}

nlohmann::json ModelConfigJson(const model::ModelConfig& m) {
  nlohmann::json j = {{"arch", m.arch == model::Arch::kGpt2 ? "gpt2" : "llama"},
                      {"vocab_size", m.vocab_size},
                      {"seq_len", m.seq_len},
                      {"n_layer", m.n_layer},
                      {"d_model", m.d_model},
                      {"n_head", m.n_head},
                      {"n_kv_head", m.n_kv_head},
                      {"ffn_hidden", m.ffn_hidden},
                      {"tie_embeddings", m.tie_embeddings},
                      {"norm_eps", m.norm_eps},
                      {"rope_theta", m.rope_theta}};
  // Later keys only where they differ from the default, so that checkpoints saved before
  // them compare equal on resume.
  const model::ModelConfig d;
  if (m.head_dim != d.head_dim) j["head_dim"] = m.head_dim;
  if (m.qkv_bias) j["qkv_bias"] = true;
  if (m.qk_norm) j["qk_norm"] = true;
  if (m.max_positions != d.max_positions) j["max_positions"] = m.max_positions;
  if (m.sliding_window != d.sliding_window) j["sliding_window"] = m.sliding_window;
  if (!m.hf_model_type.empty()) j["hf_model_type"] = m.hf_model_type;
  if (m.moe != model::MoeOptions{})
    j["moe"] = {{"num_experts", m.moe.num_experts}, {"top_k", m.moe.top_k}, {"expert_ffn", m.moe.expert_ffn},
                {"norm_topk_prob", m.moe.norm_topk_prob}, {"dense_layers", m.moe.dense_layers},
                {"aux_loss_coef", m.moe.aux_loss_coef}};
  if (m.gemma != model::GemmaOptions{}) {
    const model::GemmaOptions& g = m.gemma;
    j["gemma"] = {{"query_pre_attn_scalar", g.query_pre_attn_scalar}, {"attn_softcap", g.attn_softcap},
                  {"final_softcap", g.final_softcap}, {"rope_local_theta", g.rope_local_theta},
                  {"sliding_layers", g.sliding_layers}};
  }
  if (m.lora.enabled()) {
    j["lora"] = {{"r", m.lora.r}, {"alpha", m.lora.alpha}, {"dropout", m.lora.dropout},
                 {"target_modules", m.lora.target_modules}};
    if (!m.lora.target_parameters.empty()) j["lora"]["target_parameters"] = m.lora.target_parameters;
    if (!m.lora.base_dtype.empty()) j["lora"]["base_dtype"] = m.lora.base_dtype;
  }
  if (m.partial_rotary != 1) j["partial_rotary"] = m.partial_rotary;
  if (m.rope_scaling.longrope())
    j["rope_scaling"] = {{"original_max_positions", m.rope_scaling.original_max_positions},
                         {"short_factor", m.rope_scaling.short_factor},
                         {"long_factor", m.rope_scaling.long_factor},
                         {"attention_factor", m.rope_scaling.attention_factor}};
  if (m.rope_scaling.factor != 0)
    j["rope_scaling"] = {{"factor", m.rope_scaling.factor},
                         {"low_freq_factor", m.rope_scaling.low_freq_factor},
                         {"high_freq_factor", m.rope_scaling.high_freq_factor},
                         {"original_max_positions", m.rope_scaling.original_max_positions}};
  return j;
}

StatusOr<model::ModelConfig> ParseModelConfigJson(const nlohmann::json& j, const std::string& origin) {
  JsonReader m(&j, "model");
  model::ModelConfig mc;
  std::vector<std::string> unused;
  if (Status s = ParseModelKeys(m, &mc, &unused); !s.ok()) return s.WithContext(origin);
  m.UnusedKeys(&unused);
  if (!unused.empty()) return InvalidArgument("{}: unknown model key '{}'", origin, unused.front());
  if (Status v = model::Validate(mc); !v.ok()) return v.WithContext(origin);
  return mc;
}

}  // namespace strata
