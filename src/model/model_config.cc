// ModelConfig validation and the arithmetic of blocks (model_config.h), without LibTorch.
#include "src/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "src/model/model_family.h"
#include "src/model/nf4_blob.h"

#include "strata/check.h"

namespace strata::model {
namespace {

Status Positive(const char* field, int64_t value) {
  if (value > 0) return Status::Ok();
  return InvalidArgument("model config: {} = {} must be positive", field, value);
}

Status AtMost(const char* field, int64_t value, int64_t limit) {
  if (value <= limit) return Status::Ok();
  return InvalidArgument("model config: {} = {} exceeds the largest Strata accepts, {}", field, value, limit);
}

Status WithinLimits(const ModelConfig& c) {
  using L = ModelLimits;
  STRATA_RETURN_IF_ERROR(AtMost("vocab_size", c.vocab_size, L::kVocab));
  STRATA_RETURN_IF_ERROR(AtMost("seq_len", c.seq_len, L::kSeqLen));
  STRATA_RETURN_IF_ERROR(AtMost("n_layer", c.n_layer, L::kLayers));
  STRATA_RETURN_IF_ERROR(AtMost("d_model", c.d_model, L::kDModel));
  STRATA_RETURN_IF_ERROR(AtMost("n_head", c.n_head, L::kHeads));
  STRATA_RETURN_IF_ERROR(AtMost("n_kv_head", c.n_kv_head, L::kHeads));
  STRATA_RETURN_IF_ERROR(AtMost("ffn_hidden", c.ffn_hidden, L::kFfnHidden));
  STRATA_RETURN_IF_ERROR(AtMost("head_dim", c.head_dim, L::kHeadDim));
  STRATA_RETURN_IF_ERROR(AtMost("max_positions", c.max_positions, L::kPositions));
  STRATA_RETURN_IF_ERROR(AtMost("sliding_window", c.sliding_window, L::kPositions));
  return AtMost("rope_scaling.original_max_positions", c.rope_scaling.original_max_positions, L::kPositions);
}

Status InRange(const char* field, double value, ValueRange range, const char* meaning = "") {
  if (range.Holds(value)) return Status::Ok();
  return InvalidArgument("model config: {} = {} is outside [{}, {}], the range Strata accepts{}", field, value,
                         range.lo, range.hi, meaning);
}

// Every setting within ModelRanges, whichever source it came from.
Status WithinRanges(const ModelConfig& c) {
  using R = ModelRanges;
  const std::pair<const char*, double> sizes[] = {{"vocab_size", static_cast<double>(c.vocab_size)},
                                                  {"seq_len", static_cast<double>(c.seq_len)},
                                                  {"n_layer", static_cast<double>(c.n_layer)},
                                                  {"d_model", static_cast<double>(c.d_model)},
                                                  {"n_head", static_cast<double>(c.n_head)}};
  const ValueRange size_ranges[] = {R::kVocab, R::kSeqLen, R::kLayers, R::kDModel, R::kHeads};
  for (size_t i = 0; i < std::size(sizes); ++i)
    STRATA_RETURN_IF_ERROR(InRange(sizes[i].first, sizes[i].second, size_ranges[i]));
  STRATA_RETURN_IF_ERROR(InRange("n_kv_head", static_cast<double>(c.n_kv_head), R::kKvHeads, " (0 = n_head)"));
  STRATA_RETURN_IF_ERROR(InRange("ffn_hidden", static_cast<double>(c.ffn_hidden), R::kFfnHidden, " (0 = the default)"));
  STRATA_RETURN_IF_ERROR(InRange("head_dim", static_cast<double>(c.head_dim), R::kHeadDim, " (0 = d_model / n_head)"));
  STRATA_RETURN_IF_ERROR(InRange("max_positions", static_cast<double>(c.max_positions), R::kPositions, " (0 = seq_len)"));
  STRATA_RETURN_IF_ERROR(InRange("sliding_window", static_cast<double>(c.sliding_window), R::kPositions, " (0 = none)"));
  STRATA_RETURN_IF_ERROR(InRange("norm_eps", c.norm_eps, R::kNormEps));
  STRATA_RETURN_IF_ERROR(InRange("rope_theta", c.rope_theta, R::kRopeTheta));
  STRATA_RETURN_IF_ERROR(InRange("init_std", c.init_std, R::kInitStd));
  STRATA_RETURN_IF_ERROR(InRange("partial_rotary", c.partial_rotary, R::kPartialRotary));
  const RopeScaling& r = c.rope_scaling;
  STRATA_RETURN_IF_ERROR(InRange("rope_scaling.factor", r.factor, R::kRopeFactor));
  STRATA_RETURN_IF_ERROR(InRange("rope_scaling.low_freq_factor", r.low_freq_factor, R::kRopeFactor));
  STRATA_RETURN_IF_ERROR(InRange("rope_scaling.high_freq_factor", r.high_freq_factor, R::kRopeFactor));
  STRATA_RETURN_IF_ERROR(InRange("rope_scaling.original_max_positions", static_cast<double>(r.original_max_positions),
                                 R::kOriginalPositions));
  STRATA_RETURN_IF_ERROR(InRange("rope_scaling.attention_factor", r.attention_factor, R::kAttentionFactor));
  for (const std::vector<double>* factors : {&r.short_factor, &r.long_factor})
    for (double f : *factors)
      STRATA_RETURN_IF_ERROR(InRange(factors == &r.short_factor ? "a rope_scaling.short_factor"
                                                                : "a rope_scaling.long_factor", f, R::kLongropeFactor));
  const GemmaOptions& g = c.gemma;
  STRATA_RETURN_IF_ERROR(InRange("gemma.query_pre_attn_scalar", g.query_pre_attn_scalar, R::kGemmaScale));
  STRATA_RETURN_IF_ERROR(InRange("gemma.attn_softcap", g.attn_softcap, R::kGemmaScale, " (0 = none)"));
  STRATA_RETURN_IF_ERROR(InRange("gemma.final_softcap", g.final_softcap, R::kGemmaScale, " (0 = none)"));
  STRATA_RETURN_IF_ERROR(InRange("gemma.rope_local_theta", g.rope_local_theta, R::kRopeLocalTheta));
  return InRange("moe.aux_loss_coef", c.moe.aux_loss_coef, R::kAuxLossCoef, " (0 = no router loss)");
}

int64_t KvHeads(const ModelConfig& c) { return c.n_kv_head > 0 ? c.n_kv_head : c.n_head; }

// Elements in the block's own parameters (a tied head has no lm_head); the blocks' layouts
// are documented in gpt2.cc and llama.cc, which register exactly these.
int64_t Gpt2BlockParameters(const ModelConfig& c, int index) {
  const int64_t C = c.d_model, V = c.vocab_size, F = FfnHidden(c);
  switch (KindOf(c, index)) {
    case BlockKind::kEmbedding: return V * C + MaxPositions(c) * C;
    case BlockKind::kLayer: return 2 * (2 * C) + (3 * C * C + 3 * C) + (C * C + C) + (F * C + F) + (C * F + C);
    case BlockKind::kHead: return 2 * C + (c.tie_embeddings ? 0 : V * C);
  }
  return 0;
}

int64_t LlamaBlockParameters(const ModelConfig& c, int index) {
  const int64_t C = c.d_model, V = c.vocab_size, F = FfnHidden(c), D = HeadDim(c);
  const int64_t q_out = c.n_head * D, kv_out = KvHeads(c) * D;
  const int64_t biases = c.qkv_bias ? q_out + 2 * kv_out : 0, qk_norms = c.qk_norm ? 2 * D : 0;  // per head
  switch (KindOf(c, index)) {
    case BlockKind::kEmbedding: return V * C;
    case BlockKind::kLayer: {  // Gemma: two more norms, before and after the MLP; MoE: a router and experts
      const int64_t mlp = SparseLayer(c, index - 1)
                              ? c.moe.num_experts * C + c.moe.num_experts * 3 * C * c.moe.expert_ffn : 3 * C * F;
      const int64_t full_qk_norms = FamilyOf(c).qk_norm_whole ? q_out + kv_out : 0;  // over whole projections
      return (IsGemma(c) ? 4 : 2) * C + C * q_out + 2 * C * kv_out + q_out * C + mlp + biases + qk_norms + full_qk_norms;
    }
    case BlockKind::kHead: return C + (c.tie_embeddings ? 0 : V * C);
  }
  return 0;
}

// One expert's share of a sparse layer's expert adapters: r * (in + out) of each fused tensor
// adapted (Note [Expert adapters]).
int64_t ExpertAdapterParameters(const ModelConfig& c) {
  if (!c.lora.enabled()) return 0;
  const int64_t C = c.d_model, F = c.moe.expert_ffn;
  return (c.lora.TargetsExperts("gate_up_proj") ? c.lora.r * (C + 2 * F) : 0) +
         (c.lora.TargetsExperts("down_proj") ? c.lora.r * (F + C) : 0);
}

// The adapters of a LLaMA layer: r * (in + out) per targeted projection.
int64_t LoraParameters(const ModelConfig& c, int index) {
  if (!c.lora.enabled() || KindOf(c, index) != BlockKind::kLayer) return 0;
  const int64_t C = c.d_model, F = FfnHidden(c), D = HeadDim(c);
  const int64_t q_out = c.n_head * D, kv_out = KvHeads(c) * D;
  const std::pair<const char*, int64_t> in_out[] = {{"q_proj", C + q_out},  {"k_proj", C + kv_out},
                                                    {"v_proj", C + kv_out}, {"o_proj", q_out + C},
                                                    {"gate_proj", C + F},   {"up_proj", C + F},
                                                    {"down_proj", F + C},   {"qkv_proj", C + q_out + 2 * kv_out},
                                                    {"gate_up_proj", C + 2 * F}};
  int64_t n = 0;
  for (const auto& [name, sum] : in_out)
    if (c.lora.Targets(name)) n += c.lora.r * sum;
  if (IsMoe(c) && SparseLayer(c, index - 1)) n += c.moe.num_experts * ExpertAdapterParameters(c);
  return n;
}

}  // namespace

bool LoraConfig::Targets(const std::string& projection) const {
  for (const std::string& t : target_modules)
    if (t == projection) return true;
  return false;
}

// PEFT matches a target parameter by the end of its name: these are the ends that name a
// layer's experts.
static bool NamesExpertTensor(const std::string& entry, const std::string& tensor) {
  return entry == tensor || entry == "experts." + tensor || entry == "mlp.experts." + tensor;
}

bool LoraConfig::TargetsExperts(const std::string& tensor) const {
  for (const std::string& t : target_parameters)
    if (NamesExpertTensor(t, tensor)) return true;
  return false;
}

// Partial rotary embedding and longrope (Phi-3.5/4).
static Status ValidateRotary(const ModelConfig& c) {
  const RopeScaling& r = c.rope_scaling;
  if (c.arch != Arch::kLlama)
    return c.partial_rotary == 1 && !r.longrope() ? Status::Ok()
                                                  : InvalidArgument("model config: partial_rotary and longrope are LLaMA-family keys");
  if (!(c.partial_rotary > 0 && c.partial_rotary <= 1) || RotaryDim(c) < 2 || RotaryDim(c) % 2 != 0)
    return InvalidArgument("model config: partial_rotary {} of head dim {} rotates {} dims; it must be in (0, 1] and "
                           "rotate an even number >= 2", c.partial_rotary, HeadDim(c), RotaryDim(c));
  if (!r.longrope()) return Status::Ok();
  const auto half = static_cast<size_t>(RotaryDim(c) / 2);
  if (r.factor != 0 || r.short_factor.size() != half || r.long_factor.size() != half ||
      !std::all_of(r.short_factor.begin(), r.short_factor.end(), [](double f) { return f > 0; }))
    return InvalidArgument("model config: longrope needs {} positive short_factor and long_factor entries (one per "
                           "rotated frequency) and no llama3 factor; got {} and {}", half, r.short_factor.size(),
                           r.long_factor.size());
  if (c.seq_len > r.original_max_positions)
    return InvalidArgument("model config: seq_len = {} exceeds rope_scaling original_max_position_embeddings = {}: "
                           "longrope's long factors (for longer sequences) are not built; set seq_len <= {}",
                           c.seq_len, r.original_max_positions, r.original_max_positions);
  return Status::Ok();
}

// hf_model_type names a family (Note [Model families]) of the config's arch, and the config has
// what that family's blocks always have, and nothing they never have: a Qwen3 without its q/k
// norms would export a config.json whose model loads without them, a Mistral with q/k/v
// biases one that drops them.
static Status ValidateFamily(const ModelConfig& c) {
  const ModelFamily* f = c.hf_model_type.empty() ? &FamilyOf(c) : FindFamily(c.hf_model_type);
  if (f == nullptr || f->gpt2() != (c.arch == Arch::kGpt2))
    return InvalidArgument("model config: hf_model_type \"{}\" is not one of {} for arch {}", c.hf_model_type,
                           FamilyTypesAndClasses(), c.arch == Arch::kGpt2 ? "gpt2" : "llama");
  for (auto [has, set, key] : {std::tuple{f->qkv_bias, c.qkv_bias, "qkv_bias"}, std::tuple{f->qk_norm, c.qk_norm, "qk_norm"}}) {
    if (has == Has::kFree || set == (has == Has::kAlways)) continue;
    return InvalidArgument("model config: {} {} with hf_model_type \"{}\": {} blocks {} have it (set strata.model.{} "
                           "to {}, or choose the family that has it)", key, set ? "true" : "false", f->model_type,
                           f->display, has == Has::kAlways ? "always" : "never", key, set ? "false" : "true");
  }
  return Status::Ok();
}

// The Gemma options belong to Gemma, and make sense there.
static Status ValidateGemma(const ModelConfig& c) {
  const GemmaOptions& g = c.gemma;
  if (!IsGemma(c)) {
    if (g == GemmaOptions{}) return Status::Ok();
    return InvalidArgument("model config: strata.model.gemma is for hf_model_type gemma2 or gemma3_text, not \"{}\"",
                           c.hf_model_type);
  }
  if (c.arch != Arch::kLlama) return InvalidArgument("model config: Gemma is LLaMA-shaped (arch llama)");
  if (!(g.query_pre_attn_scalar >= 0 && g.attn_softcap >= 0 && g.final_softcap >= 0 && g.rope_local_theta >= 0))
    return InvalidArgument("strata.model.gemma: query_pre_attn_scalar, attn_softcap, final_softcap and "
                           "rope_local_theta must be >= 0 (0 = off / the default)");
  if (!g.sliding_layers.empty() && static_cast<int64_t>(g.sliding_layers.size()) != c.n_layer)
    return InvalidArgument("strata.model.gemma.sliding_layers has {} entries for {} layers", g.sliding_layers.size(),
                           c.n_layer);
  return Status::Ok();
}

// The expert options belong to the mixtures of experts.
static Status ValidateMoe(const ModelConfig& c) {
  const MoeOptions& m = c.moe;
  if (!IsMoe(c)) {
    if (m == MoeOptions{}) return Status::Ok();
    return InvalidArgument("model config: strata.model.moe is for hf_model_type mixtral, qwen3_moe or olmoe, not "
                           "\"{}\"", c.hf_model_type);
  }
  if (m.num_experts < 1 || m.num_experts > 4096 || m.top_k < 1 || m.top_k > m.num_experts || m.expert_ffn < 1 ||
      m.expert_ffn > ModelLimits::kFfnHidden)
    return InvalidArgument("strata.model.moe: needs 1 <= top_k ({}) <= num_experts ({}) <= 4096 and expert_ffn ({}) "
                           "in [1, {}]", m.top_k, m.num_experts, m.expert_ffn, ModelLimits::kFfnHidden);
  if (!m.dense_layers.empty() && static_cast<int64_t>(m.dense_layers.size()) != c.n_layer)
    return InvalidArgument("strata.model.moe.dense_layers has {} entries for {} layers", m.dense_layers.size(), c.n_layer);
  if (c.lora.enabled()) {  // the experts are one fused tensor each in PEFT's view: target_parameters
    for (const char* mlp : {"gate_proj", "up_proj", "down_proj"})
      if (c.lora.Targets(mlp))
        return InvalidArgument("strata.lora.target_modules: \"{}\": the experts of {} are adapted as PEFT adapts "
                               "transformers' fused expert tensors: strata.lora.target_parameters [\"experts.gate_up_proj\", "
                               "\"experts.down_proj\"]", mlp, c.hf_model_type);
    if (c.lora.nf4_base())
      return InvalidArgument("strata.lora.base_dtype \"nf4\": not for mixtures of experts yet ({})", c.hf_model_type);
  }
  return Status::Ok();
}

// strata.lora's target_modules and target_parameters.
static Status ValidateLoraTargets(const ModelConfig& c) {
  const LoraConfig& l = c.lora;
  if (l.target_modules.empty() && l.target_parameters.empty())
    return InvalidArgument("strata.lora.target_modules is empty: name at least one of q_proj, k_proj, v_proj, "
                           "o_proj, gate_proj, up_proj, down_proj (or a mixture of experts' target_parameters)");
  // The row says what the family's modules are called; a name from another row says what to
  // write instead.
  const ModelFamily& f = FamilyOf(c);
  auto names = [](const ModelFamily& row, const std::string& t) { return std::ranges::count(row.lora_targets, t) > 0; };
  for (const std::string& t : l.target_modules) {
    if (names(f, t)) continue;
    const auto rows = ModelFamilies();
    const auto owner = std::ranges::find_if(rows, [&](const ModelFamily& row) { return names(row, t); });
    if (owner == rows.end())
      return InvalidArgument("strata.lora.target_modules: \"{}\" is not one of q_proj, k_proj, v_proj, o_proj, "
                             "gate_proj, up_proj, down_proj (Phi-3: qkv_proj, o_proj, gate_up_proj, down_proj)", t);
    if (owner->fused_projections)
      return InvalidArgument("strata.lora.target_modules: \"{}\" is Phi-3's fused projection; {} has q_proj, k_proj, "
                             "v_proj and gate_proj, up_proj", t, c.hf_model_type.empty() ? "this model" : c.hf_model_type);
    if (f.fused_projections)
      return InvalidArgument("strata.lora.target_modules: \"{}\": Phi-3 fuses q/k/v into qkv_proj and gate/up into "
                             "gate_up_proj; target those (as PEFT does), o_proj and down_proj", t);
    return InvalidArgument("strata.lora.target_modules: \"{}\" is not a module of {}'s blocks that adapters take",
                           t, f.display);
  }
  bool sparse = false;  // (PEFT too refuses a target that matches nothing)
  for (int64_t layer = 0; layer < c.n_layer; ++layer) sparse = sparse || SparseLayer(c, layer);
  for (const std::string& t : l.target_parameters) {
    bool known = false;
    for (const char* p : kLoraExpertTensors) known = known || NamesExpertTensor(t, p);
    if (!known)
      return InvalidArgument("strata.lora.target_parameters: \"{}\" is not experts.gate_up_proj or "
                             "experts.down_proj (a mixture of experts' fused expert tensors, as PEFT names them)", t);
    if (!sparse)
      return InvalidArgument("strata.lora.target_parameters: \"{}\" names a mixture of experts' experts, and {} has "
                             "none{}", t, c.hf_model_type.empty() ? "this model" : "\"" + c.hf_model_type + "\"",
                             IsMoe(c) ? " (strata.model.moe.dense_layers makes every layer dense)" : "");
  }
  if (!l.target_parameters.empty() && l.dropout != 0)  // as PEFT's ParamWrapper refuses it
    return InvalidArgument("strata.lora.dropout = {} with target_parameters: an expert adapter's dropout on its input "
                           "cannot be factored out of the adapted expert weights (PEFT refuses it too); set 0",
                           l.dropout);
  return Status::Ok();
}

// strata.lora against the model it adapts.
static Status ValidateLora(const ModelConfig& c) {
  if (c.lora.r < 0) return InvalidArgument("strata.lora.r = {} must be >= 0 (0 = no adapters)", c.lora.r);
  if (!c.lora.base_dtype.empty() && !c.lora.enabled())
    return InvalidArgument("strata.lora.base_dtype = \"{}\" needs adapters (strata.lora.r > 0): a base that is "
                           "trained is kept in the compute dtype", c.lora.base_dtype);
  if (c.lora.enabled()) {
    if (FamilyOf(c).lora_targets.empty())
      return InvalidArgument("strata.lora: adapters are built for the LLaMA family (llama, mistral, qwen2, qwen3), "
                             "not GPT-2");
    if (!(c.lora.dropout >= 0 && c.lora.dropout < 1))
      return InvalidArgument("strata.lora.dropout = {} must be in [0, 1)", c.lora.dropout);
    if (!(c.lora.alpha > 0)) return InvalidArgument("strata.lora.alpha = {} must be positive", c.lora.alpha);
    if (!c.lora.base_dtype.empty() && c.lora.base_dtype != "nf4")
      return InvalidArgument("strata.lora.base_dtype = \"{}\": use \"nf4\" (QLoRA's 4-bit base) or leave it out "
                             "(the compute dtype)", c.lora.base_dtype);
    STRATA_RETURN_IF_ERROR(ValidateLoraTargets(c));
  }
  return Status::Ok();
}

Status Validate(const ModelConfig& c) {
  STRATA_RETURN_IF_ERROR(WithinLimits(c));
  STRATA_RETURN_IF_ERROR(WithinRanges(c));
  STRATA_RETURN_IF_ERROR(Positive("vocab_size", c.vocab_size));
  STRATA_RETURN_IF_ERROR(Positive("seq_len", c.seq_len));
  STRATA_RETURN_IF_ERROR(Positive("n_layer", c.n_layer));
  STRATA_RETURN_IF_ERROR(Positive("d_model", c.d_model));
  STRATA_RETURN_IF_ERROR(Positive("n_head", c.n_head));
  if (c.head_dim < 0) return InvalidArgument("model config: head_dim = {} must be >= 0 (0 = d_model / n_head)", c.head_dim);
  if (c.head_dim == 0 && c.d_model % c.n_head != 0) {
    return InvalidArgument("model config: n_head = {} must divide d_model = {}", c.n_head, c.d_model);
  }
  if (c.n_kv_head < 0 || c.n_kv_head > c.n_head || (c.n_kv_head > 0 && c.n_head % c.n_kv_head != 0)) {
    return InvalidArgument("model config: n_kv_head = {} must be 0 (= n_head) or a divisor of n_head = {}",
                           c.n_kv_head, c.n_head);
  }
  if (c.arch == Arch::kGpt2 && c.n_kv_head != 0 && c.n_kv_head != c.n_head) {
    return InvalidArgument("model config: n_kv_head = {} is LLaMA's grouped-query attention; GPT-2 needs 0 or n_head = {}",
                           c.n_kv_head, c.n_head);
  }
  if (c.arch == Arch::kGpt2 && (c.head_dim != 0 || c.qkv_bias || c.qk_norm || c.rope_scaling.factor != 0 ||
                                 c.sliding_window != 0)) {
    return InvalidArgument("model config: head_dim, qkv_bias, qk_norm, rope_scaling and sliding_window are LLaMA-family "
                           "keys; GPT-2 has none of them");
  }
  if (c.arch == Arch::kLlama && HeadDim(c) % 2 != 0) {
    return InvalidArgument("model config: the head dim {} must be even for RoPE", HeadDim(c));
  }
  if (c.max_positions < 0) return InvalidArgument("model config: max_positions = {} must be >= 0", c.max_positions);
  if (c.seq_len > MaxPositions(c)) {
    return InvalidArgument("model config: seq_len = {} exceeds max_positions = {} (the model's max_position_embeddings)",
                           c.seq_len, MaxPositions(c));
  }
  if (c.sliding_window < 0 || (c.sliding_window > 0 && c.seq_len > c.sliding_window)) {
    return InvalidArgument("model config: seq_len = {} exceeds sliding_window = {}: Strata's attention is full causal, "
                           "which equals sliding-window attention only for sequences up to the window; set seq_len "
                           "<= {}", c.seq_len, c.sliding_window, c.sliding_window);
  }
  STRATA_RETURN_IF_ERROR(ValidateRotary(c));
  const RopeScaling& r = c.rope_scaling;
  if (r.factor != 0 && !(r.factor >= 1 && r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor &&
                         r.original_max_positions > 0)) {
    return InvalidArgument("model config: rope_scaling needs factor >= 1, 0 < low_freq_factor < high_freq_factor and "
                           "original_max_position_embeddings > 0 (got factor {}, low {}, high {}, original {})",
                           r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_positions);
  }
  STRATA_RETURN_IF_ERROR(ValidateFamily(c));
  STRATA_RETURN_IF_ERROR(ValidateGemma(c));
  STRATA_RETURN_IF_ERROR(ValidateMoe(c));
  if (c.ffn_hidden < 0) return InvalidArgument("model config: ffn_hidden = {} must be >= 0 (0 = default)", c.ffn_hidden);
  if (!(c.norm_eps > 0)) return InvalidArgument("model config: norm_eps = {} must be positive", c.norm_eps);
  if (!(c.rope_theta > 0)) return InvalidArgument("model config: rope_theta = {} must be positive", c.rope_theta);
  if (!(c.init_std >= 0)) return InvalidArgument("model config: init_std = {} must be >= 0", c.init_std);
  return ValidateLora(c);
}

bool StoredInNf4(const ModelConfig& c, int index, const std::string& name) {
  return c.lora.nf4_base() && index >= 1 && index <= c.n_layer && name.ends_with("_proj.weight");
}

int64_t RotaryDim(const ModelConfig& c) {
  return static_cast<int64_t>(static_cast<double>(HeadDim(c)) * c.partial_rotary);
}

double RopeAttentionFactor(const ModelConfig& c) {
  const RopeScaling& r = c.rope_scaling;
  if (!r.longrope()) return 1;
  if (r.attention_factor > 0) return r.attention_factor;
  const double original = static_cast<double>(r.original_max_positions);
  const double factor = static_cast<double>(MaxPositions(c)) / original;
  return factor <= 1 ? 1 : std::sqrt(1 + std::log(factor) / std::log(original));
}

bool IsGemma(const ModelConfig& c) { return FamilyOf(c).gemma(); }

bool IsMoe(const ModelConfig& c) { return FamilyOf(c).experts; }

bool SparseLayer(const ModelConfig& c, int64_t layer) {
  return IsMoe(c) && !(layer < static_cast<int64_t>(c.moe.dense_layers.size()) && c.moe.dense_layers[layer]);
}

bool IsAdapterName(const std::string& name) { return name.ends_with(".lora_A") || name.ends_with(".lora_B"); }

int64_t HeadDim(const ModelConfig& c) { return c.head_dim > 0 ? c.head_dim : c.d_model / c.n_head; }

int64_t MaxPositions(const ModelConfig& c) { return c.max_positions > 0 ? c.max_positions : c.seq_len; }

int64_t FfnHidden(const ModelConfig& c) {
  if (c.ffn_hidden > 0) return c.ffn_hidden;
  if (c.arch == Arch::kGpt2) return 4 * c.d_model;
  const int64_t third = (8 * c.d_model + 2) / 3;  // ceil(8C / 3)
  return (third + 63) / 64 * 64;
}

ModelConfig Canonical(const ModelConfig& c) {
  ModelConfig out = c;
  out.ffn_hidden = FfnHidden(c);
  out.n_kv_head = KvHeads(c);
  out.max_positions = MaxPositions(c);
  if (c.head_dim * c.n_head == c.d_model) out.head_dim = 0;
  return out;
}

ModelSpec::ModelSpec(ModelConfig config) : config_(std::move(config)) {
  Status s = Validate(config_);
  STRATA_CHECK(s.ok()) << "ModelSpec needs a config that passed Validate(): " << s.ToString();
}

int ModelSpec::num_blocks() const { return static_cast<int>(config_.n_layer) + 2; }

std::optional<Tie> ModelSpec::tie() const {
  if (!config_.tie_embeddings) return std::nullopt;
  return Tie{0, "wte.weight", num_blocks() - 1};
}

int64_t ModelSpec::block_parameters(int index) const {
  STRATA_CHECK(index >= 0 && index < num_blocks()) << "block " << index << " of " << num_blocks();
  return config_.arch == Arch::kGpt2 ? Gpt2BlockParameters(config_, index)
                                     : LlamaBlockParameters(config_, index) + LoraParameters(config_, index);
}

int64_t ModelSpec::trainable_parameters(int index) const {
  return config_.lora.enabled() ? LoraParameters(config_, index) : block_parameters(index);
}

std::vector<int64_t> ModelSpec::nf4_weights(int index) const {
  const ModelConfig& c = config_;
  if (!StoredInNf4(c, index, "self_attn.q_proj.weight")) return {};
  const int64_t C = c.d_model, q = c.n_head * HeadDim(c), kv = KvHeads(c) * HeadDim(c), F = FfnHidden(c);
  return {q * C, kv * C, kv * C, C * q, F * C, F * C, C * F};  // q k v o, gate up down
}

int64_t ModelSpec::nf4_parameters(int index) const {
  int64_t n = 0;
  for (int64_t w : nf4_weights(index)) n += w;
  return n;
}

int64_t ModelSpec::nf4_bytes(int index) const {
  int64_t n = 0;
  for (int64_t w : nf4_weights(index)) n += Nf4BlobBytes(w);
  return n;
}

ExpertSpan ModelSpec::experts(int index) const {
  const ModelConfig& c = config_;
  if (c.arch == Arch::kGpt2 || KindOf(c, index) != BlockKind::kLayer || !SparseLayer(c, index - 1)) return {};
  const int64_t numel = 3 * c.d_model * c.moe.expert_ffn, count = c.moe.num_experts;
  return {LlamaBlockParameters(c, index) - numel * count, numel, count};  // the block's base ends with them
}

int64_t ModelSpec::num_parameters() const {
  int64_t total = 0;
  for (int i = 0; i < num_blocks(); ++i) total += block_parameters(i);
  return total;
}

// The embedding tables are lookups, not matmuls, so they are left out; the LM head's
// [V, C] matmul is counted whether its weight is its own or the tied table; of a sparse
// layer's experts, the top_k a token runs.
double ModelSpec::train_flops_per_token() const {
  const ModelConfig& c = config_;
  // Frozen weights (LoRA's base) cost their forward and the input gradient only: 4, not 6.
  double trainable = 0, frozen = 0;
  for (int i = 1; i < num_blocks(); ++i) {
    // A token runs top_k of a sparse layer's experts: the others cost it nothing.
    const ExpertSpan x = experts(i);
    const double idle = static_cast<double>(x.numel) * static_cast<double>(x.count - (x.count > 0 ? c.moe.top_k : 0));
    const double base = static_cast<double>(block_parameters(i) - trainable_parameters(i));
    const double idle_adapters = static_cast<double>(ExpertAdapterParameters(c)) *
                                 static_cast<double>(x.count - (x.count > 0 ? c.moe.top_k : 0));
    trainable += static_cast<double>(trainable_parameters(i)) - (c.lora.enabled() ? idle_adapters : idle);
    frozen += base - (c.lora.enabled() ? idle : 0);
  }
  const double table = c.tie_embeddings ? static_cast<double>(c.vocab_size) * static_cast<double>(c.d_model) : 0;
  (c.lora.enabled() ? frozen : trainable) += table;
  // Attention scores and their weighted sum run over n_head * head dim (= d_model unless head_dim is set).
  return 6.0 * trainable + 4.0 * frozen + 12.0 * static_cast<double>(c.n_layer * c.n_head * HeadDim(c) * c.seq_len);
}

}  // namespace strata::model
