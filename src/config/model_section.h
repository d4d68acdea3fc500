// Folder-private: the "strata.model" section of a config (ParseTrainConfig's part for the
// architecture): its keys one by one, or "from": a Hugging Face folder whose config.json
// sets them (hf_config.h). ModelConfigJson / ParseModelConfigJson are in train_config.h.
#pragma once

#include "src/config/json_reader.h"
#include "src/config/train_config.h"

namespace strata {

// Reads strata.model from `strata` into config->model (and config->model_from), validated.
// With "from", seq_len and init_std may still be set; other keys that differ from the
// folder's are ignored with a note in config->notes.
Status ParseModelSection(JsonReader& strata, TrainConfig* config);
// strata.lora (and a manifest's model.lora) into *lora: r, alpha, dropout, target_modules
// (default q_proj, v_proj, as PEFT's for LLaMA). Validate() judges the values.
Status ParseLora(JsonReader& lora_section, model::LoraConfig* lora);

}  // namespace strata
