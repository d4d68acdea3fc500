// Small helpers shared by the benchmarks: robust summaries of repeated measurements
// (median and spread, because this machine drifts by up to +-40% between minutes), a
// wall clock, a plain-text table, and byte-size parsing/printing.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "strata/status.h"

namespace strata::bench {

struct Summary {
  double median = 0, min = 0, max = 0;
  int n = 0;
  // (max - min) / median: the spread of the repetitions relative to the median.
  double spread() const { return median > 0 ? (max - min) / median : 0; }
};
Summary Summarize(std::vector<double> samples);
// "1.23 (1.10-1.40)" with `digits` decimals.
std::string Format(const Summary& s, int digits = 2);

double NowSeconds();  // monotonic

// Left-aligned first column, right-aligned others.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void Row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  void Print(std::FILE* out) const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string HumanBytes(uint64_t bytes);  // "2.00 GiB"
// Parses "4096", "1M", "1MiB", "2G", "2GB", "21.5G" (binary multiples; a whole number of bytes).
// Error names the flag.
StatusOr<uint64_t> ParseBytes(const std::string& text, const std::string& flag);

// Writes `text` to `path` atomically (a temporary beside it, renamed when complete; an existing
// file keeps its mode). Errors name the file and errno.
Status WriteFile(const std::string& path, const std::string& text);

}  // namespace strata::bench
