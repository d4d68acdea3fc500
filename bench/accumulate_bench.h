// `strata bench accumulate`: adding a reduced gradient (fp32) times 1 / (accumulation x
// world) into the host accumulators, fp32 and bf16, with AccumulateGradient (strata/cpu_adam.h)
// against the anchor it replaced, LibTorch's add_(part, alpha), both on LibTorch's intra-op
// thread count; repetitions interleaved; medians and spread.
#pragma once

#include <cstdint>

namespace strata::bench {

struct AccumulateBenchOptions {
  uint64_t values = 64ull << 20;  // elements per accumulator
  int rounds = 7;                 // interleaved repetitions
  bool json = false;              // one JSON object on stdout instead of the table
};

// Prints the table (or JSON) to stdout; returns the process exit code.
int RunAccumulateBench(const AccumulateBenchOptions& options);

}  // namespace strata::bench
