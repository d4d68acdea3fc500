// Per-rank memory of a training run, computed from the config alone, before anything is
// allocated: the engine's own ShardPlan (flat groups padded to equal shards, optimizer
// sub-groups, pinned pools), so its ledger is what Engine::ledger() measures to the byte,
// plus an approximation of the activations (not in the ledger). `train` refuses a config
// whose estimate exceeds this machine; `strata estimate` prints it. No LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/engine/shard_plan.h"
#include "src/config/train_config.h"

namespace strata {

// Measured on the CPU build (peak resident growth of 1-step runs of tiny variants, micro-batch
// 1..16, less their state, activations and transients): 14.6-16 MB per rank.
inline constexpr uint64_t kRuntimeBytes = 16'000'000;

struct MemoryEstimate {
  MemoryLedger ledger;             // per rank, same categories as Engine::ledger()
  StateFormat format;  // how the master and the moments are stored (the master row's meaning)
  uint64_t activations = 0;        // per rank, on the compute device, approximate
  // Of which the blocks' inputs kept for the backward (every micro-batch's, layer-major): the
  // activation traffic of a step is these written once and read once.
  uint64_t boundary_activations = 0;
  // Of those, the ones in host memory (strata.block_inputs "host"): not in `activations`.
  uint64_t host_inputs = 0;
  // Per rank, outside the engine's ledger: its fp32 gradient scratch (the flat gradient of
  // the largest block, the reduced shard, the tied weight's pending gradient; compute
  // device) and the NVMe tier's staging buffers (host).
  uint64_t scratch = 0, staging = 0;
  uint64_t nvme_on_disk = 0;       // per rank: swap extents rounded up as the NVMe tier places them
  // Per rank, while a block's gradients are flattened: its parameter gradients in the
  // compute dtype plus one fp32 conversion (the tied weight's, in the head).
  uint64_t transients = 0;
  // Per rank: LibTorch's kernel workspaces and lazily built tables, thread stacks and
  // allocator slack. A constant measured on the CPU build (see kRuntimeBytes).
  uint64_t runtime = 0;
  // Per rank, while the engine is created: its two staging sets for the blocks' initial state
  // (Note [Building blocks]), 2 x (4 + working dtype) B x the largest padded block.
  uint64_t creation = 0;
  uint64_t pinned = 0;             // per rank: page-locked host memory (pinned pools, mlocked cpu tier)
  // Off the host (a GPU): pinned host copies of the reduced gradient shards.
  uint64_t grad_staging = 0;
  int64_t parameters = 0;
  int world = 1;
  bool host_device = true;         // blocks run on the host: "device" is host memory
  // What one rank holds in memory before activations: ledger device + cpu, scratch, staging.
  uint64_t resident_state() const;
  // One rank's peak on the compute device: its ledger, scratch, activations and transients
  // (on the host device these are host memory and count in host_peak() too).
  uint64_t device_peak() const;
  // One rank's peak host memory: the cpu tier, pools, staging and the runtime, plus the
  // device's share when the device is the host, or the creation staging if that is more.
  uint64_t host_peak() const;
  // Sums over all the ranks of this node.
  uint64_t node_host_bytes(int local_ranks) const;
  uint64_t node_nvme_bytes(int local_ranks) const { return nvme_on_disk * local_ranks; }
};

// `params_override` > 0 rescales every block so the model has that many parameters (the
// `estimate --params N` form); the config's shape otherwise. `device`: where blocks run (the
// host, or a GPU: double buffers, residency, a device tier of its own).
MemoryEstimate EstimateMemory(const SettledConfig& cfg, int world, int64_t params_override = 0,
                              DeviceTraits device = {});

struct MachineCapacity {
  uint64_t host_available = 0;  // MemAvailable
  uint64_t nvme_free = 0;       // free bytes of the swap folder's file system (0 = unknown)
  std::string nvme_dir;
  uint64_t device_memory = 0;   // bytes of one GPU (strata.device_memory, or the device's own); 0 = unknown
};
// This machine; `device_memory` from the config, else as given (the opened GPU's, or 0).
MachineCapacity ProbeMachine(const TrainConfig& cfg, uint64_t device_memory = 0);

// A "Key: N kB" field of a /proc file (/proc/meminfo, /proc/self/status) in bytes; 0 when
// the file or the key is absent. `key` includes the colon: "MemAvailable:", "VmHWM:".
uint64_t ProcKilobyteField(const char* file, const std::string& key);

// OK, or RESOURCE_EXHAUSTED with the numbers: needed per rank and per node against what
// this machine has.
Status CheckFits(const MemoryEstimate& e, const MachineCapacity& m, int local_ranks);

// A table: rows = state kinds, columns = device / cpu (pinned where pinned) / nvme.
std::string FormatEstimate(const MemoryEstimate& e);
std::string HumanBytes(uint64_t bytes);
// A run's measured figure beside its estimate, "M (estimated E, +P%)", P the estimate's error
// relative to the measurement; a figure measured as 0 against a nonzero estimate says so (no "+inf%").
std::string MeasuredVsEstimated(uint64_t measured, uint64_t estimated);

}  // namespace strata
