// Token files to tokens, without LibTorch (so a fuzzer can drive it). Formats
// (DataConfig::format, or kAuto by extension):
//   uint16  *.u16, *.uint16, *.bin  little-endian, 2 bytes a token. *.bin is nanoGPT's
//           train.bin convention; llm.c's .bin files, which start with a 1024-byte header
//           (magic 20240520, version 1, token count), are recognised and the header skipped.
//   uint32  *.u32, *.uint32         little-endian, 4 bytes a token.
//   text    anything else           UTF-8 bytes, one token per byte (vocab 256).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/data/data_config.h"
#include "strata/status.h"

namespace strata::data {

TokenFormat ResolveTokenFormat(TokenFormat format, const std::string& path);
// The whole file; a missing file, or one that is not a regular file, is an error naming it.
StatusOr<std::string> ReadTokenFile(const std::string& path);
// Bytes -> tokens, checking the size and every token against the vocabulary; errors name
// `name` and the position.
Status DecodeTokens(std::string_view bytes, TokenFormat format, int64_t vocab_size, const std::string& name,
                    std::vector<int32_t>& tokens);

}  // namespace strata::data
