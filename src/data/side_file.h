// The header that ties a side file (PATH.examples, PATH.mask) to the token file it was written
// for, without LibTorch. A side file describes its token file token by token; one left beside
// a token file it was not written for (the token file regenerated, a file copied from another
// run) would train on wrong boundaries or a wrong mask without a word, as long as its sizes
// happened to fit. So scripts/prepare_data.py starts each with 32 bytes, little-endian:
//
//   0  16  "STRATA-EXAMPLES\n", "STRATA-LOSSMASK\n" or "STRATA-DPOPAIRS\n"
//   16  8  uint64  tokens in the token file
//   24  4  uint32  CRC-32 (zlib's) of the token file's bytes, as stored
//   28  4  uint32  format version, 1
//
// and the run refuses a side file whose count or CRC differs from its token file's, naming
// both. A file without the header (written before it, or by hand: one byte per token, or the
// uint64 starts alone) is still read, checked by its size only, and said to be unchecked.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "strata/status.h"

namespace strata::data {

// PATH.pairs (preference pairs, Note [DPO]) is the header alone: its token file's examples are
// pairs, chosen then rejected.
enum class SideKind { kExamples, kLossMask, kPairs };

inline constexpr size_t kSideHeaderBytes = 32;

// What identifies a token file: its token count and the CRC-32 of its bytes.
struct TokenFingerprint {
  uint64_t tokens = 0;
  uint32_t crc32 = 0;
  bool operator==(const TokenFingerprint&) const = default;
};

// The CRC-32 of `bytes` (zlib's crc32, as Python's zlib.crc32 computes it).
uint32_t Crc32(std::string_view bytes);

// The 32-byte header of a side file of `kind` for the token file `fingerprint` describes.
std::string SideFileHeader(SideKind kind, const TokenFingerprint& fingerprint);

// A side file's bytes checked against its token file: its payload (after the header), or
// the whole file when it has no header (*fingerprinted false). An error names both files when
// the header is for another kind, a newer version, or another token file.
StatusOr<std::string_view> SideFilePayload(std::string_view bytes, SideKind kind, const TokenFingerprint& token_file,
                                           const std::string& side_path, const std::string& token_path,
                                           bool* fingerprinted);

}  // namespace strata::data
