#include "src/data/token_file.h"

#include <cstdio>
#include <filesystem>

namespace strata::data {
namespace {

constexpr uint32_t kLlmcMagic = 20240520;
constexpr size_t kLlmcHeaderBytes = 256 * 4;

uint32_t LoadLe(const unsigned char* p, int width) {
  uint32_t v = 0;
  for (int i = width - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

TokenFormat ResolveTokenFormat(TokenFormat format, const std::string& path) {
  if (format != TokenFormat::kAuto) return format;
  for (std::string_view ext : {".u16", ".uint16", ".bin"}) {
    if (path.ends_with(ext)) return TokenFormat::kUint16;
  }
  for (std::string_view ext : {".u32", ".uint32"}) {
    if (path.ends_with(ext)) return TokenFormat::kUint32;
  }
  return TokenFormat::kText;
}

StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) return Error(StatusCode::kNotFound, "token file '{}' does not exist", path);
  // A device, a FIFO or a folder would read forever, block, or fail obscurely.
  if (!std::filesystem::is_regular_file(status))
    return InvalidArgument("token file '{}' is not a regular file (a device, a pipe or a folder)", path);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return ErrnoError(errno, "cannot open token file '{}'", path);
  std::string bytes;
  char chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), f)) > 0) bytes.append(chunk, n);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return ErrnoError(err, "cannot read token file '{}'", path);
  return bytes;
}


Status DecodeTokens(std::string_view bytes, TokenFormat format, int64_t vocab_size, const std::string& name,
              std::vector<int32_t>& tokens) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t size = bytes.size();
  if (size == 0) return InvalidArgument("token file '{}' is empty", name);
  const int width = format == TokenFormat::kUint32 ? 4 : format == TokenFormat::kUint16 ? 2 : 1;
  if (format == TokenFormat::kUint16 && size >= kLlmcHeaderBytes && LoadLe(p, 4) == kLlmcMagic && LoadLe(p + 4, 4) == 1 &&
      (size - kLlmcHeaderBytes) / 2 == LoadLe(p + 8, 4)) {
    p += kLlmcHeaderBytes;  // llm.c's header; see the file comment
    size -= kLlmcHeaderBytes;
  }
  if (size % static_cast<size_t>(width) != 0) {
    return InvalidArgument("token file '{}' has {} bytes, not a multiple of the token width {} ({})", name, size, width,
                           width == 2 ? "uint16" : "uint32");
  }
  const size_t n = size / static_cast<size_t>(width);
  tokens.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t t = LoadLe(p + i * static_cast<size_t>(width), width);
    if (static_cast<int64_t>(t) >= vocab_size) {
      return InvalidArgument("token file '{}': token {} at position {} is >= vocab_size {}", name, t, i, vocab_size);
    }
    tokens[i] = static_cast<int32_t>(t);
  }
  return Status::Ok();
}

}  // namespace strata::data
