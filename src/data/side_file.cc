#include "src/data/side_file.h"

#include <zlib.h>

#include <cstring>

namespace strata::data {
namespace {

constexpr char kExamplesMagic[] = "STRATA-EXAMPLES\n";
constexpr char kLossMaskMagic[] = "STRATA-LOSSMASK\n";
constexpr char kPairsMagic[] = "STRATA-DPOPAIRS\n";
constexpr size_t kMagicBytes = 16;
constexpr uint32_t kVersion = 1;

constexpr SideKind kKinds[] = {SideKind::kExamples, SideKind::kLossMask, SideKind::kPairs};

const char* MagicOf(SideKind kind) {
  return kind == SideKind::kExamples ? kExamplesMagic : kind == SideKind::kLossMask ? kLossMaskMagic : kPairsMagic;
}
const char* NameOf(SideKind kind) {
  return kind == SideKind::kExamples ? "examples file" : kind == SideKind::kLossMask ? "loss mask" : "pairs file";
}

uint64_t LittleEndian(std::string_view bytes, size_t at, int width) {
  uint64_t v = 0;
  for (int i = width - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  return v;
}

void PutLittleEndian(std::string* out, uint64_t v, int width) {
  for (int i = 0; i < width; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

}  // namespace

uint32_t Crc32(std::string_view bytes) {
  uLong crc = crc32_z(0L, Z_NULL, 0);
  return static_cast<uint32_t>(crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

std::string SideFileHeader(SideKind kind, const TokenFingerprint& f) {
  std::string h(MagicOf(kind), kMagicBytes);
  PutLittleEndian(&h, f.tokens, 8);
  PutLittleEndian(&h, f.crc32, 4);
  PutLittleEndian(&h, kVersion, 4);
  return h;
}

StatusOr<std::string_view> SideFilePayload(std::string_view bytes, SideKind kind, const TokenFingerprint& token_file,
                                           const std::string& side_path, const std::string& token_path,
                                           bool* fingerprinted) {
  *fingerprinted = false;
  const SideKind* held = nullptr;
  for (const SideKind& k : kKinds)
    if (bytes.starts_with(std::string_view(MagicOf(k), kMagicBytes))) held = &k;
  if (!held) return bytes;  // written before the header, or by hand
  if (*held != kind)
    return InvalidArgument("{} '{}' of '{}' holds a {} (its header says so): the side files were mixed up", NameOf(kind),
                           side_path, token_path, NameOf(*held));
  if (bytes.size() < kSideHeaderBytes)
    return InvalidArgument("{} '{}' of '{}' is cut short inside its {}-byte header", NameOf(kind), side_path, token_path,
                           kSideHeaderBytes);
  const TokenFingerprint recorded{LittleEndian(bytes, 16, 8), static_cast<uint32_t>(LittleEndian(bytes, 24, 4))};
  const auto version = static_cast<uint32_t>(LittleEndian(bytes, 28, 4));
  if (version != kVersion)
    return InvalidArgument("{} '{}' of '{}' is of format version {}; this Strata reads version {}", NameOf(kind),
                           side_path, token_path, version, kVersion);
  if (recorded != token_file)
    return InvalidArgument(
        "{} '{}' was written for a token file of {} tokens (CRC-32 {:08x}), but '{}' has {} tokens (CRC-32 {:08x}): "
        "the side file belongs to another token file (regenerated or copied since); write both again with "
        "scripts/prepare_data.py", NameOf(kind), side_path, recorded.tokens, recorded.crc32, token_path,
        token_file.tokens, token_file.crc32);
  *fingerprinted = true;
  return bytes.substr(kSideHeaderBytes);
}

}  // namespace strata::data
