// TrainConfig: everything a training run needs, parsed once from a DeepSpeed-style
// ds_config.json (the keys DeepSpeed users know, same meaning) plus Strata's own section
// under "strata" (model, data, run length, prefetch). Parsed into typed structs and passed
// explicitly; nothing reads the JSON later.
//
// Errors name the key path and the allowed range ("zero_optimization.stage: 4 is out of
// range [0, 3]"); keys Strata does not use are reported by name as warnings.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/data/data_config.h"
#include "src/config/json_reader.h"
#include "src/model/dpo.h"
#include "src/model/model_config.h"
#include "strata/dtype.h"
#include "strata/status.h"

#include "strata/tier.h"

namespace strata {

// offload_param / offload_optimizer "device": "none" (Tier::kDevice), "cpu" or "nvme".
const char* OffloadDeviceName(Tier d);
// Where offload_optimizer.device puts the master weights and Adam's moments, in words: off the
// host "none" keeps them in host memory like "cpu" (the CPU Adam updates them in place; there
// is no device-resident optimizer), and the start-up line and `strata estimate` say so.
std::string OptimizerStatesWhere(Tier d, bool host_device);

struct OffloadConfig {
  Tier device = Tier::kDevice;
  std::string nvme_path = "/var/tmp/strata";
  bool pin_memory = true;
  int64_t buffer_count = 5;  // pinned buffers, each sized by the largest block's shard
};

struct AioConfig {
  int64_t block_size = 1 << 20;  // bytes per request
  int64_t queue_depth = 32;     // requests in flight (one I/O thread per rank drives io_uring)
};

struct LossScaleConfig {
  double static_scale = 0;       // fp16.loss_scale: 0 = dynamic
  int initial_scale_power = 16;  // dynamic: starts at 2^power
  int64_t window = 1000;         // steps without overflow before doubling
  int hysteresis = 2;            // overflows tolerated before halving
  double min_scale = 1;
};

enum class LrScheduleKind { kConstant, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR, kOneCycle, kLRRangeTest };

// scheduler.params.warmup_type: how the warmup rises (DeepSpeed's default: log).
enum class WarmupType { kLog, kLinear };

// The defaults are DeepSpeed's, except total_num_steps (DeepSpeed requires it).
struct ScheduleConfig {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  double warmup_min_lr = 0;
  double warmup_max_lr = 1e-3;      // WarmupLR / WarmupDecayLR peak (WarmupLR: the optimizer's lr)
  bool warmup_max_is_group_lr = false;  // WarmupLR without warmup_max_lr: each group's own lr (Muon's two)
  int64_t warmup_num_steps = 1000;  // 0 (which DeepSpeed refuses): no warmup
  WarmupType warmup_type = WarmupType::kLog;
  int64_t total_num_steps = 0;      // WarmupDecayLR / WarmupCosineLR (defaults to the run's steps)
  double cos_min_ratio = 1e-4;      // WarmupCosineLR: final lr / peak
  double warmup_min_ratio = 0;      // WarmupCosineLR: first lr / peak
  // LRRangeTest: min_lr x (1 + step_rate x interval), interval = iterations / step_size
  // (floored with staircase).
  double range_min_lr = 1e-3;
  int64_t range_step_size = 2000;
  double range_step_rate = 1.0;
  bool range_staircase = false;
  // OneCycle: min -> max lr over the first half cycle, back over the second, then decay; with
  // cycle_momentum, Adam's beta1 runs max -> min -> max the other way and beta2 is 0.99.
  double cycle_min_lr = 0, cycle_max_lr = 0;  // required, as DeepSpeed's constructor requires them
  double decay_lr_rate = 0;
  double cycle_first_step_size = 2000;
  double cycle_second_step_size = -1;  // -1: the first's
  int64_t cycle_first_stair_count = 0;
  int64_t cycle_second_stair_count = -1;  // -1: the first's
  double decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8, cycle_max_mom = 0.9, decay_mom_rate = 0;
};

// optimizer.type: which optimizer the CPU update runs (each a row of src/engine/optimizer_rule.h).
enum class OptimizerKind { kAdam, kLion, kAdagrad, kLamb, kMuon };

// optimizer.params.ns_method of "Muon": DeepSpeed's Newton-Schulz iterations ("gram", "standard"),
// or torch.optim.Muon's ("torch", Strata's: its bf16 iteration, and its lr adjustment where
// DeepSpeed scales the update); Note [Muon] in src/engine/update/muon_matrices.h.
enum class MuonNs { kGram, kStandard, kTorch };
// "Muon": DeepSpeed 0.19.8's MuonWithAuxAdam. The hidden matrices take Muon with these; every
// other parameter the AdamW half with the optimizer's lr, betas and eps. Both decay by the
// optimizer's weight_decay (one key in DeepSpeed).
struct MuonConfig {
  double lr = 0.02, momentum = 0.95;
  MuonNs ns = MuonNs::kGram;
};

// tensorboard / csv_monitor: DeepSpeed's monitor sections (src/monitor), with its defaults:
// the files go to output_path/job_name ("" joins to the working folder's job_name).
struct MonitorConfig {
  bool enabled = false;
  std::string output_path;
  std::string job_name = "DeepSpeedJobName";
};
// wandb: DeepSpeed's Weights & Biases section (src/monitor/wandb_sink.h), with its defaults; an
// empty group or team is DeepSpeed's None.
struct WandbConfig {
  bool enabled = false;
  std::string group, team;
  std::string project = "deepspeed";
};

// strata.optimizer_overlap: when the CPU optimizer's step runs.
enum class OptimizerOverlap {
  kNone,     // after the backward, the step waits for it (the plain schedule)
  kForward,  // on its own thread, block by block; the next forward of block i waits only for block i
  // as kForward, and besides each block is updated during the backward as soon as its gradient
  // is final, assuming no clipping and no overflow; rolled back (and redone) when that was wrong
  kSpeculative,
  // ZeRO-Offload's one-step delayed update (opt-in; changes the arithmetic): the update of step
  // s runs during step s+1, whose forward and backward still use the weights from before it
  // (Note [Delayed update], src/engine/update/delayed_update.cc). Needs the working weights on NVMe, no LoRA.
  kDelayed,
};
const char* OptimizerOverlapName(OptimizerOverlap o);

// strata.schedule: the order in which a step's micro-batches pass its blocks.
enum class StepSchedule {
  kAuto,        // layer-major where it saves fetches (ResolveSchedule), else micro-batch-major
  kMicroBatch,  // each micro-batch through every block, forward then backward, before the next
  // every micro-batch through a block before the next block (Note [Layer-major schedule],
  // src/engine/engine_layer_major.cc): each block's weights are fetched once per forward and
  // once per backward of the whole step, at the price of every micro-batch's block inputs
  kLayerMajor,
};
const char* StepScheduleName(StepSchedule s);

// strata.block_inputs: where the saved block inputs wait for the backward.
enum class BlockInputsAt { kDevice, kHost, kNvme };
const char* BlockInputsName(BlockInputsAt at);
struct TrainConfig;
struct SettledConfig;
// Where the block inputs wait as written, where that applies: not with kept activations (no
// input is saved alone); "host" on the host device is where they are made; unset: device.
BlockInputsAt WrittenBlockInputs(const SettledConfig& c, bool host_device);

// strata.objective: what a step's loss is (Note [DPO] for preference pairs).
enum class Objective { kLanguageModel, kDpo };

// strata.expert_fetch: which experts of a sparse layer a visit of its block reads from the
// working weights' tier (Note [Expert-aware fetching]).
enum class ExpertFetch {
  kRouted,  // those some token of the visit routed to; the rest of the block whole
  kAll,     // every expert, the whole block
};
const char* ExpertFetchName(ExpertFetch f);

// strata.expert_update: which experts of a sparse layer the update steps (Note [Expert updates]).
enum class ExpertUpdate {
  kAll,     // every expert, every step, with the step count of the run: transformers 5 stores a
            // layer's experts as one fused parameter, and torch.optim.AdamW steps it whole
  kChosen,  // only those some token of the step chose, each with a step count of its own, as
            // AdamW steps per-expert parameters (transformers 4) whose gradient is None
};
const char* ExpertUpdateName(ExpertUpdate u);

// strata.recompute: whether backward recomputes each block from its saved input.
enum class Recompute {
  kAuto,    // keep every block's activations when the estimate says they fit, else recompute
  kAlways,  // activation checkpointing per block (DeepSpeed's activation_checkpointing section)
  kNever,   // keep every block's activations (autograd's graph) until its backward
};

struct TrainConfig {
  // Batch. The three DeepSpeed keys as written (absent or "auto" = unset); ResolveBatch
  // derives the missing ones with DeepSpeed's rule
  //   train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps * world.
  std::optional<int64_t> train_batch_set, micro_batch_set, grad_accum_set;
  // sequence_parallel_size (DeepSpeed Ulysses, Note [Ulysses]): each row's positions split over
  // groups of this many ranks, which share one micro-batch; the batch rule counts world / it
  // data ranks, as DeepSpeed's does. The ranks stay ZeRO ranks for the weights.
  int64_t sequence_parallel = 1;
  // tensor_parallel.autotp_size (Note [Tensor parallel]): each layer's heads and MLP width split
  // over groups of this many ranks, which share one micro-batch. The batch keys count them as
  // DeepSpeed's DeepSpeedConfig does (every rank but the sequence ranks' shares: world /
  // sequence_parallel_size); the sequences a step reads are micro-batch x accumulation x
  // world / (sequence x tensor). The ranks stay ZeRO ranks for the weights.
  int64_t tensor_parallel = 1;
  int64_t micro_batch = 8;        // train_micro_batch_size_per_gpu
  int64_t grad_accum = 1;         // gradient_accumulation_steps
  int64_t train_batch = 0;        // train_batch_size, known after ResolveBatch
  double gradient_clipping = 1.0; // 0 = off; DeepSpeed 0.19.8 clips at 1.0 when the key is absent
  // Precision.
  DType compute_dtype = DType::kF32;  // bf16.enabled -> kBF16, fp16.enabled -> kF16
  // bf16.enabled "auto": the compute dtype depends on where blocks run, so it stays kF32
  // until ResolvePrecision decides (bf16 on a GPU or a CPU with native bf16, else fp32).
  bool bf16_auto = false;
  std::string precision_reason;   // why compute_dtype is what it is, for the start-up line
  std::string precision_warning;  // set when the choice will be slow here (bf16 forced on a CPU without it)
  LossScaleConfig loss_scale;
  // Optimizer: Adam / AdamW, Lion (lr, betas, weight_decay), Adagrad (lr, eps, weight_decay) or LAMB.
  OptimizerKind optimizer = OptimizerKind::kAdam;
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  bool adam_w_mode = true;        // "AdamW" or Adam with adam_w_mode (decoupled decay)
  bool bias_correction = true;    // optimizer.params.bias_correction: Adam's 1 / (1 - beta^t) factors
  // LAMB (FusedLamb's params): where eps goes, and the trust ratio's clamp (Note [LAMB trust ratio]).
  bool eps_inside_sqrt = false;
  double lamb_min_coeff = 0.01, lamb_max_coeff = 10.0;
  MuonConfig muon;  // "Muon": the matrices' half (lr and friends above: its AdamW half)
  ScheduleConfig schedule;
  // ZeRO.
  int zero_stage = 3;  // a parsed config without zero_optimization.stage: 0, as DeepSpeed 0.19.8
  OffloadConfig offload_param, offload_optimizer;
  int64_t sub_group_size = 1'000'000'000;   // optimizer sub-group, elements
  int64_t prefetch_bucket_size = 50'000'000;  // stage3_prefetch_bucket_size, elements in flight
  AioConfig aio;
  int64_t steps_per_print = 10;
  MonitorConfig tensorboard, csv_monitor;  // DeepSpeed's monitor sections (src/monitor)
  WandbConfig wandb;
  bool wall_clock_breakdown = false;  // print compute / comm / optimizer / exposed I/O per logged step
  // strata.*
  model::ModelConfig model;
  // strata.model.from (or `train --init-from DIR`): the Hugging Face folder the architecture
  // (config.json) and the initial weights come from; "" = none. Checkpoints record it.
  std::string model_from;
  data::DataConfig data;
  int64_t steps = 100;
  uint64_t seed = 1234;
  int64_t eval_interval = 50;      // steps; 0 = no evaluation at all
  int64_t eval_batches = 4;
  bool verify_checksums = true;
  int64_t debug_overflow_step = -1;  // tests: plant an Inf in the gradient at this step (0-based)
  int64_t save_interval = 0;         // strata.save_interval: checkpoint every K steps with --save (0 = at the end only)
  int keep_checkpoints = 2;          // strata.keep_checkpoints: step folders kept (0 = all)
  // checkpoint.use_node_local_storage: each node saves into its own --save folder (src/checkpoint/
  // shared_folder.h finds which ranks share one); false: one folder every rank shares.
  bool node_local_checkpoints = false;
  std::string debug_crash_in_save;   // tests: kill the process at this point of a checkpoint save
  int debug_crash_signal = 9;        // tests: ... with this signal (SIGKILL; a stop signal tests the clean stop)
  // strata.max_skipped_steps: without a dynamic loss scale, this many non-finite steps in a
  // row end the run with an error (0 = never).
  int64_t max_skipped_steps = 3;
  int64_t comm_timeout_s = 120;      // strata.comm_timeout_s: a rank waiting longer on a peer exits with an error
  std::string device = "auto";       // strata.device: "auto" (a GPU when one is usable), "cpu", "cuda", "cuda:N"
  // strata.resident_blocks: off the host, how many blocks (from the first) keep their working
  // weights on the device; -1 ("auto"): all when offload_param is "none", else none.
  int64_t resident_blocks = -1;
  // strata.host_blocks: with offload_optimizer "nvme", how many blocks (from the last) keep
  // their state in host memory instead: optimizer states (master, m, v) and, with the working
  // weights on NVMe, those too (not with the delayed update): their step moves nothing
  // through the disk. -1 ("auto"): as many as the estimate fits within 90% of the host's
  // available memory (settled before the engine is built: src/settle, ResolveHostBlocks).
  int64_t host_blocks = 0;
  OptimizerOverlap optimizer_overlap = OptimizerOverlap::kForward;  // strata.optimizer_overlap
  // strata.speculation_budget_mb: host memory for the speculative updates' backups (what a
  // roll-back restores); blocks are speculated from the last one down while they fit. -1
  // ("auto"): every block.
  int64_t speculation_budget_mb = -1;
  // strata.delayed_update_from: with optimizer_overlap "delayed", the first step whose update
  // is delayed; the updates of the steps before it run as with "forward" (exact), which
  // ZeRO-Offload advises for the first steps of a run, where the weights change fastest.
  int64_t delayed_update_from = 0;
  StepSchedule schedule_setting = StepSchedule::kAuto;  // strata.schedule, as written (settled: SettledConfig)
  // strata.fuse_micro_batches: layer-major, each block runs the step's micro-batches stacked as
  // one batch (the head still one micro-batch at a time): one pass over the block's weights
  // per direction per step instead of one per micro-batch, in fewer and larger matrix
  // products. Equal within rounding, not bitwise (Note [Layer-major schedule]); implies
  // layer-major; not with LoRA dropout (its masks are drawn per micro-batch).
  bool fuse_micro_batches = false;
  // strata.block_inputs: with recompute, where each block's input (its activation checkpoint)
  // waits for the backward (Note [Block inputs in the tiers]): "device" (where it was made),
  // "host" (off the host: copied to host memory after the block's forward, back before its
  // backward), "nvme" (the rank's swap file), "auto" (nullopt: settled by the estimate).
  std::optional<BlockInputsAt> block_inputs;  // (settled: SettledConfig)
  // strata.expert_fetch: with mixtures of experts, whether a visit of a sparse layer's block
  // reads only the routed experts (where the rank reads the block whole itself and it is not
  // resident on the device) or every expert.
  ExpertFetch expert_fetch = ExpertFetch::kRouted;
  // strata.expert_update: with mixtures of experts, whether the update steps every expert (as
  // AdamW steps transformers 5's fused expert tensors) or only the chosen ones.
  ExpertUpdate expert_update = ExpertUpdate::kAll;
  // strata.objective (objective_section.cc): the step's loss, the language model's
  // cross-entropy or DPO over preference pairs (Note [DPO], src/model/dpo.h) with `dpo`.
  Objective objective = Objective::kLanguageModel;
  model::DpoOptions dpo;
  // strata.loss_chunk: tokens per tile of the head's loss (Note [Tiled loss]); 0 the whole
  // micro-batch at once; "auto" (-1) settled by ResolveTileSizes (src/settle).
  int64_t loss_chunk = -1;
  // strata.mlp_chunk: tokens per tile of each MLP (Note [Tiled MLP]); 0 untiled; "auto" (-1)
  // settled by ResolveTileSizes (src/settle).
  int64_t mlp_chunk = -1;
  Recompute recompute = Recompute::kAuto;  // strata.recompute (activation_checkpointing present: kAlways; settled: SettledConfig)
  // strata.adam_states: how Adam's m and v are stored ("fp32", or "bf16": 4 B/param instead
  // of 8, in memory, on NVMe and in checkpoints; the update itself stays fp32).
  DType adam_states = DType::kF32;
  // strata.adam_states "8bit": m and v in 1 byte + a scale per 256 (Note [8-bit moments],
  // strata/cpu_adam.h), 1.016 B/param each; checkpoints hold them as fp32 (adam_states kF32).
  bool moments_8bit = false;
  // strata.no_decay: regular expressions naming (by Hugging Face name) the parameters AdamW
  // does not decay; nullopt = "auto" (src/config/decay_groups.h).
  std::optional<std::vector<std::string>> no_decay;
  // strata.master_weights: "fp32" (the default), or "split": the fp32 master kept as the bf16
  // working weights + a 16-bit low half (Note [Split master], strata/cpu_adam.h): 2 B/param
  // instead of 4 in host memory and on NVMe, 2 B/param less written per update. bf16 compute,
  // working weights in the store (not resident on a device), optimizer_overlap "none" or
  // "forward", no LoRA (CheckSplitMaster, and StateFormat::Check once the plan is known).
  bool split_master = false;
  // (With fp32 compute the working weights are the fp32 master, and where the StateFormat
  // says so the store keeps them once: no key, nothing to choose, bitwise the same run.)
  // strata.gradient_accumulator: the dtype of the host gradient accumulators ("fp32", or
  // "bf16": 2 B/param instead of 4; each micro-batch's reduced gradient is added in fp32
  // and the sum rounded to bf16, nearest even, once per micro-batch).
  DType grad_accum_dtype = DType::kF32;
  // strata.device_accumulation: off the host with gradient_accumulation_steps > 1, add each
  // micro-batch's reduced gradients into fp32 accumulators on the device, and copy them to the
  // host accumulators once per step, instead of copying every micro-batch's and adding them
  // on the host: the link and the host's memory then carry 1/accumulation of the gradient
  // traffic. 4 B/param (of this rank's range) of device memory. "auto" (-1): where the
  // estimate fits the device's memory (known) with them; true (1) / false (0) as written.
  int device_accumulation = -1;  // (settled: SettledConfig)
  int optimizer_threads = 0;  // strata.optimizer_threads: the CPU Adam's OpenMP threads; 0 = the compute thread's
  // strata.device_memory: bytes of device memory for the fit check; 0 ("auto"): the device's own.
  uint64_t device_memory = 0;
  // strata.allow_unsupported: train even where the config holds DeepSpeed keys that would change
  // what is trained and that Strata does not implement (unsupported_keys.h); each stays a note.
  bool allow_unsupported = false;

