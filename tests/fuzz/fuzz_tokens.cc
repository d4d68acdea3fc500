// libFuzzer target: token files to tokens. The first byte picks the format (text, uint16,
// uint32), the next two the vocabulary size; the rest is the file's content.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "src/data/token_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const strata::data::TokenFormat formats[] = {strata::data::TokenFormat::kText, strata::data::TokenFormat::kUint16,
                                               strata::data::TokenFormat::kUint32};
  const auto format = formats[data[0] % 3];
  const int64_t vocab = 1 + (static_cast<int64_t>(data[1]) << 8 | data[2]) * 4;
  std::vector<int32_t> tokens;
  const std::string_view bytes(reinterpret_cast<const char*>(data + 3), size - 3);
  if (strata::data::DecodeTokens(bytes, format, vocab, "fuzz.bin", tokens).ok())
    for (int32_t t : tokens)
      if (t < 0 || t >= vocab) __builtin_trap();  // a decoded token outside the vocabulary
  return 0;
}
