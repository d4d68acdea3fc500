// Mixtures of experts: which experts a visit of a sparse layer's block reads from the working
// weights' tier (strata.expert_fetch, Note [Expert-aware fetching]) and how many of them are
// expected at uniform routing, for the step's traffic (step_traffic.h) and `strata estimate`.
#pragma once

#include <cstdint>
#include <string>

#include "src/config/train_config.h"
#include "src/engine/shard_plan.h"

namespace strata {

// The expected share of `num_experts` experts that at least one of `tokens` tokens routes to,
// each token choosing `top_k` distinct experts uniformly: 1 - (1 - top_k / E)^tokens; 1 for
// top_k >= E, 0 for no token. Uniform routing is the most spread: 1 - (1 - q)^T is concave in an
// expert's share q of the choices, so a router that prefers some experts fetches fewer in
// expectation. The worst case is min(E, tokens * top_k) experts.
double ExpectedExpertShare(int64_t num_experts, int64_t top_k, int64_t tokens);

// Tokens whose routing one visit of a block fetches by: a micro-batch's (layer-major, the whole
// step's); with ZeRO-3 across ranks, every rank's (they gather the experts together).
int64_t TokensPerVisit(const SettledConfig& cfg, const ShardPlan& plan);

// Bytes of block b's experts within `read` (elements of its flat group), in the compute dtype.
uint64_t ExpertBytesIn(const ShardPlan& plan, int b, ElementRange read);

// How the routing shapes a config's step, for `strata estimate`: one line for a dense model
// (none: ""), the experts, top-k, tokens per visit, the expected share fetched and the bytes
// per step (NVMe reads; off the host, copies to the device) at uniform routing against every
// expert, then the same at fewer tokens per visit.
std::string FormatExpertTraffic(const SettledConfig& cfg, const ShardPlan& plan);

}  // namespace strata
