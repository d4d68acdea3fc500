// Which settings an I/O sweep measures, and how long: the grid point, its pass size, and the
// settings re-measured after the grid rounds (the sweep's refinement, tune's contenders and
// confirmations). Pure table logic (no I/O), tested on synthetic tables.
#pragma once

#include <compare>
#include <cstdint>
#include <vector>

#include "bench/io_results.h"

namespace strata::bench {

struct GridPoint {
  uint32_t block = 0;
  unsigned queue_depth = 0;
  auto operator<=>(const GridPoint&) const = default;
};

// A point's pass: `size`, or kPassOverInFlight x its bytes in flight (block x queue depth) if
// that is more, in whole tensors. With a pass no longer than what is in flight every request
// lands at once at the end, and the store's check of the last pieces (xxh3) cannot overlap
// any I/O: 8M x 64 over 256 MiB read at 0.8x of fio here, a burst no training step makes.
inline constexpr uint64_t kPassOverInFlight = 4;
uint64_t SweepPassBytes(uint64_t size, uint64_t tensor_bytes, const GridPoint& point);

// The best `per_side` settings by each of the store's and fio's medians, per direction (up to
// 4 x per_side settings), ascending.
std::vector<GridPoint> TopSettings(const SweepTable& table, size_t per_side);

// The store's and fio's best setting in each direction where it rests on a single visit (tune
// reports its pick against both): the luckiest of
// many single samples, left standing when the settings it overtook were measured down.
std::vector<GridPoint> UnconfirmedBests(const SweepTable& table);

}  // namespace strata::bench
