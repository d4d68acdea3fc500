// TokenDataset: loads token files (token_file.h) or text, splits them into train and eval,
// and draws batches as a pure function of (seed, split, index). The whole file is read into
// memory (4 bytes a token); memory-mapping can come later.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <tuple>

#include <fmt/format.h>

#include "src/data/builtin_text.h"
#include "src/data/data.h"
#include "src/data/examples.h"
#include "src/data/loss_mask.h"
#include "src/data/side_file.h"
#include "src/data/token_file.h"
#include "strata/check.h"

namespace strata::data {
namespace {

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

// Note [Epochs]: with strata.data.epochs the training split is cut into K = (tokens - 1) / T
// consecutive windows of T + 1 tokens (the last token of one is the first of the next), and
// training sequence n (numbered as in Note [Batch sampling], so any rank count reads the same)
// is window P_e(n mod K) of epoch e = n / K, P_e a pseudo-random permutation of [0, K) keyed by
// (seed, e): a 4-round Feistel network on the next even power of two, walking the cycle back
// into [0, K). No table and no state: a resumed run reads on mid-epoch bit for bit.
uint64_t ShuffledIndex(uint64_t j, uint64_t n, uint64_t key) {
  int bits = 2;
  while ((uint64_t{1} << bits) < n) bits += 2;
  const int half = bits / 2;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  do {
    uint64_t left = j >> half, right = j & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      uint64_t state = key ^ (round << 56) ^ right;
      const uint64_t f = SplitMix(state) & mask;
      std::tie(left, right) = std::pair(right, left ^ f);
    }
    j = (left << half) | right;
  } while (j >= n);
  return j;
}

std::string Millions(size_t n) { return fmt::format("{:.2f} M tokens", static_cast<double>(n) / 1e6); }

}  // namespace

namespace {

// The tokens of `path` ("" = the built-in text) appended to *tokens, and what identifies the
// file (its side files were written for it); what they are, for the start-up line.
StatusOr<std::string> LoadTokens(const std::string& path, TokenFormat format_setting, int64_t vocab_size,
                                 std::vector<int32_t>* tokens, TokenFingerprint* fingerprint) {
  std::vector<int32_t> read;
  std::string description;
  if (path.empty()) {
    STRATA_RETURN_IF_ERROR(DecodeTokens(BuiltinText(), TokenFormat::kText, vocab_size, "built-in text", read));
    description = fmt::format("built-in text, {}", Millions(read.size()));
  } else {
    const TokenFormat format = ResolveTokenFormat(format_setting, path);
    STRATA_ASSIGN_OR_RETURN(std::string bytes, ReadTokenFile(path));
    STRATA_RETURN_IF_ERROR(DecodeTokens(bytes, format, vocab_size, path, read));
    *fingerprint = {read.size(), Crc32(bytes)};
    const char* kind = format == TokenFormat::kText     ? "text, byte tokens"
                       : format == TokenFormat::kUint16 ? "uint16"
                                                        : "uint32";
    description = fmt::format("{} ({}), {}", path, kind, Millions(read.size()));
  }
  tokens->insert(tokens->end(), read.begin(), read.end());
  return description;
}

}  // namespace

