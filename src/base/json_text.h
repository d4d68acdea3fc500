// JSON from a file nobody vouches for (configs, Hugging Face folders, manifests, safetensors
// headers): every failure is a Status, never a crash or an abort.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "strata/status.h"

namespace strata {

// Nesting deeper than this is refused naming its byte offset: nlohmann's copy and dump
// recurse per level, so a value 100,000 levels deep would overflow the stack later, far
// from the file that held it. Real configs nest a handful of levels.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`; errors carry `code` and start with `what` (the file, quoted). A number
// outside double's range names its key path.
StatusOr<nlohmann::json> ParseJsonText(std::string_view text, const std::string& what,
                                       StatusCode code = StatusCode::kInvalidArgument);

// The same for an ordered_json (files rewritten with their keys in the user's order).
StatusOr<nlohmann::ordered_json> ParseOrderedJsonText(std::string_view text, const std::string& what,
                                                      StatusCode code = StatusCode::kInvalidArgument);

// ReadInputFile (input_file.h) + ParseJsonText: `path` as JSON, at most `max_bytes`.
StatusOr<nlohmann::json> ReadJsonFile(const std::string& path, uint64_t max_bytes,
                                      StatusCode code = StatusCode::kInvalidArgument);

}  // namespace strata
