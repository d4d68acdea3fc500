// The rows of `strata bench links` (one per link a training step uses) and their table and
// JSON forms. Pure formatting, shared by the CPU rows and the GPU rows of either build.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace strata::bench {

struct LinkRow {
  std::string link;                      // what moves where, through what ("NVMe read via the tier (1M, qd 32)")
  std::optional<double> gbps;            // median GB/s; nullopt when absent
  std::string absent;                    // why it is absent ("no GPU: CPU build")
  std::string anchor;                    // what it is measured against, in the same run
  std::optional<double> anchor_gbps;
  std::optional<double> physical_gbps;   // the hardware's stated figure, when known
  std::string physical;                  // "PCIe 4.0 x16 (31.5 GB/s)", "none stated (...)"
  std::optional<double> ratio() const;   // gbps / anchor_gbps when both are known
};

// Columns: link, GB/s, anchor, anchor GB/s, ratio, physical; then why absent rows are absent.
void PrintLinkTable(const std::vector<LinkRow>& rows, std::FILE* out);
// {"rows": [{"link", "gbps", "absent", "anchor", "anchor_gbps", "ratio", "physical_gbps", "physical"}]}
// (unknown figures are null).
nlohmann::ordered_json LinksJson(const std::vector<LinkRow>& rows);

}  // namespace strata::bench
