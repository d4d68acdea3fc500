#include "bench/gpu_links.h"

namespace strata::bench {
namespace {

struct RowSpec {
  const char* link;
  const char* anchor;
};
// Same order and names in every build: H2D then D2H of Strata's path, the raw copy, pageable.
constexpr RowSpec kRows[] = {
    {"H2D pinned, Strata (cuda::Transfer)", "cudaMemcpyAsync, pinned"},
    {"D2H pinned, Strata (cuda::Transfer)", "cudaMemcpyAsync, pinned"},
    {"H2D pinned, raw cudaMemcpyAsync", "PCIe link"},
    {"D2H pinned, raw cudaMemcpyAsync", "PCIe link"},
    {"H2D pageable, cudaMemcpyAsync", "cudaMemcpyAsync, pinned"},
    {"D2H pageable, cudaMemcpyAsync", "cudaMemcpyAsync, pinned"},
};

}  // namespace

std::vector<LinkRow> GpuLinkRows(const StatusOr<GpuCopyFigures>& figures) {
  std::vector<LinkRow> rows;
  for (const RowSpec& spec : kRows) {
    LinkRow row;
    row.link = spec.link;
    row.anchor = spec.anchor;
    rows.push_back(std::move(row));
  }
  if (!figures.ok()) {
    for (LinkRow& r : rows) {
      r.absent = figures.status().message();
      r.physical = "-";
    }
    return rows;
  }
  const GpuCopyFigures& f = *figures;
  const std::optional<double> link = f.pcie ? std::optional<double>(f.pcie->gbps()) : std::nullopt;
  const Summary* measured[] = {&f.store_h2d, &f.store_d2h, &f.raw_h2d, &f.raw_d2h, &f.pageable_h2d, &f.pageable_d2h};
  const std::optional<double> anchors[] = {f.raw_h2d.median, f.raw_d2h.median, link, link, f.raw_h2d.median,
                                           f.raw_d2h.median};
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].gbps = measured[i]->median;
    rows[i].anchor_gbps = anchors[i];
    rows[i].physical_gbps = link;
    rows[i].physical = f.pcie ? f.pcie->Describe() : "none stated";
  }
  if (!f.pinned) rows[0].link += " [pool NOT page-locked]";
  return rows;
}

}  // namespace strata::bench
