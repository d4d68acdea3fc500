// Folder-private: the Engine's state, held together for the engine's own files: engine.cc
// (set-up), engine_build.cc (the initial state), engine_state.cc (state access),
// engine_step.cc and engine_layer_major.cc (forward, backward, gradients),
// engine_accumulate.cc (accumulation in place), engine_optimizer.cc (norm, clipping, the launch
// of the update). Its collaborators (the Gatherer, the update window and modes, a block's
// routing) are built from its parts (engine_parts.h), never from the whole. Who owns what:
//   ShardPlan     the arithmetic: ranges, sub-groups, pools, ledger (shard_plan.h)
//   TieredStore   every state tensor and every write in flight (tiered_store.h)
//   the parts     blocks, state, device buffers, I/O, experts (engine_parts.h)
#pragma once

#include <torch/types.h>
#include <torch/utils.h>

#include <array>
#include <deque>
#include <memory>
#include <optional>

#include "src/data/data.h"
#include "src/device/compute_device.h"
#include "src/device/torch_call.h"
#include "src/device/work_queue.h"
#include "src/engine/engine.h"
#include "src/engine/engine_parts.h"
#include "src/engine/gatherer.h"
#include "src/engine/working_format.h"
#include "src/engine/loss_scaler.h"
#include "src/engine/block_inputs.h"
#include "src/engine/dpo_objective.h"
#include "src/engine/experts/expert_parts.h"
#include "src/engine/prefetch.h"
#include "src/engine/mesh_place.h"
#include "src/engine/update/update_mode.h"
#include "src/engine/update/update_window.h"
#include "src/model/model.h"
#include "src/model/packed_sequences.h"
#include "src/model/router_loss.h"
#include "strata/cpu_adam.h"
#include "strata/host_pinner.h"
#include "strata/pinned_pool.h"
#include "strata/tiered_store.h"

namespace strata {

// What one micro-batch's forward leaves for its backward: each block's input (the
// activation checkpoint, recomputed from) or, with keep_activations, each block's output
// with its autograd graph (the block's activations); and the gradient flowing backward.
struct Activations {
  std::vector<torch::Tensor> inputs;   // block b's input; a leaf that requires grad when kept
  std::vector<torch::Tensor> outputs;  // keep_activations: block b's output, its graph alive
  torch::Tensor grad_out;
  // Recomputing: where the inputs wait between forward and backward (Note [Block inputs in
  // the tiers]), and which of the step's passes through each block this is.
  BlockInputStash* stash = nullptr;
  size_t pass = 0;
  // Packed examples (strata.data.packing): the rows' layout, armed around every block's forward
  // and recomputation (Note [Packed sequences]); null for plain rows.
  std::shared_ptr<const model::PackedLayout> packing;
  // Mixtures of experts with a load-balancing loss: this pass's (Note [Router loss]), armed as
  // the packing is; null otherwise.
  std::shared_ptr<model::RouterLoss> router;
  void Reset(int blocks, bool keep) {
    inputs.assign(blocks, torch::Tensor());
    outputs.assign(keep ? blocks : 0, torch::Tensor());
    grad_out = torch::Tensor();
  }
};

// A training step's micro-batches: which, their tokens, and their loss weights (Note [Loss mask]).
struct StepInputs {
  std::vector<MicroBatch> mbs;
  std::vector<data::Batch> batches;
  std::vector<double> weights;
};
// kLogProbs: a forward whose head gives each row's log-probability (DPO's reference pass).
enum class Pass { kTrain, kEval, kLogProbs };

// The optimizer step of a training step, possibly still running on the optimizer thread
// while the next forward goes on (Note [Optimizer overlap]).
struct OptimizerRun {
  std::vector<Event> block_ready;  // per block: its working weights are final, its gradients zeroed
  // Per block (stages 1-2): its updated shards are still to be shared with the other ranks,
  // by the compute thread, before its weights are used (collectives stay on one thread).
  std::vector<char> share_pending;
  Event done;  // the whole update, with its Status
};

// The optimizer: the loss scale and Adam's step count it carries from step to step, the
// update running (or last run) on its thread, the window it runs through, and its mode.
struct Optimizer {
  explicit Optimizer(const UpdateWindowParts& parts) : window(parts) {}
  LossScaler scaler{LossScaleConfig{}, false};
  int64_t adam_steps = 0;             // steps applied (skipped ones excluded): Adam's bias correction
  OptimizerRun run;
  UpdateWindow window;                // the update's read / update / write pipeline
  std::unique_ptr<UpdateMode> mode;   // how it runs against the steps (strata.optimizer_overlap)
  // The gradient norm's sums of squares: one thread count wherever they are taken, so that
  // the norm has the same bits; and each block's, taken off the host once its gradient was
  // final (Note [Early gradient sums]), for OptimizerStep to use instead of reading it again.
  int norm_threads = 1;
  std::vector<std::optional<GradStats>> early_sums;
  std::unique_ptr<WorkQueue> thread;  // runs one update at a time (last: joined first)
};

// What the engine measured of itself.
struct EngineStats {
  MemoryLedger ledger;  // what Init allocated
  CreationStats creation;
  uint64_t prefetch_high_water = 0;
};

// The engine: its settled config and plan, where it runs, the model's blocks, the state, the
// device's buffers, the optimizer, and what it measured. Owned by the compute thread; the
// optimizer thread reads the plan, the model's blocks and the state, and writes the state and
// the optimizer's run, only while an update runs (Quiesce ends that).
struct Engine::Impl final : BlockReadiness {
  SettledConfig cfg;  // as settled for the run (RunConfig)
  ShardPlan plan;
  EngineIo io;
  MeshPlace seq;  // which data rank this is, and its positions of each row (Note [Ulysses])
  ModelBlocks model;
  StateStore state;
  DeviceBuffers bufs;
  ExpertState experts;
  WorkingFormat working_format;  // the working weights' layout and decoding (NF4)
  Optimizer optimizer{UpdateWindowParts{plan, io, model, state, bufs, experts}};
  EngineStats stats;
  StepStats step_counts;  // what the schedules count of the running step (its block inputs' bytes)
  std::unique_ptr<DpoObjective> dpo;  // strata.objective "dpo" (Note [DPO])
  model::DpoTally dpo_tally;           // the running pass's pairs on this rank
  model::DpoTally eval_dpo;            // the last evaluation's, over every rank
  torch::Tensor row_logps;             // Pass::kLogProbs: the last batch's, per row
  std::function<void(size_t done, size_t total)> on_step_visit;  // Engine::OnStepVisit

