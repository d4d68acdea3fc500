#include "src/config/train_config.h"

#include <filesystem>

#include "src/base/input_file.h"
#include "src/config/checkpoint_section.h"
#include "src/config/data_section.h"
#include "src/config/json_reader.h"
#include "src/config/model_section.h"
#include "src/config/monitor_section.h"
#include "src/config/objective_section.h"
#include "src/config/offload_section.h"
#include "src/config/optimizer_section.h"
#include "src/config/decay_groups.h"
#include "src/config/schedule_section.h"
#include "src/config/unsupported_keys.h"

namespace strata {

const char* OptimizerOverlapName(OptimizerOverlap o) {
  switch (o) {
    case OptimizerOverlap::kNone: return "none";
    case OptimizerOverlap::kForward: return "forward";
    case OptimizerOverlap::kSpeculative: return "speculative";
    case OptimizerOverlap::kDelayed: return "delayed";
  }
  return "?";
}

const char* OffloadDeviceName(Tier d) {
  return d == Tier::kDevice ? "none" : d == Tier::kCpu ? "cpu" : "nvme";
}

namespace {

constexpr int64_t kMaxI = int64_t{1} << 50;

// How the optimizer's state is stored: Adam's moments, the master, the gradient accumulators.
Status ParseStateStorage(JsonReader& s, TrainConfig* c) {
  std::string adam_states = AdamStatesSetting(*c);
  STRATA_RETURN_IF_ERROR(s.Choice("adam_states", &adam_states, {"fp32", "bf16", "8bit"}));
  SetAdamStates(c, adam_states);
  std::string master = c->split_master ? "split" : "fp32";
  STRATA_RETURN_IF_ERROR(s.Choice("master_weights", &master, {"fp32", "split"}));
  c->split_master = master == "split";
  std::string accumulator = c->grad_accum_dtype == DType::kBF16 ? "bf16" : "fp32";
  STRATA_RETURN_IF_ERROR(s.Choice("gradient_accumulator", &accumulator, {"fp32", "bf16"}));
  c->grad_accum_dtype = accumulator == "bf16" ? DType::kBF16 : DType::kF32;
  return Status();
}

Status ParseStrata(JsonReader& root, TrainConfig* c) {
  STRATA_ASSIGN_OR_RETURN(JsonReader s, root.Child("strata"));
  STRATA_RETURN_IF_ERROR(s.Int("steps", &c->steps, 0, kMaxI));
  int64_t seed = static_cast<int64_t>(c->seed);
  STRATA_RETURN_IF_ERROR(s.Int("seed", &seed, 0, kMaxI));
  c->seed = static_cast<uint64_t>(seed);
  STRATA_RETURN_IF_ERROR(s.Int("eval_interval", &c->eval_interval, 0, kMaxI));
  STRATA_RETURN_IF_ERROR(s.Int("eval_batches", &c->eval_batches, 1, 100000));
  STRATA_RETURN_IF_ERROR(s.Bool("verify_checksums", &c->verify_checksums));
  STRATA_RETURN_IF_ERROR(s.Int("debug_overflow_step", &c->debug_overflow_step, -1, kMaxI));
  STRATA_RETURN_IF_ERROR(s.Int("save_interval", &c->save_interval, 0, kMaxI));
  STRATA_RETURN_IF_ERROR(s.Int("keep_checkpoints", &c->keep_checkpoints, 0, 1000000));
  STRATA_RETURN_IF_ERROR(s.Int("comm_timeout_s", &c->comm_timeout_s, 1, 86400));
  STRATA_RETURN_IF_ERROR(ParseNoDecay(s, c));
  STRATA_RETURN_IF_ERROR(s.Int("max_skipped_steps", &c->max_skipped_steps, 0, 1 << 30));
  STRATA_RETURN_IF_ERROR(s.String("device", &c->device));
  STRATA_RETURN_IF_ERROR(s.Bool("allow_unsupported", &c->allow_unsupported));
  if (s.IsAuto("resident_blocks")) {
    s.Touch("resident_blocks");
  } else {
    STRATA_RETURN_IF_ERROR(s.Int("resident_blocks", &c->resident_blocks, 0, 1 << 20));
  }
  if (s.IsAuto("host_blocks")) {
    s.Touch("host_blocks");
    c->host_blocks = -1;
  } else {
    STRATA_RETURN_IF_ERROR(s.Int("host_blocks", &c->host_blocks, 0, 1 << 20));
  }
  if (s.Has("recompute")) {  // else what activation_checkpointing (or the default, auto) said
    std::string recompute = "auto";
    STRATA_RETURN_IF_ERROR(s.Choice("recompute", &recompute, {"auto", "always", "never"}));
    c->recompute = recompute == "auto" ? Recompute::kAuto : recompute == "always" ? Recompute::kAlways : Recompute::kNever;
  }
  STRATA_RETURN_IF_ERROR(ParseSchedule(s, c));
  std::string overlap = OptimizerOverlapName(c->optimizer_overlap);
  STRATA_RETURN_IF_ERROR(s.Choice("optimizer_overlap", &overlap, {"none", "forward", "speculative", "delayed"}));
  c->optimizer_overlap = overlap == "none"          ? OptimizerOverlap::kNone
                         : overlap == "forward"     ? OptimizerOverlap::kForward
                         : overlap == "speculative" ? OptimizerOverlap::kSpeculative
                                                    : OptimizerOverlap::kDelayed;
  if (s.IsAuto("speculation_budget_mb")) {
    s.Touch("speculation_budget_mb");
  } else {
    STRATA_RETURN_IF_ERROR(s.Int("speculation_budget_mb", &c->speculation_budget_mb, 0, int64_t{1} << 40));
  }
  STRATA_RETURN_IF_ERROR(s.Int("delayed_update_from", &c->delayed_update_from, 0, int64_t{1} << 62));
  STRATA_RETURN_IF_ERROR(s.Int("optimizer_threads", &c->optimizer_threads, 0, 4096));
  STRATA_RETURN_IF_ERROR(ParseStateStorage(s, c));
  if (s.IsAuto("device_accumulation")) {
    s.Touch("device_accumulation");
  } else if (s.Has("device_accumulation")) {
    bool on = false;
    if (Status st = s.Bool("device_accumulation", &on); !st.ok())
      return InvalidArgument("{} (or \"auto\", the default)", st.message());
    c->device_accumulation = on ? 1 : 0;
  }
  int64_t device_memory = 0;
  if (s.IsAuto("device_memory")) {
    s.Touch("device_memory");
  } else {
    STRATA_RETURN_IF_ERROR(s.Int("device_memory", &device_memory, 1 << 20, kMaxI));
  }
  c->device_memory = static_cast<uint64_t>(device_memory);
  STRATA_RETURN_IF_ERROR(
      s.Choice("debug_crash_in_save", &c->debug_crash_in_save, {"", "shard_partly_written", "before_rename", "before_latest"}));
  STRATA_RETURN_IF_ERROR(s.Int("debug_crash_signal", &c->debug_crash_signal, 1, 31));

  STRATA_RETURN_IF_ERROR(ParseModelSection(s, c));
  if (s.Has("lora")) {  // after the model, which strata.model.from may have replaced
    STRATA_ASSIGN_OR_RETURN(JsonReader l, s.Child("lora"));
    STRATA_RETURN_IF_ERROR(ParseLora(l, &c->model.lora));
    l.UnusedKeys(&c->warnings);
    if (Status v = model::Validate(c->model); !v.ok()) return v;
  }
  STRATA_RETURN_IF_ERROR(ParseDataSection(s, c));
  STRATA_RETURN_IF_ERROR(ParseObjective(s, c));  // after the data, which it checks
  s.UnusedKeys(&c->warnings);
  return Status();
}

// Batch keys: "auto" or absent leaves them to ResolveBatch (src/settle: it knows the world size).
Status ParseBatch(JsonReader& root, TrainConfig* c) {
  auto batch_key = [&](const char* key, int64_t* value, std::optional<int64_t>* set) -> Status {
    if (root.IsAuto(key) || !root.Has(key)) {
      root.Touch(key);
      return Status();
    }
    STRATA_RETURN_IF_ERROR(root.Int(key, value, 1, 1 << 24));
    *set = *value;
    return Status();
  };
  STRATA_RETURN_IF_ERROR(batch_key("train_micro_batch_size_per_gpu", &c->micro_batch, &c->micro_batch_set));
  STRATA_RETURN_IF_ERROR(batch_key("gradient_accumulation_steps", &c->grad_accum, &c->grad_accum_set));
  STRATA_RETURN_IF_ERROR(batch_key("train_batch_size", &c->train_batch, &c->train_batch_set));
  c->train_batch = c->micro_batch * c->grad_accum;  // provisional (one rank), until ResolveBatch
  STRATA_RETURN_IF_ERROR(root.Int("sequence_parallel_size", &c->sequence_parallel, 1, 1 << 16));
  if (!root.Has("gradient_clipping"))
    c->notes.push_back("gradient_clipping: not set, so 1.0 (DeepSpeed 0.19.8's default); 0 turns clipping off");
  STRATA_RETURN_IF_ERROR(root.Double("gradient_clipping", &c->gradient_clipping, 0, 1e9));
  STRATA_RETURN_IF_ERROR(root.Int("steps_per_print", &c->steps_per_print, 1, kMaxI));
  return root.Bool("wall_clock_breakdown", &c->wall_clock_breakdown);
}

// DeepSpeed's tensor_parallel section (Note [Tensor parallel]): autotp_size, 0 or 1 off. How
// DeepSpeed would partition the layers (its presets, custom rules, the vocabulary-parallel
// head) changes how the same sums are computed, not what is trained: those keys are notes.
Status ParseTensorParallel(JsonReader& root, TrainConfig* c) {
  STRATA_ASSIGN_OR_RETURN(JsonReader tp, root.Child("tensor_parallel"));
  STRATA_RETURN_IF_ERROR(tp.Int("autotp_size", &c->tensor_parallel, 0, 1 << 16));
  c->tensor_parallel = std::max<int64_t>(1, c->tensor_parallel);
  STRATA_ASSIGN_OR_RETURN(JsonReader inner, tp.Child("tp"));
  int64_t tp_size = 1;
  STRATA_RETURN_IF_ERROR(inner.Int("tp_size", &tp_size, 1, 1 << 16));
  if (tp_size != 1 && tp_size != c->tensor_parallel)  // as DeepSpeed's _apply_autotp_partitioning
    return InvalidArgument("tensor_parallel.tp.tp_size ({}) does not match tensor_parallel.autotp_size ({})", tp_size,
                           c->tensor_parallel);
  inner.UnusedKeys(&c->warnings);
  for (const char* key : {"partition_config", "preset_model", "vocab_parallel_lm_head", "vocab_parallel_ce_backend",
                          "tp_overlap_comm", "dtype", "keep_module_on_host", "injection_policy_tuple"}) {
    if (!tp.Has(key)) continue;
    tp.Touch(key);
    c->notes.push_back(fmt::format("tensor_parallel.{}: accepted, not used: Strata splits every layer's heads and MLP "
                                   "width its own way, with the same sums (Note [Tensor parallel])", key));
  }
  tp.UnusedKeys(&c->warnings);
  return Status();
}

// bf16 / fp16 and DeepSpeed's loss-scale keys. bf16.enabled "auto" waits for ResolvePrecision.
Status ParsePrecision(JsonReader& root, TrainConfig* c) {
  STRATA_ASSIGN_OR_RETURN(JsonReader bf16, root.Child("bf16"));
  STRATA_ASSIGN_OR_RETURN(JsonReader fp16, root.Child("fp16"));
  bool bf16_on = false, fp16_on = false;
  if (bf16.IsAuto("enabled")) {
    bf16.Touch("enabled");  // decided by ResolvePrecision, once the device is known
    c->bf16_auto = true;
  } else if (bf16.Has("enabled") && !bf16.Raw("enabled")->is_boolean() && !bf16.Raw("enabled")->is_null()) {
    return InvalidArgument("bf16.enabled: expected true, false or \"auto\", got {}", bf16.Raw("enabled")->dump());
  } else {
    STRATA_RETURN_IF_ERROR(bf16.Bool("enabled", &bf16_on));
  }
  STRATA_RETURN_IF_ERROR(fp16.Bool("enabled", &fp16_on));
  if (bf16_on && fp16_on) return InvalidArgument("bf16.enabled and fp16.enabled are both true: choose one");
  c->compute_dtype = bf16_on ? DType::kBF16 : fp16_on ? DType::kF16 : DType::kF32;
  LossScaleConfig& ls = c->loss_scale;
  STRATA_RETURN_IF_ERROR(fp16.Double("loss_scale", &ls.static_scale, 0, 1e30));
  STRATA_RETURN_IF_ERROR(fp16.Int("initial_scale_power", &ls.initial_scale_power, 0, 64));
  STRATA_RETURN_IF_ERROR(fp16.Int("loss_scale_window", &ls.window, 1, kMaxI));
  STRATA_RETURN_IF_ERROR(fp16.Int("hysteresis", &ls.hysteresis, 1, 1000));
  STRATA_RETURN_IF_ERROR(fp16.Double("min_loss_scale", &ls.min_scale, 1e-30, 1e30));
  fp16.Touch("auto_cast");
  bf16.UnusedKeys(&c->warnings);
  fp16.UnusedKeys(&c->warnings);
  return Status();
}

Status ParseZero(JsonReader& root, TrainConfig* c) {
  STRATA_ASSIGN_OR_RETURN(JsonReader zero, root.Child("zero_optimization"));
  if (!zero.Has("stage")) {  // DeepSpeed 0.19.8: ZeRO off unless asked for
    c->zero_stage = 0;
    c->notes.push_back("zero_optimization.stage: not set, so 0 (DeepSpeed 0.19.8's default: nothing sharded)");
  }
  STRATA_RETURN_IF_ERROR(zero.Int("stage", &c->zero_stage, 0, 3));
  STRATA_RETURN_IF_ERROR(ParseOffloadSections(zero, c));
  STRATA_RETURN_IF_ERROR(zero.Int("sub_group_size", &c->sub_group_size, 1, kMaxI));
  STRATA_RETURN_IF_ERROR(zero.Int("stage3_prefetch_bucket_size", &c->prefetch_bucket_size, 0, kMaxI));
  STRATA_RETURN_IF_ERROR(zero.Ignored("stage3_max_live_parameters", false,
                                       "one block is gathered at a time (two with a tied embedding)", &c->notes));
  for (const char* k : {"stage3_max_reuse_distance", "overlap_comm", "contiguous_gradients",
                        "reduce_bucket_size", "allgather_bucket_size", "reduce_scatter", "allgather_partitions",
                        "stage3_param_persistence_threshold", "stage3_gather_16bit_weights_on_model_save",
                        "round_robin_gradients"})
    zero.Touch(k);
  zero.UnusedKeys(&c->warnings);
  if (c->offload_param.device != Tier::kDevice && c->zero_stage != 3)
    return InvalidArgument("zero_optimization.offload_param: needs stage 3 (stage is {})", c->zero_stage);
  return Status();
}

Status ParseAio(JsonReader& root, TrainConfig* c) {
  STRATA_ASSIGN_OR_RETURN(JsonReader aio, root.Child("aio"));
  STRATA_RETURN_IF_ERROR(aio.Int("block_size", &c->aio.block_size, 4096, 1 << 30));
  if (c->aio.block_size % 4096) return InvalidArgument("aio.block_size: {} is not a multiple of 4096", c->aio.block_size);
  STRATA_RETURN_IF_ERROR(aio.Int("queue_depth", &c->aio.queue_depth, 1, 4096));
  const struct {
    const char* key;
    bool boolean;
    const char* why;
  } kIgnored[] = {
      {"thread_count", false, "one I/O thread per rank drives io_uring; aio.queue_depth sets the requests in flight"},
      {"single_submit", true, "requests are always submitted in batches"},
      {"overlap_events", true, "submission and completion always overlap"}};
  for (const auto& k : kIgnored) STRATA_RETURN_IF_ERROR(aio.Ignored(k.key, k.boolean, k.why, &c->notes));
  aio.UnusedKeys(&c->warnings);
  return Status();
}

// DeepSpeed's activation_checkpointing section: checkpointing asked for, i.e. recompute per
// block (strata.recompute, read later, overrides it). Its tuning keys have no effect here.
Status ParseActivationCheckpointing(JsonReader& root, TrainConfig* c) {
  if (!root.Has("activation_checkpointing")) return Status();
  STRATA_ASSIGN_OR_RETURN(JsonReader ac, root.Child("activation_checkpointing"));
  c->recompute = Recompute::kAlways;
  c->notes.push_back("activation_checkpointing: each block recomputed from its saved input in backward "
                     "(strata.recompute \"always\"; \"auto\" would keep the activations where they fit)");
  bool cpu = false;
  STRATA_RETURN_IF_ERROR(ac.Bool("cpu_checkpointing", &cpu));
  if (cpu) {
    c->block_inputs = BlockInputsAt::kHost;
    c->notes.push_back("activation_checkpointing.cpu_checkpointing: the saved block inputs wait in host memory "
                       "(strata.block_inputs \"host\", which strata.block_inputs overrides)");
  }
  for (const char* k : {"partition_activations", "contiguous_memory_optimization", "number_checkpoints",
                        "synchronize_checkpoint_boundary", "profile"})
    ac.Touch(k);
  ac.UnusedKeys(&c->warnings);
  return Status();
}

}  // namespace

// The delayed update parks each block's new working weights until the next step has read
// the old ones from NVMe: weights kept anywhere else would be overwritten under the compute.
static Status CheckDelayedUpdate(const TrainConfig& c) {
  if (c.optimizer_overlap != OptimizerOverlap::kDelayed) return Status();
  if (c.offload_param.device != Tier::kNvme)
    return InvalidArgument("strata.optimizer_overlap \"delayed\": needs zero_optimization.offload_param.device "
                           "\"nvme\" (it is \"{}\"): the next step reads the old working weights from NVMe while "
                           "the update makes the new ones", OffloadDeviceName(c.offload_param.device));
  if (c.resident_blocks > 0)
    return InvalidArgument("strata.optimizer_overlap \"delayed\": strata.resident_blocks must be 0 or \"auto\" (it is "
                           "{}): a resident block's weights are updated in place", c.resident_blocks);
  if (c.model.lora.r > 0)
    return InvalidArgument("strata.optimizer_overlap \"delayed\": not with strata.lora (the adapters are updated in "
                           "place in host memory)");
  return Status();
}

// strata.host_blocks moves blocks' state from NVMe to host memory; with the optimizer states
// anywhere else it would mean nothing, and a user who set it expects it to.
static Status CheckHostBlocks(const TrainConfig& c) {
  if (c.host_blocks <= 0 || c.offload_optimizer.device == Tier::kNvme) return Status();  // (or auto)
  return InvalidArgument("strata.host_blocks ({}) keeps the first blocks' state in host memory "
                         "instead of NVMe: it needs zero_optimization.offload_optimizer.device \"nvme\" (it is \"{}\")",
                         c.host_blocks, OffloadDeviceName(c.offload_optimizer.device));
}

// strata.master_weights "split" rebuilds the master from the working weights at every update:
// the update must read the weights it replaces, from the store, before anything else does.
static Status CheckSplitMaster(const TrainConfig& c) {
  if (!c.split_master) return Status();
  if (c.optimizer_overlap != OptimizerOverlap::kNone && c.optimizer_overlap != OptimizerOverlap::kForward)
    return InvalidArgument("strata.master_weights \"split\": needs strata.optimizer_overlap \"forward\" or \"none\" "
                           "(it is \"{}\"): the speculative and delayed updates keep two versions of the weights",
                           OptimizerOverlapName(c.optimizer_overlap));
  if (c.model.lora.r > 0)
    return InvalidArgument("strata.master_weights \"split\": not with strata.lora (its adapters' master is small)");
  if (c.resident_blocks > 0)
    return InvalidArgument("strata.master_weights \"split\": strata.resident_blocks must be 0 (it is {}): a resident "
                           "block's working weights are on the device, where the CPU update cannot read them",
                           c.resident_blocks);
  return Status();
}

// LAMB's trust ratios come from every tensor's norms, Muon's updates from whole matrices, before
// any of them is updated (Note [LAMB trust ratio], Note [Muon]): no update can start during the
// backward, or run beside the next step.
static Status CheckWholeTensorOptimizers(const TrainConfig& c) {
  if (c.optimizer != OptimizerKind::kLamb && c.optimizer != OptimizerKind::kMuon) return Status();
  const bool lamb = c.optimizer == OptimizerKind::kLamb;
  if (c.optimizer_overlap != OptimizerOverlap::kNone && c.optimizer_overlap != OptimizerOverlap::kForward)
    return InvalidArgument("strata.optimizer_overlap \"{}\": not with optimizer.type \"{}\", whose update needs {} "
                           "first; use \"forward\" or \"none\"", OptimizerOverlapName(c.optimizer_overlap),
                           lamb ? "Lamb" : "Muon", lamb ? "every tensor's norms" : "every whole matrix");
  if (lamb) return Status();
  if (c.model.lora.enabled())
    return InvalidArgument("optimizer.type \"Muon\": not with strata.lora yet (its adapters would take Muon one "
                           "factor at a time); use \"AdamW\" for adapters");
  if (model::IsMoe(c.model))
    return InvalidArgument("optimizer.type \"Muon\": not for mixtures of experts yet (transformers holds a layer's "
                           "experts as one 3-D tensor, which Muon would orthogonalise expert by expert)");
  if (!c.adam_w_mode && c.weight_decay > 0)
    return InvalidArgument("optimizer.params.adam_w_mode: false (L2 decay in Muon's AdamW half) is not supported with "
                           "weight_decay {}; leave it out", c.weight_decay);
  if (c.schedule.kind == LrScheduleKind::kOneCycle && c.schedule.cycle_momentum)
    return InvalidArgument("scheduler.params.cycle_momentum: true (OneCycle's default) would cycle Muon's momentum "
                           "as if it were Adam's beta1; set it false with optimizer.type \"Muon\"");
  return Status();
}

Status CheckKeys(const TrainConfig& c) {
  if (c.fuse_micro_batches && c.schedule_setting == StepSchedule::kMicroBatch)
    return InvalidArgument("strata.fuse_micro_batches: needs the layer-major schedule, but strata.schedule is "
                           "\"micro_batch\"; set it to \"layer_major\" or \"auto\"");
  if (c.fuse_micro_batches && c.model.lora.dropout > 0)
    return InvalidArgument("strata.fuse_micro_batches: not with strata.model.lora.dropout {} (its masks are drawn per "
                           "micro-batch); set the dropout to 0 or fuse_micro_batches to false", c.model.lora.dropout);
  if (c.fuse_micro_batches && c.model.moe.aux_loss_coef > 0)
    return InvalidArgument("strata.fuse_micro_batches: not with strata.model.moe.aux_loss_coef {} (the router's "
                           "load-balancing loss is taken per micro-batch); set one of them off", c.model.moe.aux_loss_coef);
  if (c.block_inputs && *c.block_inputs != BlockInputsAt::kDevice && c.recompute == Recompute::kNever)
    return InvalidArgument("strata.block_inputs \"{}\": needs recomputation (strata.recompute \"never\" keeps every "
                           "block's activations where they were made, which moving its input would not free)",
                           BlockInputsName(*c.block_inputs));
  if (c.block_inputs == BlockInputsAt::kNvme && !HasSwapFolder(c))
    return InvalidArgument("strata.block_inputs \"nvme\": needs a swap folder, but neither "
                           "zero_optimization.offload_optimizer.device nor offload_param.device is \"nvme\"");
  STRATA_RETURN_IF_ERROR(CheckDelayedUpdate(c));
  STRATA_RETURN_IF_ERROR(CheckHostBlocks(c));
  STRATA_RETURN_IF_ERROR(CheckSplitMaster(c));
  STRATA_RETURN_IF_ERROR(CheckWholeTensorOptimizers(c));
  STRATA_RETURN_IF_ERROR(CheckNoDecay(c));
  if (model::IsMoe(c.model) && c.optimizer_overlap == OptimizerOverlap::kSpeculative)
    return InvalidArgument("strata.optimizer_overlap \"speculative\": not for mixtures of experts (which experts an "
                           "update skips is known only once every rank's routing is, after the backward); use "
                           "\"forward\", \"none\" or \"delayed\"");
  if (c.moments_8bit && c.optimizer_overlap == OptimizerOverlap::kSpeculative)  // (its backups index fixed bytes)
    return InvalidArgument("strata.adam_states \"8bit\": not with strata.optimizer_overlap \"speculative\" (its "
                           "backups hold fp32 or bf16 moments); use \"forward\", \"none\" or \"delayed\"");
  return Status();
}

std::string AdamStatesSetting(const TrainConfig& c) { return c.moments_8bit ? "8bit" : DTypeName(c.adam_states); }

void SetAdamStates(TrainConfig* c, const std::string& setting) {
  c->adam_states = setting == "bf16" ? DType::kBF16 : DType::kF32;
  c->moments_8bit = setting == "8bit";
}

StatusOr<TrainConfig> ParseTrainConfig(const std::string& text, const std::string& origin) {
  STRATA_ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonText(text, origin));
  if (!j.is_object()) return InvalidArgument("{}: the top level must be a JSON object", origin);
  // DeepSpeed's legacy form "zero_optimization": true|false means stage 1|0.
  if (j.contains("zero_optimization") && j["zero_optimization"].is_boolean())
    j["zero_optimization"] = {{"stage", j["zero_optimization"].get<bool>() ? 1 : 0}};
  TrainConfig c;
  JsonReader root(&j, "");
  // In reading order: `config check` lists the "auto"s in that order.
  for (Status (*section)(JsonReader&, TrainConfig*) :
       {ParseBatch, ParseTensorParallel, ParsePrecision, ParseOptimizer, ParseScheduler, ParseZero, ParseAio, ParseActivationCheckpointing,
        ParseMonitors, ParseCheckpointSection, ParseStrata})
    if (Status s = section(root, &c); !s.ok()) return s.WithContext(origin);
  if (c.schedule.total_num_steps == 0) c.schedule.total_num_steps = c.steps;
  if (Status s = CheckKeys(c); !s.ok()) return s.WithContext(origin);
  root.UnusedKeys(&c.warnings);
  if (Status s = CheckUnsupportedKeys(j, c.allow_unsupported, &c.warnings, &c.notes); !s.ok())
    return s.WithContext(origin);
  for (AutoValue a : root.autos()) {
    if (a.path == "scheduler.params.warmup_max_lr") a.reason = "the optimizer's lr";
    if (a.path == "scheduler.params.warmup_num_steps")
      a.reason = "no warmup: what the Hugging Face Trainer fills in unless warmup_steps is set";
    if (a.path == "scheduler.params.total_num_steps") {
      a.value = std::to_string(c.schedule.total_num_steps);
      a.reason = "the run's steps (strata.steps)";
    }
    if (a.path == "fp16.enabled") a.reason = "off unless set (bf16.enabled \"auto\" picks bf16 where it is fast)";
    c.autos.push_back(a);
  }
  return c;
}

