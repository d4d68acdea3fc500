#include "bench/links_report.h"

#include <algorithm>

#include "bench/bench_util.h"

namespace strata::bench {
namespace {

std::string Cell(const std::optional<double>& v) { return v ? fmt::format("{:.2f}", *v) : "-"; }
nlohmann::ordered_json Value(const std::optional<double>& v) { return v ? nlohmann::ordered_json(*v) : nullptr; }

}  // namespace

std::optional<double> LinkRow::ratio() const {
  if (!gbps || !anchor_gbps || *anchor_gbps <= 0) return std::nullopt;
  return *gbps / *anchor_gbps;
}

void PrintLinkTable(const std::vector<LinkRow>& rows, std::FILE* out) {
  Table t({"link", "GB/s", "anchor (same run)", "anchor GB/s", "ratio", "physical"});
  std::vector<std::string> reasons;  // why rows are absent, each said once under the table
  for (const LinkRow& r : rows) {
    t.Row({r.link, r.gbps ? Cell(r.gbps) : "absent", r.anchor, Cell(r.anchor_gbps), Cell(r.ratio()), r.physical});
    if (!r.gbps && std::find(reasons.begin(), reasons.end(), r.absent) == reasons.end()) reasons.push_back(r.absent);
  }
  t.Print(out);
  for (const std::string& why : reasons) std::fprintf(out, "absent: %s\n", why.c_str());
}

nlohmann::ordered_json LinksJson(const std::vector<LinkRow>& rows) {
  nlohmann::ordered_json j = {{"rows", nlohmann::ordered_json::array()}};
  for (const LinkRow& r : rows)
    j["rows"].push_back({{"link", r.link},
                         {"gbps", Value(r.gbps)},
                         {"absent", r.gbps ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.absent)},
                         {"anchor", r.anchor},
                         {"anchor_gbps", Value(r.anchor_gbps)},
                         {"ratio", Value(r.ratio())},
                         {"physical_gbps", Value(r.physical_gbps)},
                         {"physical", r.physical}});
  return j;
}

}  // namespace strata::bench
