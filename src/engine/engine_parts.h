// Folder-private: the parts the Engine's state is made of (engine_impl.h holds them together),
// defined apart so that its collaborators (the Gatherer, the update window and modes, a
// block's routing) are built from the parts they use rather than from the whole engine:
//   ModelBlocks   the LibTorch modules and their store handles, one per block
//   StateStore    the store (every state tensor in its tier, every write in flight), its pools
//   DeviceBuffers scratch on the compute device; HostArrays the fp32 accumulators
//   EngineIo      the communicator, the compute device, the tracer
//   ExpertState   mixtures of experts: which experts the step chose, their step counts
//                 (experts/expert_state.h)
//   BlockReadiness whether a block's update is done (what the compute waits for)
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "src/device/compute_device.h"
#include "src/engine/engine.h"
#include "src/engine/experts/expert_state.h"
#include "src/engine/shard_plan.h"
#include "src/engine/tensor_key.h"
#include "src/model/model.h"
#include "strata/host_pinner.h"
#include "strata/pinned_pool.h"
#include "strata/tiered_store.h"

namespace strata {

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

// Where the engine runs and reports: the host communicator (host buffers), the compute device
// with its queues and collectives (borrowed, or the host device the engine made), the tracer.
struct EngineIo {
  Communicator* comm = nullptr;
  ComputeDevice* dev = nullptr;
  std::unique_ptr<ComputeDevice> own_device;  // the host device, when Create was given none
  Tracer* tracer = nullptr;
  // Waits (compute-side) for `e`, recording the wait on the trace when it blocks.
  Status ComputeAfter(const Event& e, const char* what) const;
  // Returns `lease` to its pool once `after` happened (a copy finished reading it).
  void ReleaseAfter(PinnedBuffer lease, const Event& after) const;
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
  // Where `h` lies in host memory when its home is the cpu tier (a block's working weights
  // read from there), or null (invalid, or on NVMe).
  const std::byte* InHostMemory(TensorHandle h) const;
};

// Block b's accumulated gradient over `range` (flat elements of its group), as the
// accumulator holds it: fp32 or bf16 bits (ShardPlan::gsize).
template <typename T>
std::span<const T> AccumulatedGradient(const BlockRuntime& br, const BlockPlan& bp, ElementRange range) {
  const T* g = reinterpret_cast<const T*>(br.grad);
  return {g + (range.begin - bp.grad.begin), static_cast<size_t>(range.len)};
}

// Whether a block's working weights may be used: its part of the running update is done and,
// at stages 1-2, shared with the other ranks (Note [Optimizer overlap]). The optimizer's side
// implements it; the Gatherer and the update modes hold it instead of the engine.
class BlockReadiness {
 public:
  virtual ~BlockReadiness() = default;
  // Block b may be gathered without waiting (what the compute reads of it is final).
  virtual bool BlockReady(int b) const = 0;
  // Waits until block b may be used (compute thread: it may share its weights across ranks).
  virtual Status AwaitBlock(int b) = 0;
  // Waits for block b's part of the running update, whatever the mode; `what` names it in the
  // trace and in an error.
  virtual Status WaitForUpdate(int b, const char* what) = 0;
};

}  // namespace strata
