// A Hugging Face model folder's model.safetensors.index.json, read without LibTorch (the
// fuzz target reads it too): {"metadata": {...}, "weight_map": {tensor name: shard file}}.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>

#include "strata/status.h"

namespace strata::ckpt {

// The index's weight_map as shard file -> the tensor names it holds. Every file must be a
// plain name inside the folder (no '/', not ".."); errors start with `origin`.
StatusOr<std::map<std::string, std::set<std::string>>> ParseSafetensorsIndex(std::string_view text,
                                                                            const std::string& origin);

}  // namespace strata::ckpt
