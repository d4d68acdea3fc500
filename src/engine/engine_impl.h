// Folder-private: the Engine's state, shared by engine.cc (set-up), engine_build.cc (the
// initial state), engine_state.cc (state access), engine_step.cc (forward, backward,
// gradients), engine_optimizer.cc (norm, clipping, the launch of the update) and update/ (the
// update and its modes). Who owns what:
//   ShardPlan     the arithmetic: ranges, sub-groups, pools, ledger (shard_plan.h)
//   TieredStore   every state tensor and every write in flight (tiered_store.h)
//   ModelBlocks   the LibTorch modules and their store handles, one per block
//   DeviceBuffers scratch on the compute device; HostArrays the fp32 accumulators (and the
//                 speculation backups)
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
#include "src/engine/loss_scaler.h"
#include "src/engine/block_inputs.h"
#include "src/engine/expert_parts.h"
#include "src/engine/prefetch.h"
#include "src/engine/update/update_mode.h"
#include "src/engine/update/update_window.h"
#include "src/model/model.h"
#include "src/model/nf4.h"
#include "src/model/packed_sequences.h"
#include "src/model/router_loss.h"
#include "strata/cpu_adam.h"
#include "strata/host_pinner.h"
#include "strata/pinned_pool.h"
#include "strata/tiered_store.h"

namespace strata {

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

// One optimizer sub-group: the plan's range and the store's state tensors (invalid where the
// format stores none: the master kept in the working weights, a moment slot its optimizer
// does not keep).
struct SubGroup {
  ElementRange range;
  TensorHandle master, m, v;
  // A moment it stores (every optimizer keeps one): where its states live.
  TensorHandle moment() const { return m.valid() ? m : v; }
  // The handle of state `role` (kMaster, kAdamM, kAdamV).
  TensorHandle& of(TensorRole role) { return role == TensorRole::kMaster ? master : role == TensorRole::kAdamM ? m : v; }
  const TensorHandle& of(TensorRole role) const {
    return role == TensorRole::kMaster ? master : role == TensorRole::kAdamM ? m : v;
  }
};

// One block at run time: its module (whose parameters are views of a gather buffer while
// it runs), its store handles and its gradient accumulator. Ranges are in plan.blocks[i].
struct BlockRuntime {
  std::shared_ptr<model::Block> module;
  std::vector<torch::Tensor> params;  // the module's parameters, in flat order
  std::vector<ParamSlot> slots;
  std::vector<size_t> by_offset;      // slot indices by flat offset (LoRA's adapters lie last, registered inside)
  bool nf4 = false;                   // some slot is an NF4 weight (QLoRA)
  int tied_slot = -1;                 // owner: index of the slot the head borrows
  TensorHandle working;
  TensorHandle adapter;               // LoRA, working weights on NVMe: plan.blocks[i].adapter (host memory)
  std::vector<SubGroup> subs;
  // The flat ranges [begin, end) of the parameters AdamW does not decay (strata.no_decay).
  std::vector<std::pair<int64_t, int64_t>> no_decay;
  // The gradient accumulator of plan.blocks[i].grad.len elements, fp32 or bf16 (plan.gsize).
  std::byte* grad = nullptr;
};

struct ModelBlocks {
  std::unique_ptr<model::ModelSpec> spec;
  std::optional<model::Tie> tie;
  std::vector<BlockRuntime> blocks;
};

// A gather buffer: one block's full working weights on the device while it runs.
struct GatherSlot {
  torch::Tensor full;      // compute dtype, the largest padded group
  torch::Tensor shard_in;  // off the host: the working shard on its way to the all-gather
  Event released;    // the compute that read `full` has completed: it may be rewritten
  Event shard_read;  // the all-gather that read `shard_in` has completed
};

// One gradient reduction's buffers (two on a device, so one reduces while the next fills).
struct GradSlot {
  torch::Tensor flat;     // fp32, the largest padded group: a block's flattened gradients
  torch::Tensor reduced;  // fp32, the largest shard: the reduce-scatter's output
  torch::Tensor host;     // off the host: pinned host copy of the reduced gradients
  PinnedRange host_pin;   // `host` page-locked by the device's pinner (after `host`: unpinned first)
  Event flat_read, reduced_read, host_read;  // when each may be rewritten
};

// Buffers on the compute device, allocated once (ShardPlan: gather_slots, tied_slot,
// grad_slots, resident).
struct DeviceBuffers {
  std::vector<GatherSlot> gather;
  GatherSlot tied;                 // the tied owner while the head runs
  std::vector<GradSlot> grads;
  torch::Tensor pending_tied;      // fp32 gradient of the tied weight from the head
  // plan.device_accum: per block, the fp32 sum of its micro-batches' reduced gradients (its
  // accumulator range), and the copy to the host that last read it.
  std::vector<torch::Tensor> accum;
  std::vector<Event> accum_read;
  // Per block: its host accumulator page-locked for the sum's copy (Note [Sums straight into
  // the accumulators]); empty where it was not.
  std::vector<PinnedRange> accum_host_pins;
  // QLoRA: plan.decode_slots() buffers of plan.max_decoded elements (compute dtype), taken in
  // turn by the blocks bound with NF4 weights, and the code tables on the device.
  std::vector<torch::Tensor> decoded;
  size_t next_decode = 0;
  model::Nf4Tables nf4_tables;
  std::vector<torch::Tensor> resident;       // per block: its working weights, when resident
  std::vector<Event> resident_ready;   // per block: the copy that last wrote them
  size_t next_gather = 0, next_grad = 0;
};

// Host arrays allocated once (the gradient accumulators; the speculation backups),
// freed on destruction.
class HostArrays {
 public:
  HostArrays() = default;
  HostArrays(const HostArrays&) = delete;
  HostArrays& operator=(const HostArrays&) = delete;
  ~HostArrays();
  StatusOr<std::byte*> Allocate(size_t bytes);  // faulted now
  StatusOr<std::byte*> Reserve(size_t bytes);   // zero, faulted on first touch (ReserveHostMemory)

