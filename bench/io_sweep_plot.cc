#include "bench/io_sweep_plot.h"

namespace strata::bench {
namespace {

// Okabe-Ito: tells its colours apart for the colour-blind too; more depths reuse them.
constexpr const char* kPalette[] = {"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000"};
constexpr size_t kColours = sizeof(kPalette) / sizeof(kPalette[0]);

PlotPanel DirectionPanel(const SweepTable& t, IoDirection d) {
  PlotPanel panel{d == IoDirection::kRead ? "read" : "write", {}};
  const std::vector<unsigned> depths = t.QueueDepths();
  for (size_t q = 0; q < depths.size(); ++q) {
    PlotSeries store{kPalette[q % kColours], false, {}}, fio{kPalette[q % kColours], true, {}};
    for (uint32_t block : t.Blocks()) {
      const SweepRow* r = t.Find(block, depths[q], d);
      if (!r) continue;
      if (r->store.n > 0) store.points.emplace_back(block, r->store.median);
      if (r->fio.n > 0) fio.points.emplace_back(block, r->fio.median);
    }
    panel.series.push_back(std::move(store));
    if (!fio.points.empty()) panel.series.push_back(std::move(fio));
  }
  return panel;
}

// "3", or "1-4" where points were measured unequally often (bench tune repeats its contenders).
std::string RoundsText(const SweepTable& t) {
  int lo = 0, hi = 0;
  for (const SweepRow& r : t.rows) {
    lo = lo == 0 ? r.store.n : std::min(lo, r.store.n);
    hi = std::max(hi, r.store.n);
  }
  return lo == hi ? fmt::format("{}", hi) : fmt::format("{}-{}", lo, hi);
}

}  // namespace

PlotSpec SweepPlot(const SweepTable& t, const std::string& where) {
  PlotSpec spec;
  spec.title = "Strata's NVMe tier against fio: GB/s by block size and queue depth";
  spec.subtitle = fmt::format("{}; {} engine, {} per pass, median of {} interleaved rounds{}", where, t.engine,
                              HumanBytes(t.bytes_per_pass) + " (4x the bytes in flight where more)", RoundsText(t),
                              t.has_fio() ? "; dashed: " + t.fio_anchor : "; fio not run");
  spec.x_label = "block size (aio.block_size), log scale";
  spec.y_label = "GB/s";
  for (uint32_t block : t.Blocks()) spec.x_ticks.emplace_back(block, BlockLabel(block));
  spec.panels = {DirectionPanel(t, IoDirection::kRead), DirectionPanel(t, IoDirection::kWrite)};
  const std::vector<unsigned> depths = t.QueueDepths();
  for (size_t q = 0; q < depths.size(); ++q)
    spec.legend.push_back({fmt::format("queue depth {}", depths[q]), kPalette[q % kColours], false});
  spec.legend.push_back({"Strata store (solid)", "#444444", false});
  if (t.has_fio()) spec.legend.push_back({"fio io_uring (dashed)", "#444444", true});
  return spec;
}

}  // namespace strata::bench
