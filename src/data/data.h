// Training data: pre-tokenized token files (uint16 or uint32 little-endian) or raw UTF-8
// text through the byte-level tokenizer (vocab 256), with a built-in text as the default.
// Batches are a pure function of (seed, split, global micro-batch index), so every rank
// count, every resume and every reference loop sees the same samples; rank r of W at
// step s, micro-batch g uses index (s * accumulation + g) * W + r. A loss mask
// (loss_mask.h) travels with the batches: which target positions the loss counts.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/data/data_config.h"
#include "src/data/examples.h"
#include "src/data/side_file.h"
#include "strata/status.h"

namespace strata::data {

struct Batch {
  torch::Tensor inputs;   // int64 [B, T]
  torch::Tensor targets;  // int64 [B, T], inputs shifted by one
  // bool [B, T]: target (b, t) counts in the loss; undefined when the data has no loss mask
  // (every target counts).
  torch::Tensor loss_mask;
  // With examples: int64 [B], each row's number among the dataset's rows (the training split's
  // first, then the held-out split's): what the reference log-probabilities are kept by (Note
  // [DPO]). Undefined for windows.
  torch::Tensor rows;
  // int64 [B, T] with strata.data.packing "none" or "packed": each token's position within its
  // example, 0 where an example (or the padding) starts (Note [Examples]); undefined for windows.
  torch::Tensor positions;
};

class TokenDataset {
 public:
  // Loads (or generates) all tokens, and the loss mask if config has one. Errors name the
  // file: missing, empty, a size that is not a multiple of the token width, a token >=
  // vocab_size, or fewer tokens than one sequence in either split; a mask of the wrong
  // length or one that trains no token of a split.
  static StatusOr<std::unique_ptr<TokenDataset>> Open(const DataConfig& config, int64_t vocab_size, int64_t seq_len);

  // B sequences of T+1 consecutive tokens; sequence b's offset is drawn from (seed, split,
  // index * B + b), so batches of B/2 at indices 2k and 2k+1 equal one batch of B at k. With
  // preference pairs (DataConfig::pairs, B even) pair p of the batch is pair number
  // index * B/2 + p, drawn as a sequence is, its chosen row at p and its rejected row at B/2 + p.
  Batch Get(Split split, uint64_t index, int64_t batch_size) const;
  // Rows first .. first + count - 1 of the split in order (the reference pass over every row,
  // Note [DPO]), as a batch of `batch_size` >= count rows: the rest repeat the last.
  Batch RowsInOrder(Split split, int64_t first, int64_t count, int64_t batch_size) const;
  // With examples: the split's rows, and the number of the split's first row among the
  // dataset's rows (Batch::rows).
  int64_t rows(Split split) const { return split_rows(split).rows(); }
  int64_t first_row(Split split) const { return split == Split::kTrain ? 0 : rows_[0].rows(); }
  bool pairs() const { return pairs_; }

  // Targets the loss counts in batches first .. first + count - 1 of `batch_size` rows
  // (what Get's loss_mask would sum to), without building them; B * T per batch without a
  // mask. Cheap: T bytes per row.
  int64_t LossTokens(Split split, uint64_t first, uint64_t count, int64_t batch_size) const;
  // With examples (packing "none" / "packed") every batch has a mask: padding is not trained.
  bool has_loss_mask() const { return !mask_.empty() || packing_ != Packing::kWindows; }

  int64_t tokens(Split split) const;
  // strata.data.epochs: the training windows (or example rows) of one epoch (0: no epochs).
  int64_t epoch_windows() const {
    if (!epochs_) return 0;
    return packing_ != Packing::kWindows ? rows_[0].rows() : (tokens(Split::kTrain) - 1) / seq_len_;
  }
  // The training split's rows of examples (none for windows).
  const ExampleRows& train_rows() const { return rows_[0]; }
  const std::string& description() const { return description_; }  // "built-in text, 1.0 M tokens" etc.

 private:
  TokenDataset() = default;
  Status OpenLossMask(const DataConfig& config);
  Status OpenExamples(const DataConfig& config);
  // Preference pairs: each file's PATH.pairs, an even number of examples, every one a row
  // with a trained target (after the loss mask is read).
  Status OpenPairs(const std::string& path, const TokenFingerprint& fingerprint, size_t examples);
  Status CheckPairs() const;
  // Row `r` of the split into row `b` of `batch` (whose arrays hold batch_size rows).
  void FillRow(Split split, int64_t r, int64_t b, Batch* batch) const;
  Batch EmptyBatch(int64_t batch_size) const;
  // Row `sequence` of the split's batches: the absolute offset of its T + 1 tokens.
  int64_t WindowStart(Split split, uint64_t sequence) const;
  // With examples: the split's row that sequence number `sequence` reads.
  int64_t RowOf(Split split, uint64_t sequence) const;
  const ExampleRows& split_rows(Split split) const { return rows_[split == Split::kTrain ? 0 : 1]; }
  // Uniform in [0, n), keyed by (seed, stream, sequence) only (Note [Batch sampling]).
  uint64_t Draw(uint64_t stream, uint64_t sequence, uint64_t n) const;
  // Position of sequence number `sequence` in the seeded order of its epoch of `count`.
  uint64_t EpochOrder(uint64_t sequence, uint64_t count) const;
  std::vector<int32_t> tokens_;
  std::vector<uint8_t> mask_;  // one per token, or empty
  int64_t eval_begin_ = 0;
  int64_t seq_len_ = 0;
  uint64_t seed_ = 0;
  bool epochs_ = false;
  Packing packing_ = Packing::kWindows;
  bool pairs_ = false;
  // The token files of the two splits (the training file for both without a validation file),
  // for CheckPairs' messages.
  std::string pairs_paths_[2];
  ExampleRows rows_[2];  // train, eval: with examples only
  // What identifies the token file and the validation file, for their side files (side_file.h).
  TokenFingerprint fingerprints_[2];
  // The side file (and the token file it belongs to) as read, checked against that token
  // file's fingerprint; an unfingerprinted one is noted in the description.
  StatusOr<std::string> ReadSideFile(const std::string& side_path, SideKind kind, const std::string& token_path,
                                     const TokenFingerprint& fingerprint);
  std::string description_;
};

// The built-in corpus: deterministic English-like text generated from a small grammar
// (about 1 MB), so the default job needs no download and its loss has room to fall.
const std::string& BuiltinText();

}  // namespace strata::data
