// A Hugging Face model folder's config.json <-> ModelConfig, without LibTorch.
//
// Read (`--init-from DIR`, `strata.model.from`): the family comes from "model_type" (else
// "architectures"): gpt2 (GPT2LMHeadModel), llama (LlamaForCausalLM, LLaMA 2 and 3 with
// "llama3" rope scaling), mistral (MistralForCausalLM), qwen2 (Qwen2ForCausalLM, Qwen2.5),
// qwen3 (Qwen3ForCausalLM). Rope settings are read in both spellings: transformers 4's
// "rope_theta" + "rope_scaling" and transformers 5's "rope_parameters". Anything that would
// change the math and that Strata does not implement (another rope type, attention or MLP
// biases where the family has none, another activation, a sliding window shorter than
// seq_len) is an error naming the key. seq_len is min(max_position_embeddings,
// kDefaultHfSeqLen); the caller may lower it (strata.model.seq_len).
//
// Write (`strata export --out DIR`): the config.json transformers' AutoModelForCausalLM
// needs for the same model, in transformers 4's spelling (which 5 reads too).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "src/model/model_config.h"
#include "strata/status.h"

namespace strata::model {

// The sequence length given to a model read from config.json when the run sets none: long
// enough for typical fine-tuning samples, short enough for this project's machines.
inline constexpr int64_t kDefaultHfSeqLen = 2048;

// `j` is the parsed config.json; `origin` names it in errors. The result passes Validate().
StatusOr<ModelConfig> ModelConfigFromHf(const nlohmann::json& j, const std::string& origin);

// Reads DIR/config.json and parses it as above.
StatusOr<ModelConfig> ReadHfModelConfig(const std::string& dir);

// The config.json of `c` for transformers: "architectures", "model_type" and the family's
// keys; `torch_dtype` is the weights' dtype name ("float32", "bfloat16", "float16").
nlohmann::ordered_json HfConfigJson(const ModelConfig& c, const std::string& torch_dtype);

// The Hugging Face model_type of `c`: hf_model_type, else "gpt2" / "llama".
std::string HfModelType(const ModelConfig& c);

}  // namespace strata::model
