#include "src/settle/settle_keys.h"

#include <fmt/format.h>

#include <algorithm>

#include "src/model/model_family.h"
#include "strata/isa.h"

namespace strata {

void ResolvePrecision(TrainConfig* c, bool on_gpu) {
  std::string why;
  const bool native = on_gpu || CpuHasNativeBf16(&why);
  if (on_gpu) why = "a GPU";
  c->precision_warning.clear();
  if (c->bf16_auto && c->compute_dtype != DType::kF16) {
    c->compute_dtype = native ? DType::kBF16 : DType::kF32;
    c->precision_reason = native ? fmt::format("bf16.enabled \"auto\": {} computes bf16 natively", why)
                                 : fmt::format("bf16.enabled \"auto\": {}, where bf16 runs ~10x slower than fp32", why);
    RecordAuto(c, "bf16.enabled", native ? "true" : "false", native ? why + ": native bf16" : why);
    return;
  }
  c->precision_reason = c->compute_dtype == DType::kBF16   ? "bf16.enabled"
                        : c->compute_dtype == DType::kF16 ? "fp16.enabled"
                                                          : "neither bf16 nor fp16 enabled";
  if (c->compute_dtype == DType::kBF16 && !native)
    c->precision_warning = fmt::format(
        "bf16 compute on a CPU without native bf16 ({}): expect steps about 10x slower than fp32; set bf16.enabled "
        "to \"auto\" (or false) to train in fp32 here", why);
}

void RecordAuto(TrainConfig* c, const std::string& path, std::string value, std::string reason) {
  std::erase_if(c->autos, [&](const AutoValue& a) { return a.path == path; });
  c->autos.push_back({path, std::move(value), std::move(reason)});
}

void ResolveSchedule(SettledConfig* c, bool host_device) {
  const bool fetched = c->offload_param.device == Tier::kNvme ||
                       (!host_device && c->offload_param.device != Tier::kDevice);
  const bool saves = c->grad_accum > 1 && fetched;
  c->layer_major = c->schedule_setting == StepSchedule::kLayerMajor ||
                   (c->schedule_setting == StepSchedule::kAuto && (saves || c->fuse_micro_batches));
  if (c->schedule_setting != StepSchedule::kAuto || c->grad_accum == 1) return;
  RecordAuto(c, "strata.schedule", c->layer_major ? "layer_major" : "micro_batch",
             c->layer_major ? "each block's working weights are fetched once per step, not once per micro-batch"
                            : "the working weights are not fetched per visit: nothing to save");
}

void ResolveRecompute(SettledConfig* c, bool fits) {
  c->keep_activations = c->recompute == Recompute::kNever || (c->recompute == Recompute::kAuto && fits);
  if (c->recompute != Recompute::kAuto) return;
  if (c->block_inputs && *c->block_inputs != BlockInputsAt::kDevice) {  // moving them asks for recompute
    c->keep_activations = false;
    RecordAuto(c, "strata.recompute", "always", "strata.block_inputs moves each block's input: each block recomputed");
    return;
  }
  RecordAuto(c, "strata.recompute", c->keep_activations ? "never" : "always",
             c->keep_activations ? "every block's activations fit: kept, no recompute"
                                 : "kept activations would not fit this machine: each block recomputed");
}

void ResolveDeviceAccumulation(SettledConfig* c, bool host_device, bool fits) {
  const bool applies = !host_device && c->grad_accum > 1;
  c->accumulate_on_device = applies && (c->device_accumulation == 1 || (c->device_accumulation < 0 && fits));
  if (c->device_accumulation >= 0 || !applies) return;
  RecordAuto(c, "strata.device_accumulation", c->accumulate_on_device ? "true" : "false",
             c->accumulate_on_device
                 ? "the device has room for fp32 gradient accumulators: gradients leave it once per step"
                 : "fp32 gradient accumulators would not fit the device: every micro-batch's gradients "
                   "are copied to the host");
}

Status ResolveBatch(TrainConfig* c, int world) {
  const int64_t w = world;
  auto note = [&](const char* key, int64_t v, std::string why) {
    c->autos.push_back({key, std::to_string(v), std::move(why)});
  };
  const auto tb = c->train_batch_set, mb = c->micro_batch_set, ga = c->grad_accum_set;
  auto indivisible = [&](int64_t num, int64_t den, const std::string& what) {
    return InvalidArgument("train_batch_size {} is not divisible by {} ({}) on {} rank(s)", num, den, what, world);
  };
  if (tb && mb && ga) {
    if (*tb != *mb * *ga * w)
      return InvalidArgument(
          "train_batch_size {} != train_micro_batch_size_per_gpu {} * gradient_accumulation_steps {} * {} rank(s) = {}",
          *tb, *mb, *ga, world, *mb * *ga * w);
  } else if (tb && mb) {
    if (*tb % (*mb * w)) return indivisible(*tb, *mb * w, "micro-batch x ranks");
    c->grad_accum = *tb / (*mb * w);
    note("gradient_accumulation_steps", c->grad_accum, fmt::format("train_batch_size / (micro-batch x {} ranks)", world));
  } else if (tb && ga) {
    if (*tb % (*ga * w)) return indivisible(*tb, *ga * w, "accumulation steps x ranks");
    c->micro_batch = *tb / (*ga * w);
    note("train_micro_batch_size_per_gpu", c->micro_batch,
         fmt::format("train_batch_size / (accumulation steps x {} ranks)", world));
  } else if (tb) {
    if (*tb % w) return indivisible(*tb, w, "ranks");
    c->grad_accum = 1;
    c->micro_batch = *tb / w;
    note("gradient_accumulation_steps", 1, "train_batch_size alone: no accumulation");
    note("train_micro_batch_size_per_gpu", c->micro_batch, fmt::format("train_batch_size / {} ranks", world));
  } else {
    if (!mb) note("train_micro_batch_size_per_gpu", c->micro_batch, "Strata's default");
    if (!ga) note("gradient_accumulation_steps", c->grad_accum, mb ? "no train_batch_size: no accumulation" : "Strata's default");
  }
  c->train_batch = c->micro_batch * c->grad_accum * w;
  if (!tb) note("train_batch_size", c->train_batch, fmt::format("micro-batch x accumulation steps x {} ranks", world));
  return Status();
}

StatusOr<int> CheckSequenceParallel(const TrainConfig& c, int world) {
  const int64_t sp = c.sequence_parallel;
  if (sp == 1) return world;
  const model::ModelConfig& m = c.model;
  const int64_t kv = m.n_kv_head > 0 ? m.n_kv_head : m.n_head;
  auto refuse = [&](const std::string& why) {
    return InvalidArgument("sequence_parallel_size {}: {}", sp, why);
  };
  if (world % sp != 0) return refuse(fmt::format("the world of {} rank(s) does not split into groups of {}", world, sp));
  if (m.seq_len % sp != 0) return refuse(fmt::format("seq_len {} does not split into {} equal shards", m.seq_len, sp));
  if (m.n_head % sp != 0 || kv % sp != 0)
    return refuse(fmt::format("{} attention heads ({} key/value heads) do not split over {} ranks: each rank attends "
                              "with a share of every kind of head", m.n_head, kv, sp));
  return static_cast<int>(world / sp);
}

StatusOr<int> CheckTensorParallel(const TrainConfig& c, int world) {
  const int64_t tp = c.tensor_parallel, sp = c.sequence_parallel;
  if (tp == 1) return static_cast<int>(world / sp);
  const model::ModelConfig& m = c.model;
  const model::ModelFamily& family = model::FamilyOf(m);
  const int64_t kv = m.n_kv_head > 0 ? m.n_kv_head : m.n_head, split = tp * sp;
  auto refuse = [&](const std::string& why) { return InvalidArgument("tensor_parallel.autotp_size {}: {}", tp, why); };
  if (world % split != 0)
    return refuse(sp == 1 ? fmt::format("the world of {} rank(s) does not split into groups of {}", world, tp)
                          : fmt::format("the world of {} rank(s) does not split into groups of {} tensor x {} "
                                        "sequence ranks", world, tp, sp));
  if (m.n_head % split != 0 || kv % split != 0)
    return refuse(fmt::format("{} attention heads ({} key/value heads) do not split over {} ranks: each rank runs "
                              "a share of every kind of head", m.n_head, kv, split));
  if (model::FfnHidden(m) % tp != 0)
    return refuse(fmt::format("the MLP's width {} does not split over {} ranks", model::FfnHidden(m), tp));
  if (family.experts || family.qk_norm_whole)
    return refuse(fmt::format("model_type \"{}\" is not split yet: GPT-2, the dense LLaMA family (LLaMA, "
                              "Mistral, Qwen2, Qwen3, Phi-3) and Gemma 2 / 3 are", family.model_type));
  if (m.lora.enabled() && (m.lora.Targets("qkv_proj") || m.lora.Targets("gate_up_proj")))
    return refuse("strata.lora: adapters on Phi-3's fused qkv_proj and gate_up_proj are not split yet");
  return static_cast<int>(world / split);
}

std::string DescribeRanks(const TrainConfig& c, int world) {
  const int64_t s = c.sequence_parallel, t = c.tensor_parallel;
  if (s * t == 1) return fmt::format("{} rank(s)", world);
  std::string what = fmt::format("{} data rank(s)", world / (s * t));
  if (t > 1) what += fmt::format(", each layer's heads and MLP width split over {} ranks (tensor parallel)", t);
  if (s > 1) what += fmt::format(", each row's positions split over {} ranks (Ulysses)", s);
  return what;
}

namespace {

// One tile key "auto" settled to `automatic`, with its reason.
void SettleTile(TrainConfig* c, int64_t* chunk, int64_t automatic, double row, const char* key, const char* what) {
  if (*chunk >= 0) return;
  *chunk = automatic;
  const double whole = row * static_cast<double>(c->micro_batch * c->model.seq_len);
  RecordAuto(c, key, std::to_string(*chunk),
             *chunk == 0 ? fmt::format("a micro-batch's {} take {:.2f} GB: untiled", what, whole / 1e9)
                         : fmt::format("a micro-batch's {} would take {:.2f} GB: tiles of {} tokens, {:.0f} MB each",
                                       what, whole / 1e9, *chunk, static_cast<double>(*chunk) * row / 1e6));
}

}  // namespace

void ResolveTileSizes(TrainConfig* c) {
  if (c->objective == Objective::kDpo && c->loss_chunk < 0) {  // Note [DPO]: whole logits, per row
    c->loss_chunk = 0;
    RecordAuto(c, "strata.loss_chunk", "0", "strata.objective \"dpo\" takes each row's log-probability from its "
                                            "whole logits");
  }
  SettleTile(c, &c->loss_chunk, AutoLossChunk(*c), LogitsRowBytes(*c), "strata.loss_chunk",
         "fp32 logits (and as much again for their softmax and its gradient)");
  SettleTile(c, &c->mlp_chunk, AutoMlpChunk(*c), MlpRowBytes(*c), "strata.mlp_chunk", "MLP intermediates [tokens, F]");
}

Status CheckObjective(const TrainConfig& c) {
  if (c.objective != Objective::kDpo) return Status();
  if (c.micro_batch % 2 != 0)
    return InvalidArgument("strata.objective \"dpo\": train_micro_batch_size_per_gpu {} must be even (each pair is a "
                           "chosen and a rejected row of one micro-batch)", c.micro_batch);
  if (c.loss_chunk > 0)
    return InvalidArgument("strata.objective \"dpo\": strata.loss_chunk {} (the tiled loss) is not for DPO yet; set "
                           "it to 0 or \"auto\"", c.loss_chunk);
  return Status();
}

}  // namespace strata