  // engine.cc: set-up
  Status Init(const EngineHooks& hooks);
  Status OpenStore(const EngineHooks& hooks);
  Status CreatePools();    // off the ledger: may run on a helper thread
  Status RegisterPools();  // the ledger and io_uring, after CreatePools
  // engine_build.cc: every block's initial state (Note [Building blocks])
  struct Staging;
  // `staged` is called once every staging set has been drawn into (its pages faulted).
  Status BuildBlocks(const EngineHooks& hooks, const std::function<void(const std::string&)>& phase,
                     const std::function<void()>& staged);
  Status BuildBlock(int b, std::shared_ptr<model::Block> module, const EngineHooks& hooks, Staging& st);
  void MarkNoDecay();  // every block's BlockRuntime::no_decay (strata.no_decay)
  void MarkTensorGroups();  // LAMB: the update window's per-block tensor groups
  Status MarkMuonTensors();  // Muon: the update window's per-block tensors and matrices (Note [Muon])
  Status StoreInitialState(int b, const torch::Tensor& flat, Staging& st);
  Status AllocateDeviceBuffers();
  torch::ScalarType compute_scalar() const;
  int num_blocks() const { return static_cast<int>(model.blocks.size()); }

  // engine_step.cc: the step's compute (`mb`: which micro-batch of which step)
  std::unique_ptr<PrefetchScheduler> MakePrefetcher(const std::vector<Visit>& plan);
  // What a pass's Gatherer is built from.
  GatherParts gather_parts();
  // One block of one micro-batch, whichever the schedule (its weights acquired by the caller
  // from `gather`, which fetches a sparse layer's routed experts).
  Status ForwardBlock(int b, Pass pass, torch::Tensor* x, Activations* act, const MicroBatch& mb, Gatherer& gather,
                      const model::PackedLayout* packing);
  // `rows`: the batch's dataset rows (DPO's reference; Pass::kLogProbs leaves each row's
  // log-probability in row_logps).
  StatusOr<double> HeadPass(const torch::Tensor& x, const torch::Tensor& targets, const torch::Tensor& mask,
                            const torch::Tensor& rows, double weight, Pass pass, Activations* act);
  Status AcquireHead(Gatherer& gather);
  Status BackwardBlock(int b, Activations& act, const MicroBatch& mb, Gatherer& gather);
  bool BackwardVisits(int b) const;
  std::shared_ptr<model::RouterLoss> NewRouterLoss() const;
  // The two schedules of a step's micro-batches (strata.schedule); each adds their losses.
  Status MicroBatchMajor(const StepInputs& in, Gatherer& gather, double* loss_sum);
  Status LayerMajor(const StepInputs& in, Gatherer& gather, double* loss_sum);  // engine_layer_major.cc
  // LoRA dropout's masks in *dropout for block b of micro-batch `mb` (the same masks in its
  // recomputation); left empty without dropout.
  void ArmLoraDropout(int b, const MicroBatch& mb, std::optional<model::LoraDropout>* dropout) const;
  // What block b's layers are handed for one run (Note [Block context]): the packed layout,
  // the dropout, the routing report, the load-balancing loss, the MLP's tiles.
  model::BlockContext BlockContextOf(const model::PackedLayout* packing, std::optional<model::LoraDropout>& dropout,
                                     BlockRouting& routing, model::RouterLoss* router_loss) const;
  StatusOr<double> Forward(const data::Batch& batch, double loss_weight, Pass pass, Gatherer& gather, Activations* act,
                           const MicroBatch& mb);
  // A pass without a backward (eval, DPO's reference): one batch, a Gatherer of its own.
  StatusOr<double> ForwardOnly(const data::Batch& batch, double weight, Pass pass);
  Status CheckDpoReference() const;  // strata.objective "dpo": the reference is set
  Status Backward(Activations& act, Gatherer& gather, const MicroBatch& mb);
  void BindTiedHead();
  Status ReduceGradients(int b, const MicroBatch& mb);
  // engine_accumulate.cc: alone on the host, block b's gradients added into its accumulator
  // straight from the parameters' .grad (Note [Accumulation in place]).
  bool AccumulatesInPlace(int b) const;
  Status AccumulateInPlace(int b, const MicroBatch& mb);
  // Block b's sum of squares over this rank's optimizer range of its accumulated gradient.
  GradStats BlockGradSums(int b) const;
  void TakeEarlySums(int b);  // on the host callback thread (Note [Early gradient sums])
  // Tests (strata.debug_overflow_step): an Inf in block 0's gradient as its last share is added.
  bool PlantsOverflow(int b, const MicroBatch& mb) const;
  // `mask`: the batch's loss mask, when it has one.
  Status BatchToDevice(const data::Batch& batch, torch::Tensor* inputs, torch::Tensor* targets,
                       torch::Tensor* mask) const;
  // plan.device_accum: adds block b's reduced gradients (`part`, after `reduced`) into its
  // device accumulator; the last micro-batch copies the sum to the host accumulator.
  void PinHostAccumulators(const std::shared_ptr<HostPinner>& pinner);
  Status AccumulateOnDevice(int b, GradSlot& g, const torch::Tensor& part, const Event& reduced, double inv,
                            const MicroBatch& mb);
  // The next NVMe sub-group's states read ahead of the update (UpdateWindow::ReadStatesEarly),
  // when no update runs and the mode starts from the first block.
  void ReadStatesEarly();