StatusOr<std::unique_ptr<TokenDataset>> TokenDataset::Open(const DataConfig& config, int64_t vocab_size,
                                                           int64_t seq_len) {
  if (vocab_size <= 0) return InvalidArgument("data: vocab_size = {} must be positive", vocab_size);
  if (seq_len <= 0) return InvalidArgument("data: seq_len = {} must be positive", seq_len);
  if (!(config.eval_fraction > 0 && config.eval_fraction < 1)) {
    return InvalidArgument("data: eval_fraction = {} must be in (0, 1)", config.eval_fraction);
  }
  std::unique_ptr<TokenDataset> ds(new TokenDataset());
  const std::string name = config.path.empty() ? "built-in text" : config.path;
  STRATA_ASSIGN_OR_RETURN(ds->description_,
                          LoadTokens(config.path, config.format, vocab_size, &ds->tokens_, &ds->fingerprints_[0]));
  const bool examples = config.packing != Packing::kWindows;
  if (examples && config.path.empty())
    return InvalidArgument("strata.data.packing '{}' needs a token file with its examples (strata.data.path; "
                           "scripts/prepare_data.py writes PATH.examples)",
                           config.packing == Packing::kNone ? "none" : "packed");
  if (!config.eval_path.empty()) {  // a validation file: held out after the training tokens
    const auto n_train = static_cast<int64_t>(ds->tokens_.size());
    STRATA_ASSIGN_OR_RETURN(std::string eval,
                            LoadTokens(config.eval_path, config.format, vocab_size, &ds->tokens_, &ds->fingerprints_[1]));
    ds->description_ += "; held out: " + eval;
    ds->eval_begin_ = n_train;
    const int64_t n_eval = static_cast<int64_t>(ds->tokens_.size()) - n_train;
    for (auto [file, key, count] : {std::tuple{name, "strata.data.path", n_train},
                                    std::tuple{config.eval_path, "strata.data.eval_path", n_eval}})
      if (count < seq_len + 1 && !examples)
        return InvalidArgument("token file '{}' ({}) is too short: {} tokens, but a sequence needs seq_len + 1 = {}",
                               file, key, count, seq_len + 1);
  } else {
    const auto n = static_cast<int64_t>(ds->tokens_.size());
    const auto n_eval = static_cast<int64_t>(std::llround(static_cast<double>(n) * config.eval_fraction));
    ds->eval_begin_ = n - n_eval;
    if ((ds->eval_begin_ < seq_len + 1 || n_eval < seq_len + 1) && !examples) {
      // Where only the held-out split is short, the fraction that would do (rounded up to 0.001).
      const double enough = std::ceil(1000.0 * static_cast<double>(seq_len + 1) / static_cast<double>(n)) / 1000.0;
      const bool raise = n_eval < seq_len + 1 && enough <= 0.5 &&
                         n - static_cast<int64_t>(std::llround(static_cast<double>(n) * enough)) >= seq_len + 1;
      return InvalidArgument(
          "token file '{}' is too short: {} tokens split into {} train and {} eval (eval_fraction {}), but each split "
          "needs at least seq_len + 1 = {}{}",
          name, n, ds->eval_begin_, n_eval, config.eval_fraction, seq_len + 1,
          raise ? fmt::format("; strata.data.eval_fraction {:.3f} would hold out enough", enough) : "");
    }
  }
  ds->seq_len_ = seq_len;
  ds->seed_ = config.seed;
  ds->epochs_ = config.epochs > 0;
  if (examples) STRATA_RETURN_IF_ERROR(ds->OpenExamples(config));
  if (ds->epochs_)
    ds->description_ += fmt::format("; {} epoch(s) of {} {} of {} tokens", config.epochs, ds->epoch_windows(),
                                    examples ? "rows" : "windows", seq_len + 1);
  STRATA_RETURN_IF_ERROR(ds->OpenLossMask(config));
  if (ds->pairs_) STRATA_RETURN_IF_ERROR(ds->CheckPairs());
  return ds;
}

