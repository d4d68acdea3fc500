// DeepSpeed keys that Strata does not implement, in two kinds:
//  - keys that would change what is trained (the model, the data, the batch, the update or
//    its rounding): where they are on, parsing refuses the config, naming each key and what
//    DeepSpeed would have done, unless strata.allow_unsupported is true; then each is a note;
//  - keys that change nothing trained (monitors, profilers, logs): a note, never an error.
// A key that is off as written ({"enabled": false}, false, a factor of 1) is a note too.
// Each replaces the "not used by Strata" warning its key would otherwise get.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "strata/status.h"

namespace strata {
namespace unsupported_keys_internal {

inline bool IsTrue(const nlohmann::json& v) { return v == true; }
inline bool IsFalse(const nlohmann::json& v) { return v == false; }
inline bool IsNotOne(const nlohmann::json& v) { return v.is_number() && v.get<double>() != 1.0; }
inline bool Always(const nlohmann::json&) { return true; }

// A section's "enabled": true, or, in a section of sub-features without one of its own
// (compression_training), any sub-feature's.
inline bool Enabled(const nlohmann::json& v) {
  if (!v.is_object()) return IsTrue(v);
  if (v.contains("enabled")) return IsTrue(v["enabled"]);
  return std::any_of(v.begin(), v.end(), [](const nlohmann::json& sub) { return sub.is_object() && Enabled(sub); });
}

// A section without an "enabled" switch is on when written, even empty (DeepSpeed then takes
// its defaults), unless written null, false or {"enabled": false}.
inline bool Written(const nlohmann::json& v) {
  if (v.is_object()) return !(v.contains("enabled") && IsFalse(v["enabled"]));
  return !v.is_null() && !IsFalse(v);
}

struct KeyRule {
  const char* path;                        // dotted, from the top
  bool (*on)(const nlohmann::json& value);  // whether it does anything as written
  const char* deepspeed;                   // what DeepSpeed does with it
};

// Keys that change what is trained.
inline constexpr KeyRule kChangesTraining[] = {
    {"zero_optimization.zenflow", Written,
     "update the largest gradient columns every step and the rest, accumulated, every few steps (ZenFlow)"},
    {"zero_optimization.zero_quantized_weights", IsTrue, "all-gather the weights quantized to int8 (ZeRO++)"},
    {"zero_optimization.zero_quantized_nontrainable_weights", IsTrue, "keep the frozen weights in int8 (ZeRO++)"},
    {"zero_optimization.zero_quantized_gradients", IsTrue, "reduce the gradients quantized to int4 (ZeRO++)"},
    {"compression_training", Enabled, "quantize, prune or drop layers of the model while training it"},
    {"progressive_layer_drop", Enabled, "skip layers at random, more of them as training goes on"},
    {"curriculum_learning", Enabled, "train on shorter sequences first, lengthening them on a schedule"},
    {"data_efficiency", Enabled, "order the data by a curriculum and drop tokens in the middle layers (random-LTD)"},
    {"expert_parallel", Enabled, "spread the mixture-of-experts layers' experts across ranks (AutoEP)"},
    {"pipeline", Written, "run the model as pipeline stages, so fewer ranks share a batch"},
    {"sparse_attention", Written, "replace the attention by block-sparse attention"},
    {"eigenvalue", Enabled, "pace the weights' quantization by the layers' Hessian eigenvalues"},
    {"quantize_training", Enabled, "quantize the weights while training, to fewer bits on a schedule (MoQ)"},
    {"amp", Enabled, "train in NVIDIA Apex AMP's mixed precision"},
    {"torch_autocast", Enabled, "run the blocks under torch.autocast in lower precision (Strata's is bf16.enabled)"},
    {"sparse_gradients", IsTrue, "reduce the embedding's gradients as sparse tensors"},
    {"prescale_gradients", IsTrue, "divide the gradients by the world size before their reduction, not after"},
    {"gradient_predivide_factor", IsNotOne, "divide the gradients by this factor before their reduction"},
    {"fp16.fp16_master_weights_and_grads", IsTrue, "keep the master weights and the gradients in fp16"},
    {"bf16.bf16_master_weights_and_grads", IsTrue, "keep the master weights and the gradients in bf16"},
    {"bf16.bf16_optimizer_states", IsTrue, "keep Adam's moments in bf16 (Strata's: strata.adam_states \"bf16\")"},
    {"optimizer.params.amsgrad", IsTrue, "use AMSGrad, the largest v so far in the denominator (its CPU Adam refuses)"},
    {"optimizer.params.fp32_optimizer_states", IsFalse,
     "keep the CPU Adam's moments in the weights' dtype (Strata's: strata.adam_states \"bf16\")"},
};

// Keys that change nothing trained.
inline constexpr KeyRule kChangesNothing[] = {
    {"comet", Always, "log metrics to Comet"},
    {"comms_logger", Always, "log the collective communications"},
    {"flops_profiler", Always, "profile the model's FLOPs"},
    {"dump_state", Always, "print its state at start-up"},
    {"memory_breakdown", Always, "print the memory in use"},
    {"timers", Always, "time its own phases"},
    {"autotuning", Always, "tune its settings in trial runs"},
    {"compile", Always, "compile the model with torch.compile"},
    {"zero_allow_untested_optimizer", Always, "allow optimizers it has not tested with ZeRO"},
    {"zero_force_ds_cpu_optimizer", Always, "insist on its CPU Adam with offload (Strata's Adam is one)"},
};

inline const nlohmann::json* Find(const nlohmann::json& root, std::string_view path) {
  const nlohmann::json* node = &root;
  for (size_t start = 0;;) {
    const size_t dot = path.find('.', start);
    const std::string part(path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (!node->is_object() || !node->contains(part)) return nullptr;
    node = &(*node)[part];
    if (dot == std::string_view::npos) return node;
    start = dot + 1;
  }
}

}  // namespace unsupported_keys_internal

// Applies both tables to the parsed JSON `root`: the keys that change nothing trained, and
// those off as written, become notes; those on an error unless `allow`, else notes. Their
// paths leave `warnings`.
inline Status CheckUnsupportedKeys(const nlohmann::json& root, bool allow, std::vector<std::string>* warnings,
                                   std::vector<std::string>* notes) {
  namespace uk = unsupported_keys_internal;
  std::vector<std::string> refused;
  auto apply = [&](const uk::KeyRule& k, bool changes_training) {
    const nlohmann::json* v = uk::Find(root, k.path);
    if (!v) return;
    std::erase(*warnings, std::string(k.path));
    if (!changes_training)
      notes->push_back(fmt::format("{}: accepted, not used (it changes nothing trained): DeepSpeed would {}", k.path,
                                   k.deepspeed));
    else if (!k.on(*v))
      notes->push_back(fmt::format("{}: off as written, so nothing to do (on, DeepSpeed would {})", k.path, k.deepspeed));
    else if (allow)
      notes->push_back(fmt::format("{}: not implemented; trained without it (strata.allow_unsupported), where "
                                   "DeepSpeed would {}", k.path, k.deepspeed));
    else
      refused.push_back(fmt::format("{}: DeepSpeed would {}", k.path, k.deepspeed));
  };
  for (const uk::KeyRule& k : uk::kChangesTraining) apply(k, true);
  for (const uk::KeyRule& k : uk::kChangesNothing) apply(k, false);
  if (refused.empty()) return Status();
  std::string list;
  for (const std::string& r : refused) list += (list.empty() ? "" : "; ") + r;
  const bool one = refused.size() == 1;
  return InvalidArgument("{}. Strata does not implement {}, so this run would not train what DeepSpeed would. "
                         "Remove {}, or set strata.allow_unsupported to true (--set strata.allow_unsupported=true) "
                         "to train without {}",
                         list, one ? "it" : "them", one ? "the key" : "these keys", one ? "it" : "them");
}

}  // namespace strata
