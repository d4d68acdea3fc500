// The fuzz targets' inputs in parts: a fuzzer's bytes split at each NUL (a config text, then
// its --set overrides; for fuzz_estimate, the flags first).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::fuzz {

inline std::vector<std::string> SplitAtNul(const uint8_t* data, size_t size) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t nul; (nul = all.find('\0', start)) != std::string::npos; start = nul + 1)
    parts.push_back(all.substr(start, nul - start));
  parts.push_back(all.substr(start));
  return parts;
}

}  // namespace strata::fuzz