// Note [Examples]: the examples of the token file (and of the validation file, or those
// starting in the held-out fraction) made into rows. Without a validation file the held-out
// split begins at the first example starting in the last eval_fraction of the tokens.
Status TokenDataset::OpenExamples(const DataConfig& config) {
  const auto n = static_cast<int64_t>(tokens_.size());
  std::vector<int64_t> starts;
  for (auto [path, offset, count, fingerprint] :
       {std::tuple{config.path, int64_t{0}, config.eval_path.empty() ? n : eval_begin_, fingerprints_[0]},
        std::tuple{config.eval_path, eval_begin_, n - eval_begin_, fingerprints_[1]}}) {
    if (path.empty()) continue;
    const std::string examples_path = ExamplesPath(path);
    StatusOr<std::string> bytes = ReadSideFile(examples_path, SideKind::kExamples, path, fingerprint);
    if (!bytes.ok())
      return bytes.status().WithContext(
          fmt::format("the examples of '{}' (strata.data.packing; scripts/prepare_data.py writes PATH.examples)", path));
    std::vector<int64_t> part;
    STRATA_RETURN_IF_ERROR(DecodeExampleStarts(*bytes, static_cast<size_t>(count), examples_path, path, &part));
    if (config.pairs) STRATA_RETURN_IF_ERROR(OpenPairs(path, fingerprint, part.size()));
    for (int64_t start : part) starts.push_back(offset + start);
  }
  if (config.eval_path.empty()) {
    auto held = std::lower_bound(starts.begin(), starts.end(), eval_begin_);  // Open() set n - n_eval
    if (config.pairs && (held - starts.begin()) % 2 == 1) ++held;  // a pair stays in one split
    eval_begin_ = held == starts.end() ? n : *held;
  }
  rows_[0] = BuildExampleRows(starts, 0, eval_begin_, eval_begin_, seq_len_, config.packing, config.long_examples);
  rows_[1] = BuildExampleRows(starts, eval_begin_, n, n, seq_len_, config.packing, config.long_examples);
  const auto train_examples = std::lower_bound(starts.begin(), starts.end(), eval_begin_) - starts.begin();
  for (auto [split, built, examples, tokens] :
       {std::tuple{"train", &rows_[0], train_examples, eval_begin_},
        std::tuple{"held-out", &rows_[1], static_cast<int64_t>(starts.size()) - train_examples, n - eval_begin_}})
    if (built->rows() == 0)
      return InvalidArgument("token file '{}': the {} split has no example with a target ({} examples of {} tokens "
                             "start in it{})",
                             config.path, split, examples, tokens,
                             config.eval_path.empty() ? "; strata.data.eval_fraction sets the held-out share" : "");
  packing_ = config.packing;
  pairs_ = config.pairs;
  pairs_paths_[0] = config.path;
  pairs_paths_[1] = config.eval_path.empty() ? config.path : config.eval_path;
  if (pairs_) description_ += fmt::format("; {} preference pairs", rows_[0].rows() / 2);
  description_ += fmt::format("; {} {} examples in {} rows ({} longer than a row, {})", rows_[0].examples,
                              packing_ == Packing::kPacked ? "packed" : "unpacked", rows_[0].rows(),
                              rows_[0].split_examples,
                              config.long_examples == LongExamples::kSplit ? "split" : "truncated");
  return Status();
}

StatusOr<std::string> TokenDataset::ReadSideFile(const std::string& side_path, SideKind kind,
                                                 const std::string& token_path, const TokenFingerprint& fingerprint) {
  STRATA_ASSIGN_OR_RETURN(std::string bytes, ReadTokenFile(side_path));
  bool fingerprinted = false;
  STRATA_ASSIGN_OR_RETURN(std::string_view payload,
                          SideFilePayload(bytes, kind, fingerprint, side_path, token_path, &fingerprinted));
  if (!fingerprinted)
    description_ += fmt::format("; '{}' has no fingerprint of its token file (an older scripts/prepare_data.py's, or "
                                "written by hand): only its size is checked", side_path);
  return std::string(payload);
}

