// Folder-private: the Engine's state, shared by engine.cc (set-up, forward, backward) and
// engine_optimizer.cc (norm, clipping, AdamW pipeline).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>

#include "src/engine/compute_device.h"
#include "src/engine/engine.h"
#include "src/engine/loss_scaler.h"
#include "src/engine/prefetch.h"
#include "src/model/model.h"
#include "strata/cpu_adam.h"
#include "strata/flat_group.h"
#include "strata/pinned_pool.h"
#include "strata/tiered_store.h"

namespace strata {

struct ParamSlot {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // elements from the start of the flat group
  int64_t numel = 0;
};

// One optimizer sub-group: [begin, begin+len) of the flat group.
struct SubGroup {
  int64_t begin = 0, len = 0;
  TensorHandle master, m, v;
};

struct Group {
  int index = 0;
  std::shared_ptr<model::Block> module;
  std::vector<torch::Tensor> params;  // the module's parameters, in flat order
  std::vector<ParamSlot> slots;
  ShardLayout layout;
  TensorHandle working;             // compute dtype: stage 3 the shard, else the padded group
  int64_t working_begin = 0;        // flat offset of working[0]
  int64_t working_len = 0;          // elements
  int64_t opt_begin = 0, opt_len = 0;  // this rank's optimizer range
  std::vector<SubGroup> subs;
  float* grad_acc = nullptr;        // fp32, grad_len elements, flat offset grad_begin
  int64_t grad_begin = 0, grad_len = 0;
  int tied_slot = -1;               // owner: index of the slot the head borrows
};

// One optimizer sub-group's states (master, m, v) being read into pinned buffers.
struct LoadedStates {
  const SubGroup* sub = nullptr;
  PinnedBuffer buf[3];
  Ticket read[3];
};

// A write whose source memory must stay leased until it completes.
struct PendingWrite {
  Ticket ticket;
  std::vector<PinnedBuffer> leases;
};

struct Engine::Impl {
  TrainConfig cfg;
  EngineHooks hooks;
  Communicator* comm = nullptr;   // host buffers
  ComputeDevice dev{torch::Device(torch::kCPU), nullptr};
  Communicator* dcomm = nullptr;  // device buffers (== comm on the host)
  Tracer* tracer = nullptr;
  std::unique_ptr<model::ModelSpec> spec;
  std::optional<model::Tie> tie;
  std::vector<Group> groups;
  std::unique_ptr<TieredStore> store;
  std::unique_ptr<PinnedPool> param_pool;  // NVMe working-weight fetches and write-backs
  std::unique_ptr<PinnedPool> optim_pool;  // NVMe optimizer-state sub-groups
  MemoryLedger ledger;
  LossScaler scaler{LossScaleConfig{}, false};
  torch::ScalarType compute = torch::kFloat32;
  int stage = 3;
  bool weights_sharded = true, grads_sharded = true, optim_sharded = true;

  // Scratch, allocated once.
  torch::Tensor gather[2];       // full padded group, compute dtype (current, tied owner)
  torch::Tensor flat_grad;       // fp32, max padded elements
  torch::Tensor reduced;         // fp32, max shard elements
  torch::Tensor pending_tied;    // fp32 grad of the tied weight from the head
  torch::Tensor shard_in;        // off-host only: this rank's working shard, before the all-gather
  torch::Tensor grad_host;       // off-host only: fp32 gradients copied out (pinned)
  std::vector<float*> host_allocs;
  std::vector<size_t> host_alloc_bytes;

  // Writes still in flight, by store tensor: a read of that tensor waits for them first.
  std::map<uint32_t, std::shared_ptr<PendingWrite>> pending_writes;
  std::deque<std::shared_ptr<PendingWrite>> write_queue;  // in issue order, to reap leases
  // The first sub-group's states, read during the last micro-batch so that the optimizer
  // step does not start by waiting for NVMe; consumed (or dropped) by OptimizerStep.
  std::unique_ptr<LoadedStates> early_states;
  uint64_t prefetch_high_water = 0;
  int64_t adam_steps = 0;  // steps applied (skipped ones excluded): Adam's bias correction

  // engine.cc
  Status Init();
  Status RunMicroBatch(const data::Batch& batch, PrefetchScheduler* prefetch, double* loss);
  Status Gather(int g, int slot, PrefetchScheduler* prefetch);
  void Bind(int g, int slot);
  Status ReduceGradients(int g);
  std::vector<int> VisitPlan(int micro_batches, bool backward) const;
  std::unique_ptr<PrefetchScheduler> MakePrefetcher(std::vector<int> plan);
  Status BatchToDevice(const data::Batch& batch, torch::Tensor* inputs, torch::Tensor* targets) const;
  // Frees pinned buffers held by write-backs: retires finished ones, else waits for the
  // oldest. False when no write-back is in flight (nothing to reclaim).
  bool ReclaimWriteBuffers();
  Ticket ReadAfterPendingWrite(TensorHandle h, std::span<std::byte> dst);
  void RetireWrites(bool all);

  // engine_optimizer.cc
  StatusOr<bool> OptimizerStep(int64_t step, StepStats* stats);
  Status UpdateAllGroups(const AdamHyperParams& hp);
  // Issues the reads of `sg`'s master, m and v into `l`'s buffers (already leased).
  void StartStateReads(const SubGroup& sg, LoadedStates* l);
  void ReadFirstStatesEarly();  // best effort, never blocks
  void DropEarlyStates();       // waits for its reads, returns its buffers
};

}  // namespace strata
