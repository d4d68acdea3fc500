// Folder-private: the Engine's state, shared by engine.cc (set-up, state access),
// engine_step.cc (forward, backward, gradients) and engine_optimizer.cc (norm, clipping,
// the AdamW pipeline). Who owns what:
//   ShardPlan     the arithmetic: ranges, sub-groups, pools, ledger (shard_plan.h)
//   TieredStore   every state tensor and every write in flight (tiered_store.h)
//   ModelBlocks   the LibTorch modules and their store handles, one per block
//   DeviceBuffers scratch on the compute device; HostGradients the fp32 accumulators
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>

#include "src/data/data.h"
#include "src/engine/compute_device.h"
#include "src/engine/engine.h"
#include "src/engine/loss_scaler.h"
#include "src/engine/prefetch.h"
#include "src/model/model.h"
#include "strata/cpu_adam.h"
#include "strata/pinned_pool.h"
#include "strata/tiered_store.h"

namespace strata {

struct ParamSlot {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // elements from the start of the flat group
  int64_t numel = 0;
};

// One optimizer sub-group: the plan's range and the store's three state tensors.
struct SubGroup {
  ElementRange range;
  TensorHandle master, m, v;
};

// One block at run time: its module (whose parameters are views of a gather buffer while
// it runs), its store handles and its gradient accumulator. Ranges are in plan.blocks[i].
struct BlockRuntime {
  std::shared_ptr<model::Block> module;
  std::vector<torch::Tensor> params;  // the module's parameters, in flat order
  std::vector<ParamSlot> slots;
  int tied_slot = -1;                 // owner: index of the slot the head borrows
  TensorHandle working;
  std::vector<SubGroup> subs;
  float* grad = nullptr;              // fp32 accumulator of plan.blocks[i].grad.len elements
};

struct ModelBlocks {
  std::unique_ptr<model::ModelSpec> spec;
  std::optional<model::Tie> tie;
  std::vector<BlockRuntime> blocks;
};

// Scratch on the compute device, allocated once.
struct DeviceBuffers {
  torch::Tensor gather[2];     // full padded group, compute dtype (current block, tied owner)
  torch::Tensor flat_grad;     // fp32, max padded elements
  torch::Tensor reduced;       // fp32, max shard elements
  torch::Tensor pending_tied;  // fp32 gradient of the tied weight from the head
  torch::Tensor shard_in;      // off-host only: this rank's working shard, before the all-gather
  torch::Tensor grad_host;     // off-host only: fp32 gradients copied out (pinned)
};

// The fp32 gradient accumulators (host memory, one allocation per block), freed on destruction.
class HostGradients {
 public:
  HostGradients() = default;
  HostGradients(const HostGradients&) = delete;
  HostGradients& operator=(const HostGradients&) = delete;
  ~HostGradients();
  StatusOr<float*> Allocate(int64_t elements);
  void ZeroAll();

 private:
  std::vector<std::pair<float*, size_t>> allocs_;  // pointer, bytes
};

struct Pools {
  std::unique_ptr<PinnedPool> param;  // NVMe working-weight fetches and write-backs
  std::unique_ptr<PinnedPool> optim;  // NVMe optimizer-state sub-groups
};

// One optimizer sub-group's states (master, m, v) being read into pinned buffers.
struct LoadedStates {
  const SubGroup* sub = nullptr;
  PinnedBuffer buf[3];
  Ticket read[3];
};

// What one micro-batch's forward leaves for its backward: each block's input (the
// activation checkpoints) and the gradient flowing into the head.
struct Activations {
  std::vector<torch::Tensor> inputs;
  torch::Tensor grad_out;
};
enum class Pass { kTrain, kEval };

struct Engine::Impl {
  TrainConfig cfg;
  ShardPlan plan;
  Communicator* comm = nullptr;  // host buffers
  ComputeDevice dev{torch::Device(torch::kCPU), nullptr};  // where blocks run, with its collectives
  Tracer* tracer = nullptr;
  ModelBlocks model;
  std::unique_ptr<TieredStore> store;
  Pools pools;
  DeviceBuffers bufs;
  HostGradients grads;
  LossScaler scaler{LossScaleConfig{}, false};
  int64_t adam_steps = 0;  // steps applied (skipped ones excluded): Adam's bias correction
  // The first sub-group's states, read during the last micro-batch so that the optimizer
  // step does not start by waiting for NVMe; consumed (or dropped) by OptimizerStep.
  std::unique_ptr<LoadedStates> early_states;
  uint64_t prefetch_high_water = 0;
  MemoryLedger ledger;  // measured from what Init allocated

  // engine.cc: set-up
  Status Init(const EngineHooks& hooks);
  Status OpenStore();
  Status CreatePools();
  Status BuildBlock(int b, const EngineHooks& hooks);
  Status StoreInitialState(int b, const torch::Tensor& flat);
  Status AllocateDeviceBuffers();
  Communicator* dcomm() const { return dev.collectives() ? dev.collectives() : comm; }
  torch::ScalarType compute_scalar() const;
  int num_blocks() const { return static_cast<int>(model.blocks.size()); }

  // engine_step.cc: one micro-batch
  std::vector<int> VisitPlan(int micro_batches, bool backward) const;
  std::unique_ptr<PrefetchScheduler> MakePrefetcher(const std::vector<int>& plan);
  StatusOr<double> Forward(const data::Batch& batch, Pass pass, PrefetchScheduler* prefetch, Activations* act);
  Status Backward(Activations& act, PrefetchScheduler* prefetch);
  Status Gather(int b, int slot, PrefetchScheduler* prefetch);
  void Bind(int b, int slot);
  void BindTiedHead();
  Status ReduceGradients(int b);
  Status BatchToDevice(const data::Batch& batch, torch::Tensor* inputs, torch::Tensor* targets) const;

  // engine_optimizer.cc
  StatusOr<bool> OptimizerStep(int64_t step, StepStats* stats);
  Status UpdateAllGroups(const AdamHyperParams& hp);
  // Leases three optim-pool buffers and issues the reads of `sg`'s master, m and v.
  std::unique_ptr<LoadedStates> LoadStates(const SubGroup& sg);
  void ReadFirstStatesEarly();  // best effort, never blocks
  void DropEarlyStates();       // waits for its reads, returns its buffers
};

// Runs a LibTorch call, turning its exceptions into a Status (STYLE rule 4).
template <typename F>
Status TorchCall(const char* what, F&& f) {
  try {
    f();
    return Status();
  } catch (const c10::Error& e) {
    return Status(StatusCode::kInternal, fmt::format("{}: {}", what, e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, fmt::format("{}: {}", what, e.what()));
  }
}

}  // namespace strata
