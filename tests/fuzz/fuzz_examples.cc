// libFuzzer target: examples files (src/data/examples.h) and the rows built from them. The
// first two bytes give the token file's length, the third seq_len; the rest is the file, with
// or without the header of side_file.h (read against a token file of that length, CRC 0). A
// file that decodes must give rows within the tokens, of at most seq_len targets, filled with
// positions that restart at 0 and padding that never trains.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "src/data/examples.h"
#include "src/data/side_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata::data;
  if (size < 3) return 0;
  const auto tokens = static_cast<size_t>(1 + (data[0] << 8 | data[1]));
  const int64_t seq_len = 1 + data[2] % 64;
  std::vector<int64_t> starts;
  const std::string_view file(reinterpret_cast<const char*>(data + 3), size - 3);
  bool fingerprinted = false;
  auto bytes = SideFilePayload(file, SideKind::kExamples, {tokens, 0}, "fuzz.examples", "fuzz.u16", &fingerprinted);
  if (!bytes.ok()) return 0;
  if (fingerprinted != (bytes->size() + kSideHeaderBytes == file.size())) __builtin_trap();
  if (!DecodeExampleStarts(*bytes, tokens, "fuzz.examples", "fuzz.u16", &starts).ok()) return 0;
  std::vector<int32_t> ids(tokens, 1);
  std::vector<int64_t> in(seq_len), out(seq_len), pos(seq_len);
  std::vector<uint8_t> mask(static_cast<size_t>(seq_len));
  const auto n = static_cast<int64_t>(tokens);
  for (Packing packing : {Packing::kNone, Packing::kPacked})
    for (LongExamples long_examples : {LongExamples::kSplit, LongExamples::kTruncate}) {
      const ExampleRows rows = BuildExampleRows(starts, 0, n, n, seq_len, packing, long_examples);
      for (const Piece& p : rows.pieces)
        if (p.begin < 0 || p.length < 2 || p.begin + p.length > n || p.length > seq_len + 1) __builtin_trap();
      for (int64_t r = 0; r < rows.rows(); ++r) {
        FillExampleRow(rows, r, ids.data(), nullptr, seq_len, in.data(), out.data(),
                       reinterpret_cast<bool*>(mask.data()), pos.data());
        if (pos[0] != 0) __builtin_trap();
        for (int64_t t = 0; t < seq_len; ++t)
          if ((in[t] == 0 && mask[t]) || (t > 0 && pos[t] != 0 && pos[t] != pos[t - 1] + 1)) __builtin_trap();
      }
    }
  return 0;
}