// Reads and checks the mask; a split whose mask trains nothing would make every loss 0 / 0.
Status TokenDataset::OpenLossMask(const DataConfig& config) {
  const std::string path = ResolveLossMaskPath(config);
  const std::string eval_path = config.eval_path.empty() ? "" : ResolveEvalLossMaskPath(config);
  if (path.empty() && eval_path.empty()) return Status();
  if (!path.empty() && config.path.empty())
    return InvalidArgument("strata.data.loss_mask '{}' is set, but there is no token file (strata.data.path)", path);
  // One byte per token of each file: read where the file has a mask, else every target trains.
  const size_t train_tokens = config.eval_path.empty() ? tokens_.size() : static_cast<size_t>(eval_begin_);
  for (auto [mask_path, token_path, count, fingerprint] :
       {std::tuple{path, config.path, train_tokens, fingerprints_[0]},
        std::tuple{eval_path, config.eval_path, tokens_.size() - train_tokens, fingerprints_[1]}}) {
    if (count == 0) continue;
    std::vector<uint8_t> part;
    if (mask_path.empty()) {
      part.assign(count, 1);
    } else {
      StatusOr<std::string> bytes = ReadSideFile(mask_path, SideKind::kLossMask, token_path, fingerprint);
      if (!bytes.ok())
        return bytes.status().WithContext(fmt::format("the loss mask of '{}' (strata.data.loss_mask)", token_path));
      STRATA_RETURN_IF_ERROR(DecodeLossMask(*bytes, count, mask_path, token_path, part));
    }
    mask_.insert(mask_.end(), part.begin(), part.end());
  }
  const auto trained = [&](int64_t begin, int64_t end) {  // targets only: a window's first token never is one
    return std::count(mask_.begin() + begin + 1, mask_.begin() + end, uint8_t{1});
  };
  const auto n = static_cast<int64_t>(tokens_.size());
  for (auto [name, begin, end] : {std::tuple{"train", int64_t{0}, eval_begin_}, std::tuple{"eval", eval_begin_, n}}) {
    if (trained(begin, end) == 0)
      return InvalidArgument(
          "loss mask '{}' trains no token of the {} split (tokens {} .. {} of '{}'): every loss would be 0 / 0", path,
          name, begin, end - 1, config.path);
  }
  const auto ones = std::count(mask_.begin(), mask_.end(), uint8_t{1});
  const double fraction = static_cast<double>(ones) / static_cast<double>(n);
  description_ += fmt::format(", loss mask {} ({:.1f}% of the tokens trained)",
                              path.empty() ? eval_path : eval_path.empty() ? path : path + " + " + eval_path,
                              100 * fraction);
  return Status();
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
uint64_t TokenDataset::EpochOrder(uint64_t sequence, uint64_t count) const {
  uint64_t key = seed_ ^ 0x65706F6368ULL;  // "epoch"
  key = SplitMix(key) ^ (sequence / count);
  return ShuffledIndex(sequence % count, count, SplitMix(key));
}

// Note [Examples]: sequences pick rows as they pick windows, in the epoch's order or at random.
int64_t TokenDataset::RowOf(Split split, uint64_t sequence) const {
  // Preference pairs: `sequence` numbers pairs, and the result is the pair's (its chosen row / 2).
  const auto count = static_cast<uint64_t>(split_rows(split).rows() / (pairs_ ? 2 : 1));
  if (epochs_ && split == Split::kTrain) return static_cast<int64_t>(EpochOrder(sequence, count));
  const uint64_t stream = split == Split::kTrain ? 0x726F7773ULL : 0x6576726FULL;  // "rows" / "evro"
  return static_cast<int64_t>(Draw(stream, sequence, count));
}

int64_t TokenDataset::WindowStart(Split split, uint64_t sequence) const {
  if (epochs_ && split == Split::kTrain)
    return static_cast<int64_t>(EpochOrder(sequence, static_cast<uint64_t>(epoch_windows()))) * seq_len_;
  const int64_t begin = split == Split::kTrain ? 0 : eval_begin_;
  const int64_t starts = tokens(split) - seq_len_;  // offsets begin .. begin + starts - 1 fit T + 1 tokens
  STRATA_CHECK(starts >= 1) << "split too short for a sequence; Open() checks this";
  const uint64_t stream = split == Split::kTrain ? 0x7472616EULL : 0x6576616CULL;  // "tran" / "eval"
  return begin + static_cast<int64_t>(Draw(stream, sequence, static_cast<uint64_t>(starts)));
}

uint64_t TokenDataset::Draw(uint64_t stream, uint64_t sequence, uint64_t n) const {
  uint64_t state = seed_;
  state = SplitMix(state) ^ stream;
  state = SplitMix(state) ^ sequence;
  SplitMix(state);
  return Below(state, n);
}

Batch TokenDataset::EmptyBatch(int64_t batch_size) const {
  const int64_t T = seq_len_;
  Batch batch;
  batch.inputs = torch::empty({batch_size, T}, torch::kInt64);
  batch.targets = torch::empty({batch_size, T}, torch::kInt64);
  if (has_loss_mask()) batch.loss_mask = torch::empty({batch_size, T}, torch::kBool);
  if (packing_ != Packing::kWindows) {
    batch.positions = torch::empty({batch_size, T}, torch::kInt64);
    batch.rows = torch::empty({batch_size}, torch::kInt64);
  }
  return batch;
}

void TokenDataset::FillRow(Split split, int64_t r, int64_t b, Batch* batch) const {
  const int64_t T = seq_len_;
  FillExampleRow(split_rows(split), r, tokens_.data(), mask_.empty() ? nullptr : mask_.data(), T,
                 batch->inputs.data_ptr<int64_t>() + b * T, batch->targets.data_ptr<int64_t>() + b * T,
                 batch->loss_mask.data_ptr<bool>() + b * T, batch->positions.data_ptr<int64_t>() + b * T);
  batch->rows.data_ptr<int64_t>()[b] = first_row(split) + r;
}

Batch TokenDataset::Get(Split split, uint64_t index, int64_t batch_size) const {
  STRATA_CHECK(batch_size > 0 && (!pairs_ || batch_size % 2 == 0)) << "batch_size " << batch_size;
  const int64_t T = seq_len_;
  Batch batch = EmptyBatch(batch_size);
  int64_t* in = batch.inputs.data_ptr<int64_t>();
  int64_t* out = batch.targets.data_ptr<int64_t>();
  bool* mask = has_loss_mask() ? batch.loss_mask.data_ptr<bool>() : nullptr;
  if (pairs_) {  // Note [DPO]: the pairs' chosen rows, then their rejected rows
    const int64_t P = batch_size / 2;
    for (int64_t p = 0; p < P; ++p) {
      const int64_t pair = RowOf(split, index * static_cast<uint64_t>(P) + static_cast<uint64_t>(p));
      FillRow(split, 2 * pair, p, &batch);
      FillRow(split, 2 * pair + 1, P + p, &batch);
    }
    return batch;
  }
  if (packing_ != Packing::kWindows) {  // Note [Examples]
    for (int64_t b = 0; b < batch_size; ++b)
      FillRow(split, RowOf(split, index * static_cast<uint64_t>(batch_size) + static_cast<uint64_t>(b)), b, &batch);
    return batch;
  }
  for (int64_t b = 0; b < batch_size; ++b) {
    const int64_t start = WindowStart(split, index * static_cast<uint64_t>(batch_size) + static_cast<uint64_t>(b));
    const int32_t* src = tokens_.data() + start;
    for (int64_t t = 0; t < T; ++t) {
      in[b * T + t] = src[t];
      out[b * T + t] = src[t + 1];
    }
    // Target t is token start + t + 1: its own mask byte says whether it is trained on.
    for (int64_t t = 0; mask && t < T; ++t) mask[b * T + t] = mask_[start + t + 1] != 0;
  }
  return batch;
}

int64_t TokenDataset::LossTokens(Split split, uint64_t first, uint64_t count, int64_t batch_size) const {
  const int64_t T = seq_len_;
  if (!has_loss_mask()) return static_cast<int64_t>(count) * batch_size * T;
  int64_t n = 0;
  const uint64_t rows = count * static_cast<uint64_t>(batch_size);
  if (packing_ != Packing::kWindows) {  // the targets of each row's pieces whose mask byte is set
    const ExampleRows& built = split_rows(split);
    for (uint64_t row = first * static_cast<uint64_t>(batch_size), end = row + rows; row < end; ++row) {
      const int64_t r = RowOf(split, row);
      for (int64_t i = built.first[r]; i < built.first[r + 1]; ++i) {
        const Piece& p = built.pieces[i];
        n += mask_.empty() ? p.length - 1 : std::count(mask_.begin() + p.begin + 1, mask_.begin() + p.begin + p.length, 1);
      }
    }
    return n;
  }
  for (uint64_t row = first * static_cast<uint64_t>(batch_size), end = row + rows; row < end; ++row) {
    const uint8_t* m = mask_.data() + WindowStart(split, row) + 1;
    for (int64_t t = 0; t < T; ++t) n += m[t];
  }
  return n;
}

Batch TokenDataset::RowsInOrder(Split split, int64_t first, int64_t count, int64_t batch_size) const {
  STRATA_CHECK(packing_ != Packing::kWindows && count >= 1 && count <= batch_size && first >= 0 &&
               first + count <= rows(split))
      << "rows " << first << " + " << count << " of " << rows(split) << " in a batch of " << batch_size;
  Batch batch = EmptyBatch(batch_size);
  for (int64_t b = 0; b < batch_size; ++b) FillRow(split, first + std::min(b, count - 1), b, &batch);
  return batch;
}

// Note [DPO]: a token file of pairs says so (PATH.pairs, written with its examples) and holds
// an even number of examples, chosen then rejected.
Status TokenDataset::OpenPairs(const std::string& path, const TokenFingerprint& fingerprint, size_t examples) {
  const std::string pairs_path = path + ".pairs";
  StatusOr<std::string> bytes = ReadTokenFile(pairs_path);
  if (!bytes.ok())
    return InvalidArgument("strata.objective \"dpo\" trains on preference pairs, but '{}' has no '{}': its examples "
                           "are not pairs (scripts/prepare_data.py writes both from prompt/chosen/rejected records)",
                           path, pairs_path);
  bool fingerprinted = false;
  STRATA_ASSIGN_OR_RETURN(std::string_view payload, SideFilePayload(*bytes, SideKind::kPairs, fingerprint, pairs_path,
                                                                    path, &fingerprinted));
  if (!fingerprinted || !payload.empty())
    return InvalidArgument("'{}' is not a pairs file (its {}-byte header, written by scripts/prepare_data.py)",
                           pairs_path, kSideHeaderBytes);
  if (examples % 2 != 0)
    return InvalidArgument("'{}' holds {} examples: preference pairs are an even number (chosen, rejected)", path,
                           examples);
  return Status();
}

// Every example a row with a trained target: a pair whose completion trains nothing, or an
// example left out of the rows, would pair a chosen row with another pair's rejected one.
Status TokenDataset::CheckPairs() const {
  for (Split split : {Split::kTrain, Split::kEval}) {
    const ExampleRows& built = split_rows(split);
    if (built.examples != built.rows() || built.rows() % 2 != 0)
      return InvalidArgument("'{}': the {} split has an example without a target (one token long): every example of "
                             "a preference pair needs its completion", pairs_paths_[split == Split::kTrain ? 0 : 1],
                             split == Split::kTrain ? "training" : "held-out");
    for (int64_t r = 0; r < built.rows(); ++r) {
      const Piece& p = built.pieces[built.first[r]];
      const auto trained = mask_.empty() ? p.length - 1
                                         : std::count(mask_.begin() + p.begin + 1, mask_.begin() + p.begin + p.length,
                                                      uint8_t{1});
      if (trained == 0)
        return InvalidArgument("'{}': the {} completion of pair {} of the {} split trains no token (within a row of "
                               "strata.model.seq_len targets): a pair needs both completions",
                               pairs_paths_[split == Split::kTrain ? 0 : 1], r % 2 == 0 ? "chosen" : "rejected", r / 2,
                               split == Split::kTrain ? "training" : "held-out");
    }
  }
  return Status();
}

}  // namespace strata::data
