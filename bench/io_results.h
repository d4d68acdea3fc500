// The results of an I/O sweep as a table of (block size, queue depth, direction) rows, each
// with the store's and fio's medians and spreads, and the table written as CSV and JSON.
// Pure data and formatting (no I/O, no LibTorch), so it is tested on synthetic tables.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_util.h"

namespace strata::bench {

enum class IoDirection { kWrite, kRead };
const char* DirectionName(IoDirection d);  // "write", "read"

struct SweepRow {
  uint32_t block = 0;        // bytes per request
  unsigned queue_depth = 0;  // requests in flight
  IoDirection direction = IoDirection::kRead;
  Summary store;             // GB/s over the rounds
  Summary fio;               // GB/s over the rounds; n == 0 when fio did not run
  // store / fio of each visit (the two passes back to back), over the visits: the VM's drift
  // between minutes cancels in each pair, which a ratio of the two medians does not do.
  Summary paired;            // n == 0 when fio did not run
  // paired.median, or store.median / fio.median for a row without pairs; 0 without fio.
  double StoreOverFio() const;
};

struct SweepTable {
  std::vector<SweepRow> rows;
  std::string engine;            // the store's I/O engine ("io_uring", "pread")
  std::string fio_anchor;        // which fio ran ("fio io_uring --fixedbufs --registerfiles"), "" for none
  uint64_t bytes_per_pass = 0;
  int rounds = 0;                // rounds planned (a row may hold fewer samples when a budget cut it)
  double wall_s = 0;

  bool has_fio() const;
  const SweepRow* Find(uint32_t block, unsigned queue_depth, IoDirection direction) const;
  // The row with the highest store median (or fio median) in `direction`; null when none.
  const SweepRow* BestStore(IoDirection direction) const;
  const SweepRow* BestFio(IoDirection direction) const;
  std::vector<uint32_t> Blocks() const;            // distinct, ascending
  std::vector<unsigned> QueueDepths() const;       // distinct, ascending
};

// One line per row: block_bytes,queue_depth,direction,store_gbps,store_min,store_max,
// rounds,fio_gbps,fio_min,fio_max,store_over_fio (fio cells empty without fio; store_over_fio
// is StoreOverFio(), the median of the paired ratios).
std::string SweepCsv(const SweepTable& table);
// {"engine", "fio_anchor", "bytes_per_pass", "rounds", "wall_s", "best": {...}, "points": [...]}
nlohmann::ordered_json SweepJson(const SweepTable& table);

// "128K", "1M", "8M": a block size as the plot and the tables label it.
std::string BlockLabel(uint32_t block);

}  // namespace strata::bench
