// Consolidation of a sharded checkpoint into one safetensors file with Hugging Face names
// (DeepSpeed's zero_to_fp32): the fp32 master shards of every rank are laid end to end per
// block, unpadded, split into parameters, renamed and (GPT-2 Conv1D) transposed.
// Torch-free: reads only the manifest and the rank files.
#pragma once

#include <string>

#include "strata/status.h"

namespace strata::ckpt {

enum class ExportDType { kF32, kBF16, kF16 };

struct ExportReport {
  int64_t tensors = 0, parameters = 0, step = 0;
  uint64_t bytes = 0;
  std::string step_dir;
};

// `checkpoint`: a checkpoint folder (its `latest`) or a step folder. Every rank file is
// verified against the manifest first. The output is written to `out`.tmp, fsynced and
// renamed. kF16: a weight beyond fp16's range is an error naming the tensor (export fp32 or
// bf16 instead); nothing is written then.
StatusOr<ExportReport> ExportCheckpoint(const std::string& checkpoint, const std::string& out, ExportDType dtype);

}  // namespace strata::ckpt
