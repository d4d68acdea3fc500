// Initial weights with Hugging Face names (GPT2LMHeadModel, LlamaForCausalLM and its
// Mistral / Qwen2 / Qwen3 / Phi-3 relatives (Phi-3: its fused projections split, hf_names.h),
// as save_pretrained writes them, or Strata's own
// export): the loader behind `train --init-from` and `strata.model.from`. The source is
//   * one safetensors file, or
//   * a model folder: its model.safetensors.index.json and the shards it names, or its
//     single model.safetensors.
// Open() reads only the files' headers (and the index); the tensor data is mapped shard by
// shard while a block is filled and unmapped afterwards, so host memory never holds more
// than the shards of the block being built, never the whole model. Names and shapes are
// validated against the model config; every mismatch of a block is reported at once,
// naming the tensor and the file that holds it.
#pragma once

#include <torch/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "src/hf/consolidate.h"
#include "src/engine/engine.h"
#include "src/model/model.h"
#include "strata/status.h"

namespace strata::ckpt {

class HfWeights {
 public:
  // `path`: a .safetensors file or a model folder (above). Every header is validated (byte
  // ranges inside the file); the index must name files that exist and hold what it says.
  static StatusOr<std::shared_ptr<HfWeights>> Open(const std::string& path, const model::ModelConfig& config);

  // Overwrites the fp32 parameters of block `block` (Strata names, as the Engine's hook
  // passes them) with the files' values (F32, BF16 or F16; transposed where HF differs).
  // Thread-safe (ranks as threads share one HfWeights); blocks may come in any order.
  Status FillBlock(int block, std::vector<std::pair<std::string, torch::Tensor>>& params);
  // An error listing the tensors that no block used (buffers and a tied LM head excepted),
  // with their files. Call after the last block.
  Status CheckAllUsed() const;
  const std::string& path() const { return path_; }

 private:
  struct Entry {  // one tensor: where it lives and what it is
    std::string name;  // as written in the file
    int file = 0;      // index into files_
    std::string dtype;
    std::vector<int64_t> shape;
    uint64_t offset = 0, bytes = 0;  // in the file
  };
  HfWeights(std::string path, model::ModelConfig c) : path_(std::move(path)), config_(std::move(c)) {}
  Status AddFile(const std::string& file, const std::set<std::string>* expected);
  Status OpenFolder();
  std::string FileName(int file) const;

  std::string path_;
  model::ModelConfig config_;
  std::vector<std::string> files_;
  std::map<std::string, Entry> by_canonical_;
  mutable std::mutex mu_;
  std::set<std::string> used_;
};

// The Engine hook for `--init-from`: fills each block, and after the last one checks that
// the source held nothing unexpected.
EngineHooks MakeInitFromHooks(std::shared_ptr<HfWeights> weights, int num_blocks);

// Loads the weights into a plain FullModel (tests compare its logits with transformers').
Status LoadIntoModel(HfWeights& weights, model::FullModel& model);

// The model a Strata checkpoint holds, as export would write it (a LoRA checkpoint with its
// adapters merged), for a plain FullModel: its config, and its weights read straight from the
// rank files one block at a time (no copy on disk). `model` must be built from ModelOf(c).
model::ModelConfig ModelOf(const Consolidator& c);
Status LoadCheckpointIntoModel(const Consolidator& c, model::FullModel& model);

}  // namespace strata::ckpt
