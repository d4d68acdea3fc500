#include "bench/io_sweep.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>

#include "bench/io_sweep_plot.h"
#include "bench/svg_plot.h"
#include "strata/log.h"

namespace strata::bench {
namespace {

constexpr FioFlavour kSweepFio[] = {FioFlavour::kFixedBuffers};

std::string Figures(const IoSamples& s, bool fio) {
  return fio ? fmt::format("{:.2f} (fio {:.2f})", s.store.back(), s.fio_fixed.back())
             : fmt::format("{:.2f}", s.store.back());
}

// Per direction: the store's best setting with fio there, and fio's best with the store there.
void PrintBest(const SweepTable& t) {
  Table out({"best", "setting", "strata GB/s", "fio GB/s", "strata / fio"});
  for (IoDirection d : {IoDirection::kRead, IoDirection::kWrite}) {
    auto row = [&](const char* who, const SweepRow* r) {
      if (!r) return;
      const bool fio = r->fio.n > 0 && r->fio.median > 0;
      out.Row({fmt::format("{} ({})", DirectionName(d), who), fmt::format("{} qd {}", BlockLabel(r->block), r->queue_depth),
               Format(r->store), fio ? Format(r->fio) : "-", fio ? fmt::format("{:.2f}", r->StoreOverFio()) : "-"});
    };
    row("strata", t.BestStore(d));
    row("fio", t.BestFio(d));
  }
  out.Print(stdout);
}

// Per direction, the store's median at every point: blocks down, queue depths across.
void PrintGrid(const SweepTable& t, IoDirection d) {
  std::vector<std::string> header = {std::string(DirectionName(d)) + ", GB/s strata (fio)"};
  for (unsigned q : t.QueueDepths()) header.push_back(fmt::format("qd {}", q));
  Table out(header);
  for (uint32_t block : t.Blocks()) {
    std::vector<std::string> cells = {BlockLabel(block)};
    for (unsigned q : t.QueueDepths()) {
      const SweepRow* r = t.Find(block, q, d);
      cells.push_back(!r ? "-" : r->fio.n ? fmt::format("{:.2f} ({:.2f})", r->store.median, r->fio.median)
                                          : fmt::format("{:.2f}", r->store.median));
    }
    out.Row(cells);
  }
  out.Print(stdout);
}

}  // namespace

StatusOr<std::unique_ptr<IoSweep>> IoSweep::Create(SweepOptions o) {
  if (o.blocks.empty() || o.queue_depths.empty()) return InvalidArgument("the sweep needs block sizes and queue depths");
  for (uint32_t b : o.blocks)
    if (b == 0 || b % 4096 || o.tensor_bytes % b)
      return InvalidArgument("block size {} must be a multiple of 4096 dividing {} bytes", b, o.tensor_bytes);
  for (unsigned q : o.queue_depths)
    if (q == 0 || q > 4096) return InvalidArgument("queue depth {} is not in [1, 4096]", q);
  if (o.size < o.tensor_bytes) return InvalidArgument("the pass size must be at least {} bytes", o.tensor_bytes);
  std::sort(o.blocks.begin(), o.blocks.end());
  std::sort(o.queue_depths.begin(), o.queue_depths.end());
  // One pool for every point: the most buffers any point uses (no more than it has tensors).
  size_t count = 3;
  for (uint32_t b : o.blocks)
    for (unsigned q : o.queue_depths)
      count = std::max(count, std::min<size_t>(StoreBuffersFor(b, q, o.tensor_bytes),
                                               std::max<uint64_t>(3, SweepPassBytes(o.size, o.tensor_bytes, {b, q}) / o.tensor_bytes)));
  STRATA_ASSIGN_OR_RETURN(auto pool, MakeBenchPool(count, o.tensor_bytes, HostPages::kHuge));
  const bool fio = o.run_fio && HaveFio();
  return std::unique_ptr<IoSweep>(new IoSweep(std::move(o), std::move(pool), fio));
}

IoSweep::IoSweep(SweepOptions options, std::unique_ptr<PinnedPool> pool, bool fio)
    : options_(std::move(options)), pool_(std::move(pool)), fio_(fio) {}

std::vector<GridPoint> IoSweep::Grid() const {
  std::vector<GridPoint> grid;
  for (uint32_t b : options_.blocks)
    for (unsigned q : options_.queue_depths) grid.push_back({b, q});
  return grid;
}

Status IoSweep::Visit(const GridPoint& p, SweepProgress* progress) {
  const IoPointSettings s{options_.dir, SweepPassBytes(options_.size, options_.tensor_bytes, p), p.block, p.queue_depth, options_.tensor_bytes,
                          options_.checksums, options_.engine};
  STRATA_ASSIGN_OR_RETURN(auto point, IoPoint::Open(s, pool_.get()));
  engine_ = point->tier().engine_name();
  STRATA_RETURN_IF_ERROR(point->Prepare(fio_));
  Samples& slot = samples_[p];
  const int visit = static_cast<int>(slot.write.store.size());  // alternates the side order per point
  const std::span<const FioFlavour> fio = fio_ ? std::span<const FioFlavour>(kSweepFio) : std::span<const FioFlavour>();
  STRATA_RETURN_IF_ERROR(point->Round(IoDirection::kWrite, visit, fio, &slot.write));
  STRATA_RETURN_IF_ERROR(point->Round(IoDirection::kRead, visit, fio, &slot.read));
  progress->Done(fmt::format("{:>4} qd {:<2}  read {}  write {} GB/s", BlockLabel(p.block), p.queue_depth,
                             Figures(slot.read, fio_), Figures(slot.write, fio_)));
  return Status();
}

Status IoSweep::Round(std::vector<GridPoint> points, SweepProgress* progress, double budget_s) {
  std::mt19937_64 rng(options_.seed + static_cast<uint64_t>(rounds_started_++));
  std::shuffle(points.begin(), points.end(), rng);
  for (const GridPoint& p : points) {
    if (budget_s > 0 && progress->elapsed_s() + progress->mean_point_s() > budget_s) return Status();
    STRATA_RETURN_IF_ERROR(Visit(p, progress));
  }
  return Status();
}

Status IoSweep::RoundsUntil(const std::function<std::vector<GridPoint>(const SweepTable&)>& choose, double deadline_s,
                            SweepProgress* progress, int* rounds) {
  for (std::vector<GridPoint> points = choose(Table()); !points.empty(); points = choose(Table())) {
    const double per_round = progress->mean_point_s() * static_cast<double>(points.size());
    const int fit = static_cast<int>((deadline_s - progress->elapsed_s()) / std::max(per_round, 1e-3));
    if (fit < 1) break;
    progress->set_total(progress->done() + fit * static_cast<int>(points.size()));
    ++*rounds;
    STRATA_RETURN_IF_ERROR(Round(std::move(points), progress, deadline_s));
  }
  return Status();
}

SweepTable IoSweep::Table() const {
  SweepTable t;
  t.engine = engine_;
  t.fio_anchor = fio_ ? kSweepFioAnchor : "";
  t.bytes_per_pass = options_.size / options_.tensor_bytes * options_.tensor_bytes;
  t.rounds = rounds_started_;
  for (const auto& [p, s] : samples_)
    for (IoDirection d : {IoDirection::kWrite, IoDirection::kRead}) {
      const IoSamples& x = d == IoDirection::kWrite ? s.write : s.read;
      if (x.store.empty()) continue;
      std::vector<double> pairs;
      for (size_t i = 0; i < std::min(x.store.size(), x.fio_fixed.size()); ++i)
        if (x.fio_fixed[i] > 0) pairs.push_back(x.store[i] / x.fio_fixed[i]);
      t.rows.push_back({p.block, p.queue_depth, d, Summarize(x.store), Summarize(x.fio_fixed), Summarize(pairs)});
    }
  return t;
}

Status WriteSweepFiles(const SweepTable& t, const std::string& where, const std::string& out_dir,
                       const std::string& name) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return Error(StatusCode::kInternal, "cannot create {}: {}", out_dir, ec.message());
  const std::string base = (std::filesystem::path(out_dir) / name).string();
  STRATA_RETURN_IF_ERROR(WriteFile(base + ".csv", SweepCsv(t)));
  STRATA_RETURN_IF_ERROR(WriteFile(base + ".json", SweepJson(t).dump(2) + "\n"));
  STRATA_RETURN_IF_ERROR(WriteFile(base + ".svg", RenderSvg(SweepPlot(t, where))));
  std::printf("wrote %s.csv, %s.json, %s.svg\n", base.c_str(), base.c_str(), base.c_str());
  return Status();
}