 private:
  std::vector<std::pair<std::byte*, size_t>> allocs_;  // pointer, bytes
};

struct Pools {
  std::unique_ptr<PinnedPool> param;  // NVMe working-weight fetches and write-backs
  std::unique_ptr<PinnedPool> optim;  // NVMe optimizer-state sub-groups
  std::unique_ptr<PinnedPool> park;   // strata.optimizer_overlap "delayed": parked working weights
};

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
enum class Pass { kTrain, kEval };

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
  explicit Optimizer(Engine::Impl& m) : window(m) {}
  LossScaler scaler{LossScaleConfig{}, false};
  int64_t adam_steps = 0;             // steps applied (skipped ones excluded): Adam's bias correction
  OptimizerRun run;
  UpdateWindow window;                // the update's read / update / write pipeline
  std::unique_ptr<UpdateMode> mode;   // how it runs against the steps (strata.optimizer_overlap)
  int threads = 1;                    // OpenMP threads of the CPU Adam
  // The gradient norm's sums of squares: one thread count wherever they are taken, so that
  // the norm has the same bits; and each block's, taken off the host once its gradient was
  // final (Note [Early gradient sums]), for OptimizerStep to use instead of reading it again.
  int norm_threads = 1;
  std::vector<std::optional<GradStats>> early_sums;
  std::unique_ptr<WorkQueue> thread;  // runs one update at a time (last: joined first)
};

// Where the engine runs and reports: the host communicator (host buffers), the compute device
// with its queues and collectives (borrowed, or the host device the engine made), the tracer.
struct EngineIo {
  Communicator* comm = nullptr;
  ComputeDevice* dev = nullptr;
  std::unique_ptr<ComputeDevice> own_device;  // the host device, when Create was given none
  Tracer* tracer = nullptr;
};

// The training state on the host: the store (every state tensor in its tier, every write in
// flight), its pinned pools, the gradient accumulators, and a restore's held working weights.
struct StateStore {
  std::unique_ptr<TieredStore> store;
  Pools pools;
  HostArrays grads;
  // The working weights of the block whose masters a restore is writing, held until the
  // restore moves to another tensor or ends, so that a block of many sub-groups is read and
  // written once (not once per sub-group). Quiesce() and Step() flush it.
  struct RestoringWorking {
    int block = -1;
    std::vector<std::byte> bytes;
  } restoring;
};

// Mixtures of experts (Note [Expert-aware fetching]), per block (empty for a dense block) and
// per expert: whether some token of the running step chose it (any micro-batch of this rank;
// after CountExpertSteps' all-reduce, of any rank), and the Adam steps applied to it so far (its
// own bias correction: a step that did not route to it does not count).
struct ExpertState {
  std::vector<std::vector<uint8_t>> routed;
  std::vector<std::vector<int64_t>> steps;
  // The update launched last (read by the optimizer thread while it runs): each expert's Adam
  // step in it, or 0 where it is not updated; null where every expert takes the run's step
  // (strata.expert_update "all", Note [Expert updates]).
  std::shared_ptr<const std::vector<std::vector<int64_t>>> update_steps;
  bool any() const { return !routed.empty(); }
};

