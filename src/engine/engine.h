// Engine: the ZeRO training step of docs/DESIGN.md ("One training step") on one rank.
//
// Every block of the model is one flat group, padded and split into equal shards; the
// ShardPlan (shard_plan.h) says which ranges this rank keeps and where, and its StateFormat
// how each state is stored. Per rank and block the engine keeps, each in its home tier
// through the TieredStore:
//   working weights (compute dtype; a QLoRA base's projections in NF4): stage 3 a shard, else
//     the full group (offload_param; on a GPU the first strata.resident_blocks stay there)
//   master and Adam's m and v (fp32, or the formats strata.master_weights / adam_states name):
//     this rank's optimizer range, in sub-groups (offload_optimizer; strata.host_blocks of
//     them in host memory when the rest is on NVMe); with LoRA, the adapters' only
//   gradient accumulator (fp32 or bf16): stage >= 2 a shard, else the full group (host memory,
//     or summed on the device first)
// A step: forward block by block (gather, run, keep the block's input in the tier
// strata.block_inputs names, or its activations), the head's forward and backward together
// (the loss tiled), backward block by block by recomputation (gather again, recompute,
// backprop, reduce gradients into the accumulator), then the global gradient norm across
// ranks (NaN/Inf: an fp16 overflow skips the step), then the CPU AdamW (or Lion, Adagrad, or
// LAMB after its norm pass, Note [LAMB trust ratio]) by sub-group on the
// optimizer thread, pipelined with the NVMe reads and writes of the states (the UpdateWindow)
// and overlapped with the next step's forward as strata.optimizer_overlap says (update/); its
// fused output is the next step's working weights. The PrefetchScheduler keeps the reads of
// upcoming working weights in flight while blocks compute; a mixture of experts' sparse
// blocks fetch only the experts their router chose (Note [Expert-aware fetching]). With
// several micro-batches the forward and backward run micro-batch by micro-batch, or,
// layer-major (strata.schedule), every micro-batch through one block before the next block.
//
// The engine borrows the communicators, the compute device and the tracer; the caller owns
// them. Blocks run on the compute device (the host, a GPU, or the fake asynchronous device of
// the tests); every state but a GPU's resident working weights stays on the host.
// This header needs no LibTorch: callers that use the torch-typed parts (EngineHooks,
// MasterParameters) include <torch/torch.h> themselves.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "src/engine/shard_plan.h"
#include "src/engine/step_stats.h"
#include "src/config/run_config.h"
#include "src/config/train_config.h"
#include "strata/communicator.h"
#include "strata/io_engine.h"
#include "strata/nvme_tier.h"
#include "strata/status.h"
#include "strata/trace.h"

namespace at {
class Tensor;
}
namespace strata {
namespace data {
class TokenDataset;
}
class ComputeDevice;

// Named fp32 parameters of one block, in registration order (LibTorch tensors).
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Optional behaviour at creation.
struct EngineHooks {
  // Replaces the seeded initial weights of block `block`: `params` holds the block's fp32
  // parameters; overwrite their values in place (e.g. from a safetensors file). An error (a
  // missing name, a shape mismatch) aborts Create with that error.
  std::function<Status(int block, NamedTensors& params)> init_weights;
  // Start-up progress: called (on the creating thread) as Create enters each phase, e.g.
  // "building block 3 of 34 (initial weights and optimizer states)". Optional.
  std::function<void(const std::string& phase)> on_phase;
  // sequence_parallel_size or tensor_parallel.autotp_size > 1 (Notes [Ulysses], [Tensor
  // parallel]): the same ranks as the engine's communicator, a second communicator that only
  // the blocks' all-to-alls and all-reduces use (ZeRO's collectives run on threads of their
  // own, Note [Process mesh]). Borrowed.
  Communicator* blocks_world = nullptr;
  // Tests: wraps the NVMe tier's I/O engine (faults injected in the middle of training).
  std::function<std::unique_ptr<IoEngine>(std::unique_ptr<IoEngine>)> wrap_io_engine;
};

// How long this rank's engine took to come up, by part (the start-up progress and the
// comparison with `bench io`'s write bandwidth).
struct CreationStats {
  double total_s = 0;          // from opening the store to the last block's state written
  double pools_s = 0;          // allocating, populating and pinning the pools (on the host,
                               // alongside the blocks: Note [Pools alongside the blocks])
  double blocks_s = 0;         // making every block and writing its initial state
  uint64_t pool_bytes = 0;     // the pools' page-locked bytes
  uint64_t state_bytes = 0;    // initial state written to the cpu and nvme tiers (working, master)
  uint64_t zero_bytes = 0;     // Adam's m and v there: zero, registered but not written (Note [Known zero])
};

// The counters a checkpoint must carry besides the tensors.
struct EngineCounters {
  int64_t adam_steps = 0;  // optimizer steps applied (Adam's bias correction)
  double loss_scale = 1;
  int64_t clean_steps = 0;
  int hysteresis_left = 0;
  // Mixtures of experts: per block, per expert of a sparse layer (empty lists for the others),
  // the Adam steps applied to it (an update skips an expert no token chose: Note [Expert-aware
  // fetching]). Empty: every expert took adam_steps.
  std::vector<std::vector<int64_t>> expert_steps;
};

// One parameter of a block's flat group: where the engine binds it and checkpoints lay it out.
struct ParamSlot {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // elements from the start of the flat group
  int64_t numel = 0;
  // Elements it occupies in the flat group: numel, or for an NF4 weight its blob's bytes in
  // compute-dtype elements (Note [NF4 base]); such a weight is dequantised at decoded_at of
  // a decode buffer for compute.
  int64_t stored = 0;
  bool nf4 = false;
  int64_t decoded_at = 0;
};

class Engine {
 public:
  // `config`: settled for this run (SettleRunConfig). `comm`: the host communicator (host
  // buffers). `device`: where blocks run, with its queues and its communicator for device
  // buffers; null = the host, collectives on `comm`. Both borrowed; the device must outlive
  // the engine.
  static StatusOr<std::unique_ptr<Engine>> Create(const RunConfig& config, Communicator* comm, Tracer* tracer,
                                                  EngineHooks hooks = {}, ComputeDevice* device = nullptr);
  ~Engine();

