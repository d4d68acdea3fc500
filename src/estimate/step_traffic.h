// NVMe bytes one rank moves per training step, from the ledger of its placement: the
// arithmetic a trace of the step is checked against (tests/engine/step_traffic_test.cc).
#pragma once

#include <cstdint>

#include "src/engine/shard_plan.h"
#include "src/config/train_config.h"

namespace strata {

// Per rank, per step from the third on (the first steps read no moments: zero until the first
// update has written them, Note [Known zero]); no evaluation, no rolled-back speculation.
struct StepTraffic {
  // Every state on NVMe the step updates, written once: working weights (unless frozen,
  // LoRA's base), fp32 master, m and v (mixtures of experts: not those of an expert no token
  // of the step chose, at uniform routing). A write still in flight when a step ends counts in
  // the next, so single steps scatter around it.
  uint64_t written = 0;
  // At most: the optimizer states once, and the working weights once per forward and once
  // per backward of every micro-batch (layer-major: of the whole step). Less when a block's weights are still in memory (the
  // last block turns from forward to backward), or when the optimizer overlaps the forward
  // and the first forward of a block finds the write-back of its update still in flight
  // (Note [Write-backs]): `read_served` then, as when the disk is what the step waits for.
  // Mixtures of experts: a visit that reads only the routed experts (ShardPlan::FetchesRouted)
  // counts its experts at their expected share at uniform routing (expert_traffic.h), the
  // most spread routing; the update's reads are whole.
  uint64_t read_at_most = 0;
  uint64_t read_served = 0;
  uint64_t read_all_experts = 0;  // read_at_most with every visit reading every expert
  uint64_t states = 0;   // of which master, m and v: read and written once
  uint64_t working = 0;  // the working weights on NVMe
};

// From `plan`'s ledger (its NVMe bytes) and where it keeps the master; a visit of a block
// computes `tokens_per_visit` tokens (the config's: TokensPerVisit).
StepTraffic EstimateStepTraffic(const SettledConfig& cfg, const ShardPlan& plan);
StepTraffic EstimateStepTraffic(const SettledConfig& cfg, const ShardPlan& plan, int64_t tokens_per_visit);

// Per rank, per training step off the host (a GPU, the fake device): the bytes its copies
// move over the host link. In: the working weights of every block that is not resident, at
// each gather (forward and backward of each micro-batch; the head once), and the resident
// blocks' updated ranges once. Out: the reduced gradients, of every micro-batch, or once per
// step when they are summed on the device (Note [Device accumulation]). Zero on the host.
// Mixtures of experts: `in` at uniform routing, as StepTraffic's reads.
struct LinkTraffic {
  uint64_t in = 0, out = 0;
  uint64_t in_all_experts = 0;  // `in` with every gather copying every expert
};
LinkTraffic EstimateLinkTraffic(const SettledConfig& cfg, const ShardPlan& plan);
LinkTraffic EstimateLinkTraffic(const SettledConfig& cfg, const ShardPlan& plan, int64_t tokens_per_visit);

}  // namespace strata