  std::vector<AutoValue> autos;       // keys written "auto" and what they became

  std::vector<std::string> warnings;  // unknown keys, by path
  // Keys read with a meaning of their own here, one sentence each (DeepSpeed's deprecated
  // forms, sections whose effect is built in); `config check` and `train` print them.
  std::vector<std::string> notes;
};

// A config with what settling decided for its keys that say "auto" or leave the choice to the
// machine (src/settle): what the plan, the estimator and the engine read. TrainConfig is what
// the user wrote and never holds these; SettleRunConfig makes one (RunConfig), and the
// estimator's trials set them on a copy to weigh a choice.
struct SettledConfig : TrainConfig {
  SettledConfig() = default;
  explicit SettledConfig(TrainConfig written) : TrainConfig(std::move(written)) {}
  // strata.schedule: layer-major or micro-batch-major (ResolveSchedule).
  bool layer_major = false;
  // strata.block_inputs: where each block's input waits for the backward (EstimateSettlingAutos).
  BlockInputsAt block_inputs_at = BlockInputsAt::kDevice;
  // strata.recompute: keep each block's activations (ResolveRecompute, kAuto from the estimate);
  // false (recompute) until settled.
  bool keep_activations = false;
  // strata.device_accumulation: sum the micro-batches' gradients on the device.
  bool accumulate_on_device = false;
};

// The rules between keys (the delayed update, host blocks, the split master, 8-bit moments
// and the speculative update) that parsing checks; also for configs changed afterwards (the
// fit advice's tries). The error names the keys.
Status CheckKeys(const TrainConfig& config);

// strata.adam_states as written ("fp32", "bf16", "8bit"), and set to one of them.
std::string AdamStatesSetting(const TrainConfig& config);
void SetAdamStates(TrainConfig* config, const std::string& setting);

// The tokens of one micro-batch that one rank computes: its positions of every row (all of
// them, or T / sequence_parallel_size with Ulysses, Note [Ulysses]).
inline int64_t RankMicroBatchTokens(const TrainConfig& c) {
  return c.micro_batch * (c.model.seq_len / std::max<int64_t>(1, c.sequence_parallel));
}

// strata.loss_chunk and strata.mlp_chunk: the tokens whose logits or intermediates exist at
// once (tile_sizes.cc): the tile as written, or where "auto" the tile it settles to
// (src/settle, ResolveTileSizes), else the whole micro-batch.
int64_t LossTileTokens(const TrainConfig& config);
int64_t MlpTileTokens(const TrainConfig& config);
// What "auto" settles to: tiles of at most 256 MiB (a power of two of tokens) of the head's
// fp32 logits, of an MLP's [tokens, F] intermediate, where a micro-batch's would exceed 1 GiB,
// else 0 (untiled); and the bytes of one token's row, for the reason recorded.
int64_t AutoLossChunk(const TrainConfig& config);
int64_t AutoMlpChunk(const TrainConfig& config);
double LogitsRowBytes(const TrainConfig& config);
double MlpRowBytes(const TrainConfig& config);

// How many times a step passes each block in each direction: once layer-major, else once per
// micro-batch (the fetches of its working weights, ShardPlan::Visits).
inline int64_t BlockPasses(const SettledConfig& c) { return c.layer_major ? 1 : c.grad_accum; }

// Whether the run has a swap folder: the working weights or the optimizer states on NVMe.
inline bool HasSwapFolder(const TrainConfig& c) {
  return c.offload_param.device == Tier::kNvme || c.offload_optimizer.device == Tier::kNvme;
}

// The JSON text of a run's config: `path` ("" = `default_text`, named `default_origin`),
// with a "strata" value that is a string read as a second file (relative to the first),
// then `strata_file` (if not empty) replacing the "strata" section, then the --set
// overrides. *origin receives the name for messages.
StatusOr<std::string> ComposeConfigText(const std::string& path, const std::string& default_text,
                                        const std::string& strata_file, const std::vector<std::string>& sets,
                                        std::string* origin);

// The model section as strata.model keys (what checkpoint manifests store), and back: the
// keys added after GPT-2 / LLaMA are written only where they differ from the default.
nlohmann::json ModelConfigJson(const model::ModelConfig& m);
StatusOr<model::ModelConfig> ParseModelConfigJson(const nlohmann::json& model_section, const std::string& origin);
// The data section as strata.data keys, every one spelled out (data_section.cc reads them).
nlohmann::json DataConfigJson(const data::DataConfig& d);

// Parses a ds_config-style JSON text. `origin` names the file in messages.
StatusOr<TrainConfig> ParseTrainConfig(const std::string& json_text, const std::string& origin);
StatusOr<TrainConfig> LoadTrainConfig(const std::string& path);
// "key.path=value" overrides (JSON values; bare words are strings), applied before parsing.
StatusOr<std::string> ApplyOverrides(const std::string& json_text, const std::vector<std::string>& sets);

}  // namespace strata