StatusOr<std::string> ComposeConfigText(const std::string& path, const std::string& default_text,
                                        const std::string& strata_file, const std::vector<std::string>& sets,
                                        std::string* origin) {
  auto read = [](const std::string& p) -> StatusOr<std::string> {
    StatusOr<std::string> text = ReadInputFile(p, kMaxConfigFileBytes, "a config file");
    if (!text.ok()) return text.status().WithContext("config file");
    return text;
  };
  auto parse = [](const std::string& text, const std::string& name) { return ParseJsonText(text, name); };
  std::string text = default_text;
  if (!path.empty()) {
    STRATA_ASSIGN_OR_RETURN(text, read(path));
    *origin = path;
  }
  STRATA_ASSIGN_OR_RETURN(nlohmann::json j, parse(text, *origin));
  std::string second = strata_file;
  if (second.empty() && j.is_object() && j.contains("strata") && j["strata"].is_string()) {
    second = j["strata"].get<std::string>();
    const std::filesystem::path base = std::filesystem::path(path).parent_path();
    if (!second.empty() && second[0] != '/' && !base.empty()) second = (base / second).string();
  }
  if (!second.empty()) {
    STRATA_ASSIGN_OR_RETURN(std::string stext, read(second));
    STRATA_ASSIGN_OR_RETURN(nlohmann::json sj, parse(stext, second));
    // The second file is either the section itself or a config holding it under "strata".
    if (sj.is_object() && sj.contains("strata") && sj["strata"].is_object()) sj = sj["strata"];
    if (!sj.is_object()) return InvalidArgument("{}: the strata section must be a JSON object", second);
    j["strata"] = sj;
    *origin += " + " + second;
  }
  return ApplyOverrides(j.dump(), sets);
}

