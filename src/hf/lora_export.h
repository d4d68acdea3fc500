// Folder-private: what export does with a LoRA checkpoint (strata.lora). Its layer blocks hold,
// after the frozen base, per adapted projection X the adapters "X.lora_A" [r, in] and
// "X.lora_B" [out, r] (PEFT's layout; model_config.h). Two ways out:
//   * the adapters alone as a PEFT adapter folder (ExportPeftAdapter in export.h, here), from
//     the fp32 masters;
//   * the merged model X.weight + (alpha / r) * X.lora_B @ X.lora_A, which Consolidator::Block
//     produces with MergeAdapters for both of export.h's Hugging Face forms. Its base is the
//     working copy in the run's compute dtype: a bf16 run's merged base is bf16-rounded.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "src/hf/consolidate.h"
#include "src/hf/export.h"
#include "src/model/model_config.h"
#include "strata/status.h"

namespace strata::ckpt {

using model::IsAdapterName;

// For every projection X of a layer block's layout `params` that has adapters:
// X.weight += scale * X.lora_B @ X.lora_A in `flat` (fp32; each element's delta is summed over
// the r terms first, then added once). The adapters must have been read (flat->seen); errors
// name `where` (the step folder), the block and the parameter.
Status MergeAdapters(const nlohmann::json& params, double scale, const std::string& where, FlatBlock* flat);

// Ok unless `c` is a LoRA checkpoint and `merge_lora` is false; then an error naming the flag
// that exports it (--merge-lora, or a folder for the PEFT adapter when `single_file`).
Status CheckLoraMerge(const Consolidator& c, bool merge_lora, bool single_file);

// The report of a merged export: what was merged (details), and how precise its base is
// (a note when the compute dtype was not fp32).
void DescribeMerge(const Consolidator& c, ExportReport* rep);

}  // namespace strata::ckpt
