// Initial weights from a safetensors file with Hugging Face names (GPT2LMHeadModel,
// LlamaForCausalLM, as save_pretrained writes them, or Strata's own export): the loader
// behind `train --init-from`. Names and shapes are validated against the model config;
// every mismatch of a block is reported at once, with the file name.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "src/checkpoint/safetensors.h"
#include "src/engine/engine.h"
#include "src/model/model.h"

namespace strata::ckpt {

class HfWeights {
 public:
  static StatusOr<std::shared_ptr<HfWeights>> Open(const std::string& path, const model::ModelConfig& config);

  // Overwrites the fp32 parameters of block `block` (Strata names, as the Engine's hook
  // passes them) with the file's values (F32, BF16 or F16; transposed where HF differs).
  // Thread-safe (ranks as threads share one HfWeights).
  Status FillBlock(int block, std::vector<std::pair<std::string, torch::Tensor>>& params);
  // An error listing the file's tensors that no block used (buffers and a tied LM head
  // excepted). Call after the last block.
  Status CheckAllUsed() const;
  const std::string& path() const { return file_.path(); }

 private:
  HfWeights(SafetensorsFile f, model::ModelConfig c) : file_(std::move(f)), config_(std::move(c)) {}
  SafetensorsFile file_;
  model::ModelConfig config_;
  std::map<std::string, const TensorView*> by_canonical_;
  mutable std::mutex mu_;
  std::set<std::string> used_;
};

// The Engine hook for `--init-from`: fills each block, and after the last one checks that
// the file held nothing unexpected.
EngineHooks MakeInitFromHooks(std::shared_ptr<HfWeights> weights, int num_blocks);

// Loads the file into a plain FullModel (tests compare its logits with transformers').
Status LoadIntoModel(HfWeights& weights, model::FullModel& model);

}  // namespace strata::ckpt
