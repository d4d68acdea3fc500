// Engine: the ZeRO training step of DESIGN.md ("One training step") on one rank.
//
// Every block of the model is one flat group, padded and split into equal shards. Per
// rank and group the engine keeps, each in its home tier through the TieredStore:
//   working weights (compute dtype): stage 3 a shard, else the full group   (offload_param)
//   fp32 master, Adam m and v: this rank's optimizer range                  (offload_optimizer)
//   fp32 gradient accumulator: stage >= 2 a shard, else the full group      (host memory)
// A step: forward block by block (gather, run, keep only the block's input), the head's
// forward and backward together, backward block by block by recomputation (gather again,
// recompute, backprop, reduce gradients into the accumulator), then the global gradient
// norm across ranks (with NaN/Inf detection: an fp16 overflow skips the step), then
// CPU AdamW by sub-group, pipelined with the NVMe reads and writes of the optimizer state;
// its fused output is the next step's working weights. The PrefetchScheduler keeps the
// reads of upcoming working weights in flight while blocks compute.
//
// The engine borrows the communicators, the compute device and the tracer; the caller owns
// them. Blocks run on the compute device (the host, or a GPU); every state stays on the host.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "src/data/data.h"
#include "src/engine/compute_device.h"
#include "src/engine/train_config.h"
#include "strata/communicator.h"
#include "strata/nvme_tier.h"
#include "strata/status.h"
#include "strata/trace.h"

namespace strata {

struct StepStats {
  int64_t step = 0;
  double loss = 0;        // mean over the step's micro-batches and ranks
  double grad_norm = 0;   // global, unscaled, before clipping (NaN/Inf when skipped)
  double lr = 0;
  double loss_scale = 1;
  bool skipped = false;   // fp16 overflow: no state was updated
  int64_t tokens = 0;     // tokens of the global batch
  double seconds = 0;     // wall time of the step on this rank
  double wait_s = 0;      // time the compute thread waited for transfers (exposed)
  double compute_s = 0, comm_s = 0, optimizer_s = 0;
  uint64_t nvme_read_bytes = 0, nvme_write_bytes = 0;
};

// Bytes this rank holds, by what they are and where they live. On a CPU build "device"
// is host memory that is not offloaded (offload device "none").
enum class StateKind { kWorking, kMaster, kAdamM, kAdamV, kGradAccum, kGatherBuffers, kPinnedBuffers };
inline constexpr int kNumStateKinds = 7;
enum class Residence { kDevice, kCpu, kNvme };
struct MemoryLedger {
  uint64_t bytes[kNumStateKinds][3] = {};
  uint64_t Total(Residence r) const;
  uint64_t Of(StateKind k) const;
};

// Optional behaviour at creation.
struct EngineHooks {
  // Replaces the seeded initial weights of block `block`: `params` holds the block's fp32
  // parameters (name -> tensor, registration order); overwrite their values in place
  // (e.g. from a safetensors file). An error (a missing name, a shape mismatch) aborts
  // Create with that error.
  std::function<Status(int block, std::vector<std::pair<std::string, torch::Tensor>>& params)> init_weights;
};

// The counters a checkpoint must carry besides the tensors.
struct EngineCounters {
  int64_t adam_steps = 0;  // optimizer steps applied (Adam's bias correction)
  double loss_scale = 1;
  int64_t clean_steps = 0;
  int hysteresis_left = 0;
};

class Engine {
 public:
  // `comm`: the host communicator (host buffers). `device`: where blocks run, with its
  // communicator for device buffers; null = the host, collectives on `comm`. Both borrowed.
  static StatusOr<std::unique_ptr<Engine>> Create(const TrainConfig& config, Communicator* comm, Tracer* tracer,
                                                  EngineHooks hooks = {}, const ComputeDevice* device = nullptr);
  ~Engine();

  // One optimizer step (gradient_accumulation_steps micro-batches). `step` is 0-based and
  // picks the data. Collective: every rank calls it with the same step.
  StatusOr<StepStats> Step(int64_t step, const data::TokenDataset& data);
  // Mean loss over `batches` eval batches per rank, averaged over ranks. Collective.
  StatusOr<double> EvalLoss(const data::TokenDataset& data, int64_t batches);

  // The fp32 master weights of block `b`, unflattened, by parameter name. Collective.
  StatusOr<std::vector<std::pair<std::string, torch::Tensor>>> MasterParameters(int block);

  // This rank's shard of the training state, tensor by tensor, in a fixed order: for each
  // block its working weights ("block3.working", compute dtype) then, per optimizer
  // sub-group, "block3.<offset>.master" / ".adam_m" / ".adam_v" (fp32). Waits for writes in
  // flight first. Not collective.
  Status VisitState(const std::function<Status(const std::string& name, std::span<const std::byte> bytes)>& visit);
  // Overwrites one tensor visited by VisitState (same name, same byte count).
  Status RestoreState(const std::string& name, std::span<const std::byte> bytes);
  EngineCounters counters() const;
  void set_counters(const EngineCounters& c);
  // Where this rank's parameters live: [begin, end) of each block's flat group and the
  // parameter slots (name, shape, flat offset), for consolidating checkpoints.
  struct ParamInfo {
    std::string name;
    std::vector<int64_t> shape;
    int64_t offset = 0, numel = 0;
  };
  std::vector<ParamInfo> BlockParams(int block) const;
  int64_t BlockPadded(int block) const;

  int num_blocks() const;
  const MemoryLedger& ledger() const;
  uint64_t swap_bytes_on_disk() const;  // this rank's swap file, as allocated on disk (0 without NVMe)
  NvmeTierStats nvme_stats() const;     // this rank's NVMe tier's counters (zeros without NVMe)
  uint64_t prefetch_high_water_bytes() const;
  uint64_t prefetch_budget_bytes() const;
  const TrainConfig& config() const;

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
