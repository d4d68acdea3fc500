// `strata bench adam`: Strata's fused CPU AdamW on N parameters against the memory roofline
// (a pass with exactly Adam's access pattern and no arithmetic), STREAM triad, LibTorch's
// torch::optim::AdamW and DeepSpeed's CPU Adam, all in one run with their repetitions
// interleaved (the machine drifts by up to +-40% between minutes); medians and spread.
// Two variants: fp32 (28 B/param: read p, g, m, v; write p, m, v) and with the fused bf16
// copy of the weights (30 B/param), the latter against DeepSpeed's step followed by its own
// separate copy. Also oneDNN's reorder and norm beside the hand-written ones.
#pragma once

#include <cstdint>
#include <string>

namespace strata::bench {

struct AdamBenchOptions {
  uint64_t params = 100'000'000;  // N, elements per array
  int threads = 2;                // OpenMP threads for Strata, LibTorch and DeepSpeed alike
  int rounds = 7;                 // interleaved repetitions (each runs every variant once)
  bool json = false;              // one JSON object on stdout instead of the table
  bool libtorch = true;           // measure LibTorch's AdamW
  bool deepspeed = true;          // measure DeepSpeed's CPU Adam (null when not installed)
  bool onednn = true;             // measure oneDNN's reorder and norm
  std::string python;             // interpreter for the DeepSpeed peer; empty = default
  std::string deepspeed_script;   // bench/deepspeed_adam.py; empty = the one in the source tree built from
};

// Prints the table (or JSON) to stdout; returns the process exit code.
int RunAdamBench(const AdamBenchOptions& options);

}  // namespace strata::bench
