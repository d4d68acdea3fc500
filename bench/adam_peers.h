// The peers `strata bench adam` compares against, each holding its own N parameters:
//  - LibTorch's torch::optim::AdamW (fp32, CPU, in this process), and
//  - DeepSpeed's CPU Adam (DeepSpeedCPUAdam), run by bench/deepspeed_adam.py as a
//    persistent child process so that its repetitions interleave with Strata's.
// Both report the wall seconds of one optimizer step. Creation allocates and first-touches
// the peer's buffers and runs one untimed step (which allocates the Adam states).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "strata/status.h"

namespace strata::bench {

class AdamPeer {
 public:
  virtual ~AdamPeer() = default;
  // One step; `with_bf16_copy` adds the peer's own separate fp32 -> bf16 copy of the weights.
  virtual StatusOr<double> TimedStep(bool with_bf16_copy) = 0;
  virtual std::string Describe() const = 0;  // e.g. "LibTorch 2.11.0"
};

// Unavailable when Strata was built without LibTorch.
StatusOr<std::unique_ptr<AdamPeer>> MakeLibTorchAdamW(uint64_t params, int threads);

// `python` runs `script` (bench/deepspeed_adam.py). Unavailable with the child's reason when
// DeepSpeed cannot be imported or its op cannot be built. `optimizer`: "adam", or DeepSpeed's
// CPU "lion" or "adagrad" (Note [Update rules]).
StatusOr<std::unique_ptr<AdamPeer>> MakeDeepSpeedCpuAdam(const std::string& python, const std::string& script,
                                                         uint64_t params, int threads,
                                                         const std::string& optimizer = "adam");

// Defaults for the two paths above: $STRATA_PYTHON or <source>/.venv/bin/python, and
// <source>/bench/deepspeed_adam.py.
std::string DefaultPeerPython();
std::string DefaultDeepSpeedScript();

}  // namespace strata::bench