  // One optimizer step (gradient_accumulation_steps micro-batches). `step` is 0-based and
  // picks the data. Collective: every rank calls it with the same step.
  StatusOr<StepStats> Step(int64_t step, const data::TokenDataset& data);
  // Waits for what a step leaves running in the background (the optimizer's update, the
  // device's queues); its first error. Steps do not need it; measurements and shutdown do.
  Status Finish();
  // The last step's update is still running on the optimizer thread (optimizer_overlap
  // "forward" or "speculative"); whatever reads the whole state waits for it.
  bool UpdateInFlight() const;
  // Mean loss over `batches` eval batches per rank, averaged over ranks. Collective.
  StatusOr<double> EvalLoss(const data::TokenDataset& data, int64_t batches);
  // strata.objective "dpo" (Note [DPO]): per row of the dataset (data::Batch::rows) the
  // log-probability of its trained targets under the weights as they are, every row of both
  // splits in one forward pass, the ranks taking turns; the same vector on every rank.
  // Collective. `on_batch`: told of each batch done, with the total (progress).
  StatusOr<std::vector<double>> RowLogProbs(const data::TokenDataset& data,
                                            const std::function<void(int64_t done, int64_t total)>& on_batch = {});
  // The reference log-probabilities DPO's loss compares with: RowLogProbs of the initial model.
  void SetDpoReference(std::vector<double> logps);
  // strata.objective "dpo": the last EvalLoss's pairs over every rank, and their rewards.
  model::DpoTally LastEvalDpo() const;
  // Called on the compute thread as each block visit of a training step starts (forward,
  // head and backward, in order), with the visits finished and the step's total: progress
  // within a step, which at long sequences on a CPU lasts tens of minutes. Optional.
  void OnStepVisit(std::function<void(size_t done, size_t total)> observer);

  // The fp32 master weights of block `b`, unflattened, by parameter name. Collective.
  StatusOr<NamedTensors> MasterParameters(int block);

  // This rank's shard of the training state, tensor by tensor, in plan().Keys() order.
  // Waits for writes in flight first. Not collective.
  Status VisitState(const std::function<Status(const TensorKey& key, std::span<const std::byte> bytes)>& visit);
  // Overwrites one tensor visited by VisitState (same key, same byte count). Where the master
  // is kept in the working weights, one block's weights are held in memory while its masters
  // are restored, and written when the restore moves to another block or by the next Step,
  // EvalLoss, VisitState, MasterParameters or Finish.
  Status RestoreState(const TensorKey& key, std::span<const std::byte> bytes);
  EngineCounters counters() const;
  void set_counters(const EngineCounters& c);
  // Whether `steps` (EngineCounters::expert_steps) has this model's shape (or is empty).
  bool ExpertStepsFit(const std::vector<std::vector<int64_t>>& steps) const;
  // Where this rank's parameters live: the parameter slots (name, shape, flat offset) of
  // each block's flat group, for consolidating checkpoints.
  const std::vector<ParamSlot>& BlockParams(int block) const;

  const ShardPlan& plan() const;
  int num_blocks() const;
  // What this rank allocated, as the engine measured it (a test compares it with plan()).
  const MemoryLedger& ledger() const;
  uint64_t swap_bytes_on_disk() const;  // this rank's swap file, as allocated on disk (0 without NVMe)
  NvmeTierStats nvme_stats() const;     // this rank's NVMe tier's counters (zeros without NVMe)
  uint64_t prefetch_high_water_bytes() const;
  uint64_t prefetch_budget_bytes() const;
  const CreationStats& creation() const;
  const SettledConfig& config() const;

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