StatusOr<TrainConfig> LoadTrainConfig(const std::string& path) {
  std::string origin = path;
  STRATA_ASSIGN_OR_RETURN(std::string text, ComposeConfigText(path, "", "", {}, &origin));
  return ParseTrainConfig(text, origin);
}

StatusOr<std::string> ApplyOverrides(const std::string& text, const std::vector<std::string>& sets) {
  if (sets.empty()) return text;
  STRATA_ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonText(text, "config"));
  if (!j.is_object()) return InvalidArgument("config: the top level must be a JSON object to --set keys in it");
  for (const std::string& kv : sets) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return InvalidArgument("--set {}: expected key.path=value", kv);
    const std::string key = kv.substr(0, eq), raw = kv.substr(eq + 1);
    StatusOr<nlohmann::json> parsed = ParseJsonText(raw, "--set " + key);
    if (!parsed.ok() && parsed.status().message().find("nested deeper") != std::string::npos) return parsed.status();
    nlohmann::json value = parsed.ok() ? *std::move(parsed) : nlohmann::json(raw);  // a bare word is a string
    nlohmann::json* node = &j;
    size_t start = 0;
    while (true) {
      const size_t dot = key.find('.', start);
      const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      if (dot == std::string::npos) {
        (*node)[part] = value;
        break;
      }
      nlohmann::json& next = (*node)[part];
      if (next.is_null()) next = nlohmann::json::object();
      if (!next.is_object()) return InvalidArgument("--set {}: '{}' is not an object", kv, key.substr(0, dot));
      node = &next;
      start = dot + 1;
    }
  }
  // A --set key or value is raw bytes: invalid UTF-8 becomes U+FFFD (dump would throw).
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace strata
