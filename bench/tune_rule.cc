#include "bench/tune_rule.h"

#include <algorithm>

namespace strata::bench {

std::vector<TunePick> ScoreSettings(const SweepTable& t) {
  const SweepRow* best_read = t.BestStore(IoDirection::kRead);
  const SweepRow* best_write = t.BestStore(IoDirection::kWrite);
  std::vector<TunePick> scored;
  if (!best_read || !best_write || best_read->store.median <= 0 || best_write->store.median <= 0) return scored;
  for (const SweepRow& r : t.rows) {
    if (r.direction != IoDirection::kRead) continue;
    const SweepRow* w = t.Find(r.block, r.queue_depth, IoDirection::kWrite);
    if (!w || r.store.n == 0 || w->store.n == 0) continue;
    TunePick p;
    p.block = r.block;
    p.queue_depth = r.queue_depth;
    p.read = r.store.median;
    p.write = w->store.median;
    p.best_read = best_read->store.median;
    p.best_write = best_write->store.median;
    p.score = std::min(p.read / p.best_read, p.write / p.best_write);
    scored.push_back(p);
  }
  return scored;
}

StatusOr<TunePick> PickSetting(const SweepTable& t, double tie) {
  const std::vector<TunePick> candidates = ScoreSettings(t);
  if (candidates.empty()) return Error(StatusCode::kNotFound, "no setting has both a read and a write measured");
  double top = 0;
  for (const TunePick& p : candidates) top = std::max(top, p.score);
  auto in_flight = [](const TunePick& p) { return static_cast<uint64_t>(p.block) * p.queue_depth; };
  const TunePick* pick = nullptr;
  for (const TunePick& p : candidates) {
    if (p.score < top * (1 - tie)) continue;
    if (!pick || in_flight(p) < in_flight(*pick) ||
        (in_flight(p) == in_flight(*pick) && p.queue_depth < pick->queue_depth))
      pick = &p;
  }
  TunePick out = *pick;
  if (const SweepRow* f = t.BestFio(IoDirection::kRead)) out.fio_best_read = f->fio.median;
  if (const SweepRow* f = t.BestFio(IoDirection::kWrite)) out.fio_best_write = f->fio.median;
  return out;
}

int64_t ParamBufferCount(uint32_t block, unsigned queue_depth, uint64_t buffer_bytes, uint64_t prefetch_budget_bytes) {
  if (buffer_bytes == 0) return 3;
  const uint64_t to_fill_queue = (static_cast<uint64_t>(queue_depth) * block + buffer_bytes - 1) / buffer_bytes;
  const uint64_t prefetch_allows = std::max<uint64_t>(1, prefetch_budget_bytes / buffer_bytes);
  const uint64_t in_flight = std::min(to_fill_queue, prefetch_allows);
  return static_cast<int64_t>(std::clamp<uint64_t>(in_flight + 2, 3, 1024));
}

}  // namespace strata::bench