// What the engine measured of itself.
struct EngineStats {
  MemoryLedger ledger;  // what Init allocated
  CreationStats creation;
  uint64_t prefetch_high_water = 0;
};

class Gatherer;

// The engine: its settled config and plan, where it runs, the model's blocks, the state, the
// device's buffers, the optimizer, and what it measured. Owned by the compute thread; the
// optimizer thread reads the plan, the model's blocks and the state, and writes the state and
// the optimizer's run, only while an update runs (Quiesce ends that).
struct Engine::Impl {
  TrainConfig cfg;  // as settled for the run (RunConfig)
  ShardPlan plan;
  EngineIo io;
  ModelBlocks model;
  StateStore state;
  DeviceBuffers bufs;
  Optimizer optimizer{*this};
  EngineStats stats;
  ExpertState experts;
  Gatherer* gatherer = nullptr;  // the pass's, while one runs (routed fetches find it)
  StepStats step_counts;  // what the schedules count of the running step (its block inputs' bytes)
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
  Status StoreInitialState(int b, const torch::Tensor& flat, Staging& st);
  // QLoRA (engine_build.cc): block b's parameters in st.flat moved from the model's layout to the
  // group's, each NF4 weight quantised into st.nf4_blobs and its place zeroed; then its bytes
  // copied into the working range's compute-dtype values (`working`, from element
  // plan.blocks[b].working.begin).
  Status PackNf4Weights(int b, Staging& st);
  void PlaceNf4Blobs(int b, const Staging& st, const torch::Tensor& working);
  Status AllocateDeviceBuffers();
  torch::ScalarType compute_scalar() const;
  int num_blocks() const { return static_cast<int>(model.blocks.size()); }
  // Where block b's working weights are read from on the host (the cpu tier), or null.
  const std::byte* HostWorking(int b);

  // engine_step.cc: the step's compute (`mb`: which micro-batch of which step)
  std::unique_ptr<PrefetchScheduler> MakePrefetcher(const std::vector<Visit>& plan);
  // One block of one micro-batch, whichever the schedule (its weights acquired by the caller).
  Status ForwardBlock(int b, Pass pass, torch::Tensor* x, Activations* act, const MicroBatch& mb);
  StatusOr<double> HeadPass(const torch::Tensor& x, const torch::Tensor& targets, const torch::Tensor& mask,
                            double weight, Pass pass, Activations* act);
  Status AcquireHead(Gatherer& gather);
  Status BackwardBlock(int b, Activations& act, const MicroBatch& mb);
  bool BackwardVisits(int b) const;
  std::shared_ptr<model::RouterLoss> NewRouterLoss() const;
  // The two schedules of a step's micro-batches (strata.schedule); each adds their losses.
  Status MicroBatchMajor(const StepInputs& in, Gatherer& gather, double* loss_sum);
  Status LayerMajor(const StepInputs& in, Gatherer& gather, double* loss_sum);  // engine_layer_major.cc
  // Arms LoRA dropout in *scope for block b of micro-batch `mb` (the same masks in its
  // recomputation); leaves it empty without dropout.
  void ArmLoraDropout(int b, const MicroBatch& mb, std::optional<model::LoraDropoutScope>* scope) const;
  StatusOr<double> Forward(const data::Batch& batch, double loss_weight, Pass pass, Gatherer& gather, Activations* act,
                           const MicroBatch& mb);
  Status Backward(Activations& act, Gatherer& gather, const MicroBatch& mb);
  void BindTiedHead();
  Status ReduceGradients(int b, const MicroBatch& mb);
  // accumulate_in_place.cc: alone on the host, block b's gradients added into its accumulator
  // straight from the parameters' .grad (Note [Accumulation in place]).
  bool AccumulatesInPlace(int b) const;
  Status AccumulateInPlace(int b, const MicroBatch& mb);
  // Block b's accumulated gradient over `range` (flat elements), for the norm and for Adam.
  std::span<const float> GradF32(int b, ElementRange range) const;
  // Block b's sum of squares over this rank's optimizer range of its accumulated gradient.
  GradStats BlockGradSums(int b) const;
  void TakeEarlySums(int b);  // on the host callback thread (Note [Early gradient sums])
  std::span<const uint16_t> GradBf16(int b, ElementRange range) const;
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
  // Waits (compute-side) for `e`, recording the wait on the trace when it blocks.
  Status ComputeAfter(const Event& e, const char* what);

