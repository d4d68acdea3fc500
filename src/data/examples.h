// Example-aware rows (strata.data.packing "none" or "packed", Note [Examples]), without
// LibTorch: the examples file, the rows built from it, and one row's tokens, targets, loss
// mask and positions.
//
// The examples file, PATH.examples beside the token file PATH (scripts/prepare_data.py
// writes it): the first token of every example as a little-endian uint64, in increasing
// order, the first 0; example i ends where example i + 1 starts (the last at the file's end).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/data/data_config.h"
#include "strata/status.h"

namespace strata::data {

// PATH.examples for token file PATH.
std::string ExamplesPath(const std::string& token_path);

// Bytes -> first tokens. Errors name both files: a length not a multiple of 8, no example, a
// first start other than 0, starts not increasing or past the token file's `tokens`.
Status DecodeExampleStarts(std::string_view bytes, size_t tokens, const std::string& examples_path,
                           const std::string& token_path, std::vector<int64_t>* starts);

// A piece of an example: tokens [begin, begin + length) of the token file, length >= 2 (its
// inputs are the first length - 1 tokens, its targets the last length - 1).
struct Piece {
  int64_t begin = 0;
  int64_t length = 0;
};

// The rows of one split: row r holds pieces[first[r] .. first[r + 1]), whose targets number
// at most seq_len together.
struct ExampleRows {
  std::vector<Piece> pieces;
  std::vector<int64_t> first;  // rows() + 1 entries
  int64_t examples = 0;        // examples with at least one target
  int64_t split_examples = 0;  // of them, longer than a row (cut, or truncated)
  int64_t rows() const { return static_cast<int64_t>(first.size()) - 1; }
};

// The examples that start in [begin, end) (`starts` ascending; an example ends at the next
// start or at `tokens_end`), made into rows of seq_len targets: "none" one piece a row,
// "packed" consecutive pieces while they fit. An example longer than a row is cut into
// pieces of seq_len targets (kSplit; the pieces overlap by one token, as consecutive windows
// do) or keeps its first (kTruncate). One-token examples have no target and are left out.
ExampleRows BuildExampleRows(const std::vector<int64_t>& starts, int64_t begin, int64_t end, int64_t tokens_end,
                             int64_t seq_len, Packing packing, LongExamples long_examples);

// Row r of `rows` into arrays of seq_len entries: inputs, targets, loss mask (the token's own
// mask byte where `mask` is non-null, else true; padding false) and positions (restarting at
// 0 with each piece, and with the padding after the last). Padding tokens are 0.
void FillExampleRow(const ExampleRows& rows, int64_t r, const int32_t* tokens, const uint8_t* mask, int64_t seq_len,
                    int64_t* inputs, int64_t* targets, bool* loss_mask, int64_t* positions);

}  // namespace strata::data
