// Note [Examples]
// Pre-training text is read as random windows of the token stream (Note [Batch sampling]):
// a window may start mid-example and run into the next one. Fine-tuning data is a set of
// examples, and each should be seen whole and alone. With strata.data.packing "none" or
// "packed" the token file's examples (PATH.examples) are made into rows once, when the data
// opens, in file order:
//   * a piece is an example's tokens, or, for one longer than a row (seq_len + 1 tokens), its
//     consecutive windows of seq_len + 1 (long_examples "split", every token trained once) or
//     the first only ("truncate");
//   * "none": a row is one piece, padded to seq_len; "packed": consecutive pieces while
//     their targets fit in seq_len, then padding (greedy, in order: a piece never moves past
//     another, so the rows are the same for any rank count and any resume);
//   * positions restart at 0 with each piece and with the padding, and the model attends
//     within each run of positions only (Note [Packed sequences]); padding is masked out of
//     the loss.
// The rows then take the place of windows: numbered sequences pick rows (at random, or in a
// seeded order per epoch), so every rank count and every resume sees the same rows.
#include "src/data/examples.h"

#include <algorithm>
#include <cstring>

#include "strata/check.h"

namespace strata::data {

std::string ExamplesPath(const std::string& token_path) { return token_path + ".examples"; }

Status DecodeExampleStarts(std::string_view bytes, size_t tokens, const std::string& examples_path,
                           const std::string& token_path, std::vector<int64_t>* starts) {
  if (bytes.size() % 8 != 0)
    return InvalidArgument("examples file '{}' of '{}' has {} bytes, not a multiple of 8 (one uint64 per example)",
                           examples_path, token_path, bytes.size());
  if (bytes.empty()) return InvalidArgument("examples file '{}' of '{}' is empty", examples_path, token_path);
  starts->resize(bytes.size() / 8);
  for (size_t i = 0; i < starts->size(); ++i) {
    uint64_t v = 0;
    for (int byte = 7; byte >= 0; --byte) v = (v << 8) | static_cast<unsigned char>(bytes[i * 8 + byte]);
    const int64_t previous = i == 0 ? -1 : (*starts)[i - 1];
    if (i == 0 && v != 0)
      return InvalidArgument("examples file '{}' of '{}': the first example starts at token {}, not 0", examples_path,
                             token_path, v);
    if (v >= tokens)
      return InvalidArgument("examples file '{}': example {} starts at token {}, but '{}' has {} tokens (a token "
                             "file replaced without its examples file?)",
                             examples_path, i, v, token_path, tokens);
    if (static_cast<int64_t>(v) <= previous)
      return InvalidArgument("examples file '{}' of '{}': example {} starts at token {}, not after example {} ({})",
                             examples_path, token_path, i, v, i - 1, previous);
    (*starts)[i] = static_cast<int64_t>(v);
  }
  return Status();
}

namespace {

// Appends example [begin, end)'s pieces of at most seq_len targets; whether it was cut.
bool AddPieces(int64_t begin, int64_t end, int64_t seq_len, LongExamples long_examples, std::vector<Piece>* out) {
  bool cut = false;
  for (int64_t at = begin; end - at >= 2; at += seq_len) {
    out->push_back({at, std::min(end - at, seq_len + 1)});
    if (end - at <= seq_len + 1) break;
    cut = true;
    if (long_examples == LongExamples::kTruncate) break;
  }
  return cut;
}

}  // namespace

ExampleRows BuildExampleRows(const std::vector<int64_t>& starts, int64_t begin, int64_t end, int64_t tokens_end,
                             int64_t seq_len, Packing packing, LongExamples long_examples) {
  STRATA_CHECK(packing != Packing::kWindows && seq_len > 0) << "rows of examples need a packing and seq_len";
  ExampleRows rows;
  std::vector<Piece> pieces;
  auto first = std::lower_bound(starts.begin(), starts.end(), begin);
  for (auto it = first; it != starts.end() && *it < end; ++it) {
    const int64_t stop = std::next(it) == starts.end() ? tokens_end : std::min(*std::next(it), tokens_end);
    const size_t before = pieces.size();
    if (AddPieces(*it, stop, seq_len, long_examples, &pieces)) ++rows.split_examples;
    if (pieces.size() > before) ++rows.examples;
  }
  rows.first.push_back(0);
  int64_t room = 0;  // targets still free in the open row
  for (const Piece& p : pieces) {
    const int64_t targets = p.length - 1;
    if (packing == Packing::kNone || targets > room) {
      if (!rows.pieces.empty()) rows.first.push_back(static_cast<int64_t>(rows.pieces.size()));
      room = seq_len;
    }
    rows.pieces.push_back(p);
    room -= targets;
  }
  if (!rows.pieces.empty()) rows.first.push_back(static_cast<int64_t>(rows.pieces.size()));
  return rows;
}

void FillExampleRow(const ExampleRows& rows, int64_t r, const int32_t* tokens, const uint8_t* mask, int64_t seq_len,
                    int64_t* inputs, int64_t* targets, bool* loss_mask, int64_t* positions) {
  STRATA_CHECK(r >= 0 && r < rows.rows()) << "row " << r << " of " << rows.rows();
  int64_t t = 0;
  for (int64_t i = rows.first[r]; i < rows.first[r + 1]; ++i) {
    const Piece& p = rows.pieces[i];
    for (int64_t j = 0; j + 1 < p.length; ++j, ++t) {
      inputs[t] = tokens[p.begin + j];
      targets[t] = tokens[p.begin + j + 1];
      loss_mask[t] = mask == nullptr || mask[p.begin + j + 1] != 0;  // target j is token j + 1
      positions[t] = j;
    }
  }
  STRATA_CHECK(t <= seq_len) << "row " << r << " holds " << t << " targets, more than seq_len " << seq_len;
  for (int64_t j = 0; t < seq_len; ++t, ++j) {
    inputs[t] = targets[t] = 0;
    loss_mask[t] = false;
    positions[t] = j;
  }
}

}  // namespace strata::data