  // engine_optimizer.cc, on the compute thread: the norm, the skip decision, the launch of
  // the update (the update itself: update/); AwaitBlock before a block's weights are used,
  // Quiesce before anything reads the whole state.
  StatusOr<bool> OptimizerStep(int64_t step, StepStats* stats);
  // Mixtures of experts: the step's routing joined over the ranks, and each expert's Adam step
  // for the update (ExpertState::update_steps; Note [Expert updates]).
  Status CountExpertSteps();
  Status LaunchUpdate(const AdamHyperParams& hp, Verdict verdict, int64_t step);
  Status AwaitBlock(int b);
  Status WaitForUpdate(int b, const char* what);  // block b's part of the running update
  bool BlockReady(int b) const;
  Status Quiesce();
  // The next update's hyper-parameters (Adam's step and the schedule's lr: the applied
  // updates so far, as DeepSpeed counts them), clip coefficient 1.
  AdamHyperParams NextHyperParams() const;
  // Stages 1-2: this rank's updated part of block b shared with the others (compute thread).
  Status ShareUpdatedWeights(int b);
  // Returns `lease` to its pool once `after` happened (a copy finished reading it).
  void ReleaseAfter(PinnedBuffer lease, const Event& after);

  // engine_state.cc: the state as checkpoints see it. Block b's working weights, whole; the
  // fp32 master of its sub-group `sg` into `dst` (4 B per element), from its stored bytes
  // and, where the format keeps it there (or its high halves), `working`; a checkpoint's fp32
  // master written back (into the working weights too where the format keeps it there).
  StatusOr<std::vector<std::byte>> ReadWorking(int b);
  Status ReadMaster(int b, const SubGroup& sg, std::span<const std::byte> working, std::span<std::byte> dst);
  Status RestoreMasterFromWorking(const TensorKey& key, const SubGroup& sg, std::span<const std::byte> fp32);
  Status FlushRestoringWorking();  // the held working weights of a restore (StateStore::restoring) written
};

// Gathers the blocks of a plan of visits, one ahead of the compute on a device (the next
// block is copied in and all-gathered while one computes), and binds each block's
// parameters to its gather buffer. Acquire() blocks compute until the block is there;
// Release() marks the compute that read the blocks acquired since the last Release.
class Gatherer {
 public:
  // `report_visits`: each Acquire tells m.on_step_visit (a training step's gatherer).
  Gatherer(Engine::Impl& m, std::vector<Visit> plan, PrefetchScheduler* prefetch, bool report_visits = false);
  ~Gatherer();
  Status Acquire(int block);
  // A sparse layer of the block acquired last chose these experts (counts per expert): those it
  // has not fetched yet are read and copied in, the compute waiting for them (Note
  // [Expert-aware fetching]). Nothing for a block fetched whole.
  Status FetchExperts(int block, std::span<const int64_t> counts);
  // `slot`, acquired earlier and released since, is read again by the next compute.
  void Reuse(GatherSlot* slot) { in_use_.push_back(slot); }
  void Release();

 private:
  struct Gathered {
    Gathered(torch::Tensor f, Event r, GatherSlot* s) : full(std::move(f)), ready(std::move(r)), slot(s) {}
    torch::Tensor full;
    Event ready;
    GatherSlot* slot = nullptr;  // null: a resident block bound in place
    // Fetching routed experts only: where the block's working weights are read from (the lease
    // of its NVMe read, or the cpu tier), its parts, the experts fetched so far, and the copies.
    PinnedBuffer lease;
    const std::byte* src = nullptr;
    std::vector<WorkingPart> parts;
    std::vector<uint8_t> fetched;
    EventList copies;
  };
  Status Issue(const Visit& v);
  Status IssueRouted(int b, GatherSlot& slot, const torch::Tensor& full);
  EventList FetchRange(Gathered& g, const BlockPlan& bp, int64_t lo, int64_t hi, const EventList& after);
  void Bind(int block, const torch::Tensor& full);

  Engine::Impl& m_;
  std::vector<Visit> plan_;
  PrefetchScheduler* prefetch_;
  size_t lookahead_;
  std::vector<Gathered> gathered_;  // one per issued visit
  size_t acquired_ = 0;
  bool report_visits_;
  std::vector<GatherSlot*> in_use_;  // acquired, not yet released
  std::vector<size_t> holding_;      // acquired, not yet released, holding a lease (routed fetches)
  Gatherer* previous_;               // (Engine::Impl::gatherer before this one)
};


}  // namespace strata
