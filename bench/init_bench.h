// `strata bench init`: drawing initial weights, FillNormal (strata/normal.h) against the
// anchor it replaced, LibTorch's normal_ with its own generator, on one thread and on every
// thread (a stream, or a generator, per thread), repetitions interleaved; medians and spread.
#pragma once

#include <cstdint>

namespace strata::bench {

struct InitBenchOptions {
  uint64_t values = 64ull << 20;  // fp32 values per thread and draw
  int rounds = 7;                 // interleaved repetitions
  bool json = false;              // one JSON object on stdout instead of the table
};

// Prints the table (or JSON) to stdout; returns the process exit code.
int RunInitBench(const InitBenchOptions& options);

}  // namespace strata::bench
