#include "bench/sweep_points.h"

#include <algorithm>
#include <set>

namespace strata::bench {

uint64_t SweepPassBytes(uint64_t size, uint64_t tensor_bytes, const GridPoint& p) {
  const uint64_t in_flight = static_cast<uint64_t>(p.block) * p.queue_depth;
  const uint64_t want = std::max(size, kPassOverInFlight * in_flight);
  return std::max<uint64_t>(1, want / tensor_bytes) * tensor_bytes;
}

std::vector<GridPoint> TopSettings(const SweepTable& t, size_t per_side) {
  std::set<GridPoint> chosen;
  std::vector<SweepRow> rows = t.rows;
  for (bool fio : {false, true})
    for (IoDirection d : {IoDirection::kRead, IoDirection::kWrite}) {
      auto value = [&](const SweepRow& r) { return r.direction != d ? -1.0 : fio ? r.fio.median : r.store.median; };
      std::stable_sort(rows.begin(), rows.end(), [&](const SweepRow& a, const SweepRow& b) { return value(a) > value(b); });
      for (size_t i = 0; i < std::min(per_side, rows.size()); ++i)
        if (value(rows[i]) > 0) chosen.insert({rows[i].block, rows[i].queue_depth});
    }
  return {chosen.begin(), chosen.end()};
}

std::vector<GridPoint> UnconfirmedBests(const SweepTable& t) {
  std::set<GridPoint> out;
  for (IoDirection d : {IoDirection::kRead, IoDirection::kWrite}) {
    if (const SweepRow* r = t.BestStore(d); r && r->store.n < 2) out.insert({r->block, r->queue_depth});
    if (const SweepRow* r = t.BestFio(d); r && r->fio.n < 2) out.insert({r->block, r->queue_depth});
  }
  return {out.begin(), out.end()};
}

}  // namespace strata::bench
