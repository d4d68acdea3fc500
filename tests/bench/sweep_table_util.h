// A synthetic sweep table for the report tests: (block, queue depth) -> store read/write and
// fio read/write medians, as if measured.
#pragma once

#include <initializer_list>

#include "bench/io_results.h"

namespace strata::bench::testing {

struct FakePoint {
  uint32_t block;
  unsigned queue_depth;
  double read, write;          // the store's medians
  double fio_read = 0, fio_write = 0;  // 0: fio did not run
};

inline Summary Sample(double median) {
  if (median <= 0) return Summary{};
  return Summary{median, median * 0.9, median * 1.1, 3};
}

inline SweepTable FakeTable(std::initializer_list<FakePoint> points) {
  SweepTable t;
  t.engine = "io_uring";
  t.bytes_per_pass = 256ull << 20;
  t.rounds = 3;
  for (const FakePoint& p : points) {
    t.rows.push_back({p.block, p.queue_depth, IoDirection::kWrite, Sample(p.write), Sample(p.fio_write), Summary{}});
    t.rows.push_back({p.block, p.queue_depth, IoDirection::kRead, Sample(p.read), Sample(p.fio_read), Summary{}});
  }
  if (t.has_fio()) t.fio_anchor = "fio io_uring --fixedbufs --registerfiles";
  return t;
}

}  // namespace strata::bench::testing
