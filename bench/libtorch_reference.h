#pragma once
// Plain LibTorch training of the same model, all in memory: the anchor that `bench step
// --vs-libtorch` measures Strata's in-memory path against (what a user would write without
// an offload trainer: one module, autograd's graph kept, torch::optim::AdamW).
#include <memory>

#include "src/data/data.h"
#include "src/config/train_config.h"
#include "strata/status.h"

namespace strata::bench {

class LibTorchReference {
 public:
  // fp32 on the CPU only (a plain bf16 run would need its own master weights).
  static StatusOr<std::unique_ptr<LibTorchReference>> Create(const TrainConfig& cfg);
  ~LibTorchReference();
  // One optimizer step over cfg.grad_accum micro-batches of the train split; returns the mean loss.
  double Step(int64_t step, const data::TokenDataset& data);

 private:
  struct State;
  explicit LibTorchReference(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace strata::bench
