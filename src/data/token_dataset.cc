// TokenDataset: loads token files or text, splits them into train and eval, and draws
// batches as a pure function of (seed, split, index).
//
// Formats (DataConfig::format, or kAuto by extension):
//   uint16  *.u16, *.uint16, *.bin  little-endian, 2 bytes a token. *.bin is nanoGPT's
//           train.bin convention; llm.c's .bin files, which start with a 1024-byte header
//           (magic 20240520, version 1, token count), are recognised and the header skipped.
//   uint32  *.u32, *.uint32         little-endian, 4 bytes a token.
//   text    anything else           UTF-8 bytes, one token per byte (vocab 256).
// The whole file is read into memory (4 bytes a token); memory-mapping can come later.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "src/data/builtin_text.h"
#include "src/data/data.h"
#include "strata/check.h"

namespace strata::data {
namespace {

constexpr uint32_t kLlmcMagic = 20240520;
constexpr size_t kLlmcHeaderBytes = 256 * 4;

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

TokenFormat Resolve(TokenFormat format, const std::string& path) {
  if (format != TokenFormat::kAuto) return format;
  for (std::string_view ext : {".u16", ".uint16", ".bin"}) {
    if (EndsWith(path, ext)) return TokenFormat::kUint16;
  }
  for (std::string_view ext : {".u32", ".uint32"}) {
    if (EndsWith(path, ext)) return TokenFormat::kUint32;
  }
  return TokenFormat::kText;
}

StatusOr<std::string> ReadFile(const std::string& path) {
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

uint32_t LoadLe(const unsigned char* p, int width) {
  uint32_t v = 0;
  for (int i = width - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Bytes -> tokens, checking the size and every token against the vocabulary.
Status Decode(const std::string& bytes, TokenFormat format, int64_t vocab_size, const std::string& name,
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

uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Uniform in [0, n) without modulo bias (Lemire's multiply-and-reject).
uint64_t Below(uint64_t& state, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;
  for (;;) {
    const __uint128_t m = static_cast<__uint128_t>(SplitMix(state)) * n;
    if (static_cast<uint64_t>(m) >= threshold) return static_cast<uint64_t>(m >> 64);
  }
}

std::string Millions(size_t n) { return fmt::format("{:.2f} M tokens", static_cast<double>(n) / 1e6); }

}  // namespace

StatusOr<std::unique_ptr<TokenDataset>> TokenDataset::Open(const DataConfig& config, int64_t vocab_size,
                                                           int64_t seq_len) {
  if (vocab_size <= 0) return InvalidArgument("data: vocab_size = {} must be positive", vocab_size);
  if (seq_len <= 0) return InvalidArgument("data: seq_len = {} must be positive", seq_len);
  if (!(config.eval_fraction > 0 && config.eval_fraction < 1)) {
    return InvalidArgument("data: eval_fraction = {} must be in (0, 1)", config.eval_fraction);
  }
  std::unique_ptr<TokenDataset> ds(new TokenDataset());
  std::string name;
  if (config.path.empty()) {
    name = "built-in text";
    STRATA_RETURN_IF_ERROR(Decode(BuiltinText(), TokenFormat::kText, vocab_size, name, ds->tokens_));
    ds->description_ = fmt::format("built-in text, {}", Millions(ds->tokens_.size()));
  } else {
    name = config.path;
    const TokenFormat format = Resolve(config.format, config.path);
    STRATA_ASSIGN_OR_RETURN(std::string bytes, ReadFile(config.path));
    STRATA_RETURN_IF_ERROR(Decode(bytes, format, vocab_size, name, ds->tokens_));
    const char* kind = format == TokenFormat::kText ? "text, byte tokens" : format == TokenFormat::kUint16 ? "uint16" : "uint32";
    ds->description_ = fmt::format("{} ({}), {}", config.path, kind, Millions(ds->tokens_.size()));
  }
  const auto n = static_cast<int64_t>(ds->tokens_.size());
  const auto n_eval = static_cast<int64_t>(std::llround(static_cast<double>(n) * config.eval_fraction));
  ds->eval_begin_ = n - n_eval;
  if (ds->eval_begin_ < seq_len + 1 || n_eval < seq_len + 1) {
    return InvalidArgument(
        "token file '{}' is too short: {} tokens split into {} train and {} eval (eval_fraction {}), but each split "
        "needs at least seq_len + 1 = {}",
        name, n, ds->eval_begin_, n_eval, config.eval_fraction, seq_len + 1);
  }
  ds->seq_len_ = seq_len;
  ds->seed_ = config.seed;
  return ds;
}

int64_t TokenDataset::tokens(Split split) const {
  const auto n = static_cast<int64_t>(tokens_.size());
  return split == Split::kTrain ? eval_begin_ : n - eval_begin_;
}

// Note [Batch sampling]: a sequence never crosses the train/eval boundary. Row b of batch
// (split, index) of size B is sequence number n = index * B + b, whose offset is drawn
// from a splitmix64 stream seeded by hashing (seed, split, n): no hidden state, and W
// ranks with B rows each (index i*W + r) see exactly the rows of one rank with W*B rows
// (index i), so any rank count reproduces the single-process batches.
Batch TokenDataset::Get(Split split, uint64_t index, int64_t batch_size) const {
  STRATA_CHECK(batch_size > 0) << "batch_size " << batch_size;
  const int64_t T = seq_len_;
  const int64_t begin = split == Split::kTrain ? 0 : eval_begin_;
  const int64_t starts = tokens(split) - T;  // offsets begin .. begin + starts - 1 fit T + 1 tokens
  STRATA_CHECK(starts >= 1) << "split too short for a sequence; Open() checks this";

  uint64_t base = seed_;
  base = SplitMix(base) ^ (split == Split::kTrain ? 0x7472616EULL : 0x6576616CULL);  // "tran" / "eval"

  Batch batch;
  batch.inputs = torch::empty({batch_size, T}, torch::kInt64);
  batch.targets = torch::empty({batch_size, T}, torch::kInt64);
  int64_t* in = batch.inputs.data_ptr<int64_t>();
  int64_t* out = batch.targets.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch_size; ++b) {
    uint64_t state = base;
    state = SplitMix(state) ^ (index * static_cast<uint64_t>(batch_size) + static_cast<uint64_t>(b));
    SplitMix(state);
    const int32_t* src = tokens_.data() + begin + static_cast<int64_t>(Below(state, static_cast<uint64_t>(starts)));
    for (int64_t t = 0; t < T; ++t) {
      in[b * T + t] = src[t];
      out[b * T + t] = src[t + 1];
    }
  }
  return batch;
}

}  // namespace strata::data
