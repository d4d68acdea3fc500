#include "bench/io_tune.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>

#include "bench/tune_config.h"
#include "bench/tune_rule.h"
#include "strata/log.h"

namespace strata::bench {
namespace {

// The settings worth measuring again (few, so each gets many repeats: about 12 in 150 s
// here): the best `by_score` by the tuning rule, and the best
// `by_direction` by the store's read and write alone and by fio's (whose best is the other
// denominator), so that no "best" rests on a single lucky sample.
std::vector<GridPoint> Contenders(const SweepTable& t, size_t by_score = 3, size_t by_direction = 1) {
  std::vector<TunePick> scored = ScoreSettings(t);
  std::sort(scored.begin(), scored.end(), [](const TunePick& a, const TunePick& b) { return a.score > b.score; });
  std::vector<GridPoint> top = TopSettings(t, by_direction);
  std::set<GridPoint> chosen(top.begin(), top.end());
  for (size_t i = 0; i < std::min(by_score, scored.size()); ++i) chosen.insert({scored[i].block, scored[i].queue_depth});
  return {chosen.begin(), chosen.end()};
}

constexpr int kMaxConfirmations = 4;

// One round over the grid, then rounds over the contenders until the budget is spent, then
// the confirmation of single-visit bests.
StatusOr<SweepTable> MeasureWithinBudget(IoSweep& sweep, const TuneOptions& o, int* extra_rounds,
                                         int* confirmations) {
  const std::vector<GridPoint> grid = sweep.Grid();
  SweepProgress progress(static_cast<int>(grid.size()), o.budget_s);
  Status s = sweep.Round(grid, &progress, o.budget_s);
  if (s.ok())
    s = sweep.RoundsUntil([](const SweepTable& t) { return Contenders(t); }, o.budget_s, &progress, extra_rounds);
  // A best measured once is the luckiest of many single samples, left standing when the
  // contenders it overtook were measured down: confirm each (a few visits past the budget).
  for (int extra = 0; s.ok() && extra < kMaxConfirmations; ++extra) {
    std::vector<GridPoint> unconfirmed = UnconfirmedBests(sweep.Table());
    if (unconfirmed.empty() || progress.done() < static_cast<int>(grid.size())) break;
    progress.set_total(progress.done() + static_cast<int>(unconfirmed.size()));
    s = sweep.Round(unconfirmed, &progress);
    *confirmations += static_cast<int>(unconfirmed.size());
  }
  progress.Finish();
  if (!s.ok()) return s;
  if (progress.done() < static_cast<int>(grid.size()))
    LogWarn("bench tune: the budget allowed {} of the {} settings; the pick is among those (raise --budget-s)",
            progress.done(), grid.size());
  SweepTable t = sweep.Table();
  t.wall_s = progress.elapsed_s();
  return t;
}

void PrintBests(const SweepTable& t) {
  for (IoDirection d : {IoDirection::kRead, IoDirection::kWrite}) {
    const SweepRow* s = t.BestStore(d);
    const SweepRow* f = t.BestFio(d);
    std::printf("best %-5s strata %.2f GB/s at %s qd %u", DirectionName(d), s->store.median, BlockLabel(s->block).c_str(),
                s->queue_depth);
    if (f) std::printf(";  fio %.2f GB/s at %s qd %u", f->fio.median, BlockLabel(f->block).c_str(), f->queue_depth);
    std::printf("\n");
  }
}

void PrintPick(const TunePick& p, bool fio) {
  std::printf("\npick: block_size %s, queue_depth %u  (rule: the highest min(read / best read, write / best write); "
              "settings within 1%% of it count as equal and the fewest bytes in flight wins)\n",
              BlockLabel(p.block).c_str(), p.queue_depth);
  Table t({"at the pick", "strata GB/s", "of strata's best", "of fio's best"});
  auto of_fio = [&](double v, double best) { return fio && best > 0 ? fmt::format("{:.2f}", v / best) : "-"; };
  t.Row({"read", fmt::format("{:.2f}", p.read), fmt::format("{:.2f}", p.read / p.best_read),
         of_fio(p.read, p.fio_best_read)});
  t.Row({"write", fmt::format("{:.2f}", p.write), fmt::format("{:.2f}", p.write / p.best_write),
         of_fio(p.write, p.fio_best_write)});
  t.Print(stdout);
}

// The config lines to use, and why the buffer count is what it is.
std::optional<int64_t> PrintConfigSection(const TuneOptions& o, const TunePick& p) {
  std::optional<int64_t> count;
  if (o.param_buffer_bytes > 0)
    count = ParamBufferCount(p.block, p.queue_depth, o.param_buffer_bytes, o.prefetch_budget_bytes);
  std::printf("\nfor %s:\n  \"aio\": { \"block_size\": %u, \"queue_depth\": %u }", 
              o.config_path.empty() ? "the built-in config" : o.config_path.c_str(), p.block, p.queue_depth);
  if (count) std::printf(",\n  \"zero_optimization\": { \"offload_param\": { \"buffer_count\": %ld } }", *count);
  std::printf("\n");
  if (count)
    std::printf("buffer_count %ld: tensors of %s in flight to keep %u x %s requests busy, as far as the prefetch "
                "budget (%s) allows, plus one computing and one written back (at least 3)\n",
                *count, HumanBytes(o.param_buffer_bytes).c_str(), p.queue_depth, BlockLabel(p.block).c_str(),
                HumanBytes(o.prefetch_budget_bytes).c_str());
  else
    std::printf("buffer_count: not set (%s)\n", o.buffer_note.c_str());
  std::printf("offload_optimizer.buffer_count: not set (Strata sizes the optimizer's pinned pool itself: 12 "
              "sub-group buffers)\n");
  return count;
}

}  // namespace

int RunIoTune(const TuneOptions& o) {
  auto fail = [](const Status& s) {
    LogError("bench tune: {}", s.ToString());
    return 1;
  };
  if (o.write && o.config_path.empty()) return fail(InvalidArgument("--write needs --config FILE"));
  auto sweep = IoSweep::Create(o.sweep);
  if (!sweep.ok()) return fail(sweep.status());
  std::fprintf(stderr, "bench tune: %zu block sizes x %zu queue depths x read/write under %s, %s per pass, budget %s\n",
               o.sweep.blocks.size(), o.sweep.queue_depths.size(), o.sweep.dir.c_str(),
               HumanBytes(o.sweep.size).c_str(), MinutesSeconds(o.budget_s).c_str());
  int extra_rounds = 0, confirmations = 0;
  auto table = MeasureWithinBudget(**sweep, o, &extra_rounds, &confirmations);
  if (!table.ok()) return fail(table.status());
  auto pick = PickSetting(*table);
  if (!pick.ok()) return fail(pick.status());
  std::printf("measured %zu settings, then the contenders %d more time(s), %d single-visit best(s) confirmed, in %s; "
              "medians; fio: %s\n", table->rows.size() / 2, extra_rounds, confirmations, MinutesSeconds(table->wall_s).c_str(),
              (*sweep)->fio() ? kSweepFioAnchor : "not run");
  PrintBests(*table);
  PrintPick(*pick, (*sweep)->fio());
  const std::optional<int64_t> count = PrintConfigSection(o, *pick);
  if (!o.out_dir.empty())
    if (Status s = WriteSweepFiles(*table, "bench tune under " + o.sweep.dir, o.out_dir, "io_tune"); !s.ok())
      return fail(s);
  if (!o.write) return 0;
  auto written = WriteTunedConfig(o.config_path, {pick->block, pick->queue_depth, count});
  if (!written.ok()) return fail(written.status());
  std::string set;
  for (const std::string& k : written->keys) set += (set.empty() ? "" : ", ") + k;
  std::printf("wrote %s (%s; %s %s.bak)\n", o.config_path.c_str(), set.c_str(),
              written->backup_written ? "the original kept as" : "the backup of an earlier --write kept as it was in",
              o.config_path.c_str());
  return 0;
}

}  // namespace strata::bench