int RunIoSweep(const SweepOptions& o, const std::string& out_dir) {
  auto fail = [](const Status& s) {
    LogError("bench io --sweep: {}", s.ToString());
    return 1;
  };
  auto sweep = IoSweep::Create(o);
  if (!sweep.ok()) return fail(sweep.status());
  IoSweep& sw = **sweep;
  const std::vector<GridPoint> grid = sw.Grid();
  std::fprintf(stderr, "bench io --sweep: %zu block sizes x %zu queue depths x read/write, %s per pass, %d rounds, "
               "strata%s interleaved at each point, under %s\n", o.blocks.size(), o.queue_depths.size(),
               HumanBytes(o.size).c_str(), o.rounds, sw.fio() ? " and fio" : " only (no fio)", o.dir.c_str());
  SweepProgress progress(static_cast<int>(grid.size()) * o.rounds);
  for (int r = 0; r < o.rounds; ++r)
    if (Status s = sw.Round(grid, &progress); !s.ok()) return progress.Finish(), fail(s);
  // The refinement: rounds over the current best settings while a whole round still fits.
  int refined = 0;
  if (Status s = sw.RoundsUntil([](const SweepTable& t) { return TopSettings(t, 2); },
                                progress.elapsed_s() + o.refine_s, &progress, &refined);
      !s.ok())
    return progress.Finish(), fail(s);
  progress.Finish();
  SweepTable t = sw.Table();
  t.wall_s = progress.elapsed_s();
  PrintGrid(t, IoDirection::kRead);
  PrintGrid(t, IoDirection::kWrite);
  PrintBest(t);
  std::printf("%d points x %d rounds, then the best settings %d more time(s), in %s; medians, strata / fio the "
              "median of each visit's pair; fio: %s\n", static_cast<int>(grid.size()), o.rounds, refined,
              MinutesSeconds(t.wall_s).c_str(), sw.fio() ? kSweepFioAnchor : "not run");
  if (Status s = WriteSweepFiles(t, "swap folder under " + o.dir, out_dir, "io_sweep"); !s.ok()) return fail(s);
  return 0;
}

}  // namespace strata::bench
