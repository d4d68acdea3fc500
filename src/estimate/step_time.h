// The step-time model: for a config and a machine, the time each resource needs per training
// step (device compute from FLOPs, the host link, the NVMe drive's reads and writes together,
// the CPU Adam, the host's gradient accumulation), the step time those give under what the
// schedule overlaps, and the resource that binds. The ZeRO-Infinity paper's analysis
// (efficiency = compute / (compute + exposed transfer), per link), applied to Strata's own
// byte counts (step_traffic.h). Pure arithmetic: the rates come from a measurement of this
// machine (bench/machine_rates.h) or from a named machine's nominal figures.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "src/config/train_config.h"
#include "src/engine/shard_plan.h"
#include "strata/status.h"

namespace strata {

struct MachineRates {
  std::string name;             // "this machine", "H100 SXM"
  std::string source;           // how the figures were had ("measured: ...", "nominal: ...")
  bool host_device = true;      // blocks run on the host CPU (no host link)
  double flops = 0;             // FLOP/s of a block's training pass at the config's shapes and dtype
  // Measured: one pass through every block at `probe_tokens` tokens, seconds (scaled to the
  // step's tokens), the host's gradient accumulation included; 0 = from `flops`.
  double micro_batch_s = 0, probe_tokens = 0;
  double link_in = 0, link_out = 0;      // host to device, device to host, B/s
  double nvme_read = 0, nvme_write = 0;  // through the tier, B/s
  double nvme_mixed = 0;        // a reader and a writer at once, B/s of both (0: not measured)
  double adam = 0;              // CPU Adam, parameters per second (its whole in-memory pass)
  double accumulate = 0;        // host gradient accumulation, elements per second (flatten + add)
  // Blocks on the host: the CPU's work per byte moved through the NVMe tier, which competes with
  // the compute for the same cores: a fetched block copied into its gather buffer (one thread),
  // each piece read or written hashed (xxh3, verify_checksums). B/s; 0 = not counted.
  double host_copy = 0, checksum = 0;
  // The blocks' group collectives (tensor and sequence parallelism): bytes a rank receives per
  // second: the ranks' TCP ring on the host, NVLink between GPUs. 0 = not counted.
  double group_link = 0;
  uint64_t device_memory = 0;   // bytes of one GPU (nominal machines)
};

// The nominal machines: "h100-pcie", "h100-sxm", "h200", "gh200" (the figures and what they
// assume are in step_time.cc). InvalidArgument naming the choices for any other name.
StatusOr<MachineRates> NominalMachine(std::string_view name);
const char* NominalMachineNames();

struct ResourceTime {
  std::string name;   // "compute", "host link", "NVMe", "CPU Adam", "host accumulation", "group collectives"
  double seconds = 0;
  std::string work;   // what it moves or computes per step
};

struct StepTimePrediction {
  std::vector<ResourceTime> resources;  // each alone, per step
  double step_s = 0;                    // predicted, with the schedule's overlap
  std::string binding;                  // the resource whose time sets the step
  std::string overlap;                  // how the times combine, one sentence
  double flops = 0;                     // per rank per step
};

// FLOPs of one rank's step: the model's training FLOPs per token (forward + backward) times its
// tokens, plus the blocks' forward once more where each is recomputed in its backward.
double StepFlops(const SettledConfig& cfg);
// Muon (Note [Muon]): Newton-Schulz's FLOPs per step over every matrix of a LLaMA-shaped model
// (5 iterations of X X^T, A A and B X on each n x m matrix, n <= m); 0 for other optimizers.
double MuonNewtonSchulzFlops(const TrainConfig& cfg);

// Per rank. `plan` is the config's own (ShardPlan::Make with the machine's device traits).
StepTimePrediction PredictStepTime(const SettledConfig& cfg, const ShardPlan& plan, const MachineRates& machine);

// The table `estimate` and `train --predict` print.
std::string FormatPrediction(const StepTimePrediction& p, const MachineRates& machine);

}  // namespace strata
