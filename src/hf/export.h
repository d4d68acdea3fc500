// Consolidation of a sharded checkpoint into Hugging Face weights (DeepSpeed's
// zero_to_fp32): one safetensors file (ExportCheckpoint), or a model folder that
// transformers' from_pretrained loads (ExportHfFolder). The fp32 master shards of every rank
// are laid end to end per block, unpadded, split into parameters, renamed and (GPT-2
// Conv1D) transposed (consolidate.h). Torch-free: reads only the manifest and the rank files.
//
// A LoRA checkpoint (strata.lora) keeps no master copy of its frozen base: its base comes from
// the working weights (compute dtype) and its adapters from the masters. It is exported either
// as a PEFT adapter folder (ExportPeftAdapter) or, with merge_lora, as the merged model
// W + (alpha / r) * B @ A in the two forms above (lora_export.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/model/model_config.h"
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
  // LoRA: what was merged, or what the adapter folder holds and how to load it (lines to show).
  std::vector<std::string> details;
};

// Where every export writes (export_target.h): never inside the checkpoint it reads (nor over
// a folder holding it); an existing output is replaced only when an earlier export wrote it
// and nothing else was added since, or with `overwrite` (--overwrite); the output is written
// under a temporary name beside it (removed on any failure or signal), fsynced, and renamed
// into place when complete.
//
// `checkpoint`: a checkpoint folder (its `latest`) or a step folder. Every rank file is
// verified against the manifest first. kF16: a weight beyond fp16's range is an error naming
// the tensor (export fp32 or bf16 instead); nothing is written then. A LoRA checkpoint needs
// merge_lora (the file then holds the merged model's weights); merge_lora has no effect on
// other checkpoints.
StatusOr<ExportReport> ExportCheckpoint(const std::string& checkpoint, const std::string& out, ExportDType dtype,
                                        bool merge_lora = false, bool overwrite = false);

struct HfFolderOptions {
  ExportDType dtype = ExportDType::kF32;
  uint64_t max_shard_bytes = 5'000'000'000;  // transformers' default max_shard_size "5GB"
  // The Hugging Face folder to copy tokenizer files (and config.json keys Strata does not
  // model: token ids, layer_types, ...) from; "" = the one the checkpoint's manifest records
  // ("hf_source": the run's strata.model.from / --init-from DIR), if any.
  std::string source;
  // A LoRA checkpoint is exported as its merged model (required for one; no effect on others).
  bool merge_lora = false;
  bool overwrite = false;  // replace `out` even if strata export did not write it
};

// Writes a Hugging Face model folder `out`:
//   config.json                         HfConfigJson() of the checkpoint's model (over the
//                                       source's config.json when there is one)
//   model-0000N-of-0000M.safetensors    tensors in block order, a new shard whenever the
//                                       next tensor would exceed max_shard_bytes (a larger
//                                       tensor gets a shard of its own)
//   model.safetensors.index.json        {"metadata": {"total_size"}, "weight_map"}
//   tokenizer files, generation_config.json    copied from the source folder
//   .strata-export.json                 what this export wrote (so a later export may replace it)
// A killed export leaves `out` as it was (absent, or the previous export). One block's
// tensors and one shard are in memory at a time.
StatusOr<ExportReport> ExportHfFolder(const std::string& checkpoint, const std::string& out,
                                      const HfFolderOptions& options);

// The checkpoint's strata.lora (r = 0 when it was trained without adapters). Reads the
// manifest only.
StatusOr<model::LoraConfig> CheckpointLora(const std::string& checkpoint);

struct PeftOptions {
  ExportDType dtype = ExportDType::kF32;
  // The base model's folder named in adapter_config.json (base_model_name_or_path); "" = the
  // checkpoint's recorded hf_source, if any (else null).
  std::string source;
  bool overwrite = false;  // replace `out` even if strata export did not write it
};

// Writes the adapters of a LoRA checkpoint as a PEFT adapter folder `out` that
// peft.PeftModel.from_pretrained(base, out) loads:
//   adapter_config.json          peft_type LORA, task_type CAUSAL_LM, r, lora_alpha,
//                                lora_dropout, target_modules, base_model_name_or_path, ...
//   adapter_model.safetensors    base_model.model.model.layers.<i>.<module>.lora_A.weight [r, in]
//                                and .lora_B.weight [out, r], from the fp32 masters, in dtype
// Written as ExportHfFolder writes (a model folder is not replaced by an adapter folder, nor
// the reverse). Reads only the masters of the rank files.
StatusOr<ExportReport> ExportPeftAdapter(const std::string& checkpoint, const std::string& out,
                                         const PeftOptions& options);

}  // namespace strata::ckpt
