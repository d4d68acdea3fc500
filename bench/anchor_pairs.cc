#include "bench/anchor_pairs.h"

#include <fmt/format.h>

namespace strata::bench {

void PrintAnchorPairs(const AnchorPairs& p, const std::vector<double> (&rate)[4], nlohmann::json* json) {
  Summary sum[4];
  for (int v = 0; v < 4; ++v) sum[v] = Summarize(rate[v]);
  if (json) {
    for (int v = 0; v < 4; ++v)
      (*json)[p.json_names[v]] = {{"gvalues_per_s", sum[v].median}, {"min", sum[v].min}, {"max", sum[v].max}};
    for (int r = 0; r < 2; ++r) (*json)[p.json_ratios[r]] = sum[2 * r + 1].median / sum[2 * r].median;
    fmt::print("{}\n", json->dump());
    return;
  }
  Table table({p.setting, p.anchor + " G values/s", p.ours + " G values/s", p.ours + " / " + p.anchor});
  for (int r = 0; r < 2; ++r)
    table.Row({p.rows[r], Format(sum[2 * r]), Format(sum[2 * r + 1]),
               fmt::format("{:.2f}", sum[2 * r + 1].median / sum[2 * r].median)});
  table.Print(stdout);
}

}  // namespace strata::bench
