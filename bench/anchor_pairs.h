// The output of a benchmark that measures Strata's kernel against the LibTorch call it
// replaced in two settings (bench init, bench accumulate): rates of four variants, anchor and
// ours per setting, summarised and printed as a two-row table or one JSON object with the
// ratios.
#pragma once

#include <array>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"

namespace strata::bench {

struct AnchorPairs {
  std::string setting;                    // first column's header ("threads", "accumulator")
  std::array<std::string, 2> rows;        // the two settings' labels
  std::string anchor, ours;               // the variants' names ("LibTorch normal_", "FillNormal")
  std::array<std::string, 4> json_names;  // anchor, ours of row 0, then of row 1
  std::array<std::string, 2> json_ratios;
};

// `rate[v]`: G values/s of variant v (0, 1: row 0's anchor and ours; 2, 3: row 1's).
// `json`: the object to complete and print; nullptr: the table.
void PrintAnchorPairs(const AnchorPairs& p, const std::vector<double> (&rate)[4], nlohmann::json* json);

}  // namespace strata::bench
