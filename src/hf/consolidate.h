// Folder-private: a sharded checkpoint read back as Hugging Face tensors, block by block
// (what both exports write). The fp32 master shards of every rank are laid end to end per
// block, unpadded, split into parameters, renamed and (GPT-2 Conv1D) transposed, then
// converted to the export dtype. A LoRA checkpoint has masters for its adapters only: its
// frozen base comes from the working weights (compute dtype, widened to fp32), and its blocks
// are the merged model's (lora_export.h). Torch-free: reads only the manifest and the rank
// files (mapped; one block's flat group in memory at a time).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <vector>

#include "src/hf/export.h"
#include "src/checkpoint/safetensors.h"
#include "src/engine/shard_plan.h"
#include "src/model/model_config.h"

namespace strata::ckpt {

// One output tensor; `view.bytes` points into `bytes`.
struct ExportedTensor {
  TensorView view;
  std::vector<std::byte> bytes;
  int64_t numel = 0;
};

// One layout block's flat group in fp32 (`padded` elements) and which of them a rank file held.
struct FlatBlock {
  int block = 0;
  std::vector<float> values;
  std::vector<char> seen;
  // QLoRA: the working weights' bytes too (esize bytes an element), where NF4 blobs lie.
  bool keep_raw = false;
  std::vector<std::byte> raw;
  int64_t esize = 0;
};

// An output tensor's name, dtype, shape and size, known from the manifest alone.
struct PlannedTensor {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
};

class Consolidator {
 public:
  // `checkpoint`: a checkpoint folder (its `latest`) or a step folder. Every rank file is
  // verified against the manifest (size, xxh3).
  static StatusOr<Consolidator> Open(const std::string& checkpoint);

  const std::string& step_dir() const { return step_dir_; }
  const nlohmann::json& manifest() const { return manifest_; }
  const model::ModelConfig& model() const { return model_; }
  int num_blocks() const { return static_cast<int>(manifest_["layout"].size()); }
  bool lora() const { return model_.lora.enabled(); }

  // Every output tensor in writing order (blocks in order, parameters in layout order; for a
  // LoRA checkpoint the merged model's: no adapters).
  std::vector<PlannedTensor> Plan(ExportDType dtype) const;
  // The output tensors of the i-th layout block, in Plan() order (LoRA: merged). kF16: a
  // weight beyond fp16's range is an error naming the tensor.
  StatusOr<std::vector<ExportedTensor>> Block(int i, ExportDType dtype) const;

  // The i-th layout block's flat group from the masters; with `with_base`, a LoRA
  // checkpoint's frozen base too, from the working weights (earlier elements; the masters
  // still win where both exist). Without LoRA the masters cover everything.
  StatusOr<FlatBlock> Flat(int i, bool with_base) const;
  // Layout entry `p` of `flat` as the output tensor `name` in `dtype` ([out, in] -> [in, out]
  // with `transpose`); every element must have been seen. `view.bytes` is set.
  StatusOr<ExportedTensor> Extract(const FlatBlock& flat, const nlohmann::json& p, const std::string& name,
                                   bool transpose, ExportDType dtype) const;

 private:
  Consolidator() = default;
  // Every rank's working weights of flat->block into *flat (the frozen base of a LoRA block).
  Status ReadWorking(FlatBlock* flat) const;
  // QLoRA: *flat with its NF4 weights decoded and *params' offsets moved to match.
  Status ExpandNf4(FlatBlock* flat, nlohmann::json* params) const;

  std::string step_dir_;
  nlohmann::json manifest_;
  model::ModelConfig model_;
  std::vector<SafetensorsFile> files_;
  // LoRA: per rank, per block, the flat range of its working weights (ShardPlan's).
  std::vector<std::vector<ElementRange>> working_;
};

const char* SafetensorsDTypeName(ExportDType dtype);  // "F32", "BF16", "F16"

}  // namespace strata::ckpt
