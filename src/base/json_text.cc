#include "src/base/json_text.h"

#include <fmt/format.h>

#include <vector>

#include "src/base/input_file.h"

namespace strata {
namespace {

// The byte offset where nesting first exceeds `max_depth`, or npos. Brackets inside strings
// (escapes included) do not count.
size_t DeepNestingOffset(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      if (ch == '\\') ++i;
      else if (ch == '"') in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > max_depth) return i;
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return std::string_view::npos;
}

template <typename Json>
StatusOr<Json> Parse(std::string_view text, const std::string& what, StatusCode code) {
  if (const size_t at = DeepNestingOffset(text, kMaxJsonDepth); at != std::string_view::npos)
    return Status(code, fmt::format("{}: nested deeper than {} levels at byte {}", what, kMaxJsonDepth, at));
  std::vector<std::string> keys;  // keys[d - 1]: the key being read at depth d
  auto track = [&](int depth, nlohmann::json::parse_event_t event, Json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth >= 1) {
      keys.resize(static_cast<size_t>(depth) - 1);
      keys.push_back(parsed.template get<std::string>());
    }
    return true;
  };
  try {
    return Json::parse(text, track);
  } catch (const nlohmann::json::parse_error& e) {
    return Status(code, fmt::format("{}: not valid JSON: {}", what, e.what()));
  } catch (const nlohmann::json::exception& e) {  // e.g. 406: a number overflowing a double
    std::string path;
    for (const std::string& k : keys) path += (path.empty() ? "" : ".") + k;
    return Status(code, fmt::format("{}: {}{}", what, path.empty() ? "" : path + ": ", e.what()));
  }
}

}  // namespace

StatusOr<nlohmann::json> ParseJsonText(std::string_view text, const std::string& what, StatusCode code) {
  return Parse<nlohmann::json>(text, what, code);
}

StatusOr<nlohmann::ordered_json> ParseOrderedJsonText(std::string_view text, const std::string& what,
                                                      StatusCode code) {
  return Parse<nlohmann::ordered_json>(text, what, code);
}

StatusOr<nlohmann::json> ReadJsonFile(const std::string& path, uint64_t max_bytes, StatusCode code) {
  STRATA_ASSIGN_OR_RETURN(std::string text, ReadInputFile(path, max_bytes, "a JSON input file"));
  return ParseJsonText(text, "'" + path + "'", code);
}

}  // namespace strata