  // engine_dpo.cc: a pass's DPO pairs over every rank. Collective.
  StatusOr<model::DpoTally> SumOverRanks(const model::DpoTally& tally);

  // engine_optimizer.cc, on the compute thread: the norm, the skip decision, the launch of
  // the update (the update itself: update/); AwaitBlock before a block's weights are used,
  // Quiesce before anything reads the whole state.
  StatusOr<bool> OptimizerStep(int64_t step, StepStats* stats);
  Status LaunchUpdate(const AdamHyperParams& hp, Verdict verdict, int64_t step);
  // BlockReadiness
  Status AwaitBlock(int b) override;
  Status WaitForUpdate(int b, const char* what) override;  // block b's part of the running update
  bool BlockReady(int b) const override;
  // What the update mode is built from (MakeUpdateMode).
  UpdateModeParts update_mode_parts();
  Status Quiesce();
  // The next update's hyper-parameters (Adam's step and the schedule's lr: the applied
  // updates so far, as DeepSpeed counts them), clip coefficient 1.
  AdamHyperParams NextHyperParams() const;
  Status SetTrustRatios(const AdamHyperParams& hp);  // LAMB: the norm pass, across ranks (Note [LAMB trust ratio])
  Status SetMuonUpdates(const AdamHyperParams& hp);  // Muon: whole matrices orthogonalised, across ranks (Note [Muon])
  // Stages 1-2: this rank's updated part of block b shared with the others (compute thread).
  Status ShareUpdatedWeights(int b);

  // engine_state.cc: the state as checkpoints see it. Block b's working weights, whole; the
  // fp32 master of its sub-group `sg` into `dst` (4 B per element), from its stored bytes
  // and, where the format keeps it there (or its high halves), `working`; a checkpoint's fp32
  // master written back (into the working weights too where the format keeps it there).
  StatusOr<std::vector<std::byte>> ReadWorking(int b);
  Status ReadMaster(int b, const SubGroup& sg, std::span<const std::byte> working, std::span<std::byte> dst);
  Status RestoreMasterFromWorking(const TensorKey& key, const SubGroup& sg, std::span<const std::byte> fp32);
  Status FlushRestoringWorking();  // the held working weights of a restore (StateStore::restoring) written
};

}  // namespace strata
