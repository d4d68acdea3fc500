// Consolidation of a sharded checkpoint into Hugging Face weights (DeepSpeed's
// zero_to_fp32): one safetensors file (ExportCheckpoint), or a model folder that
// transformers' from_pretrained loads (ExportHfFolder). The fp32 master shards of every rank
// are laid end to end per block, unpadded, split into parameters, renamed and (GPT-2
// Conv1D) transposed (consolidate.h). Torch-free: reads only the manifest and the rank files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "strata/status.h"

namespace strata::ckpt {

enum class ExportDType { kF32, kBF16, kF16 };

struct ExportReport {
  int64_t tensors = 0, parameters = 0, step = 0;
  uint64_t bytes = 0;  // of the weights
  std::string step_dir;
  // ExportHfFolder only:
  int shards = 0;
  std::string source;               // the folder tokenizer files came from ("" = none)
  std::vector<std::string> copied;  // their names
  std::vector<std::string> notes;   // e.g. a recorded source folder that no longer exists
};

// `checkpoint`: a checkpoint folder (its `latest`) or a step folder. Every rank file is
// verified against the manifest first. The output is written to `out`.tmp, fsynced and
// renamed. kF16: a weight beyond fp16's range is an error naming the tensor (export fp32 or
// bf16 instead); nothing is written then.
StatusOr<ExportReport> ExportCheckpoint(const std::string& checkpoint, const std::string& out, ExportDType dtype);

struct HfFolderOptions {
  ExportDType dtype = ExportDType::kF32;
  uint64_t max_shard_bytes = 5'000'000'000;  // transformers' default max_shard_size "5GB"
  // The Hugging Face folder to copy tokenizer files (and config.json keys Strata does not
  // model: token ids, layer_types, ...) from; "" = the one the checkpoint's manifest records
  // ("hf_source": the run's strata.model.from / --init-from DIR), if any.
  std::string source;
};

// Writes a Hugging Face model folder `out`:
//   config.json                         HfConfigJson() of the checkpoint's model (over the
//                                       source's config.json when there is one)
//   model-0000N-of-0000M.safetensors    tensors in block order, a new shard whenever the
//                                       next tensor would exceed max_shard_bytes (a larger
//                                       tensor gets a shard of its own)
//   model.safetensors.index.json        {"metadata": {"total_size"}, "weight_map"}
//   tokenizer files, generation_config.json    copied from the source folder
// Everything is written into `out`.tmp (fsynced), which then replaces `out` by rename: a
// killed export leaves `out` as it was (absent, or the previous export). An existing `out`
// is replaced only if it is empty or holds a config.json. One block's tensors and one shard
// are in memory at a time.
StatusOr<ExportReport> ExportHfFolder(const std::string& checkpoint, const std::string& out,
                                      const HfFolderOptions& options);

}  // namespace strata::ckpt
