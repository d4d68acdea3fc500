// `strata bench io --sweep`: the NVMe tier's sequential write and read against fio's io_uring
// engine over a grid of block sizes x queue depths, written as CSV, JSON and an SVG picture.
//
// Each round visits every grid point once, in its own shuffled order (this VM drifts by up to
// +-40% between minutes; a fixed order would turn a drift into a bias against the points
// visited last). At a point a fresh tier is opened with that block size and queue depth, then
// one write and one read are measured, each as the store's pass and fio's, interleaved as in
// `bench io` (the order alternating between visits). After the grid rounds, the best settings
// (TopSettings) are visited again until `refine_s` is spent: the best of 28 noisy medians is
// the luckiest, and the figures users take from a sweep are the best ones. Medians over the
// visits are reported, and store / fio as the median of each visit's pair.
// `bench tune` drives the same IoSweep with a time budget.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/io_point.h"
#include "bench/io_results.h"
#include "bench/sweep_points.h"
#include "bench/sweep_progress.h"

namespace strata::bench {

struct SweepOptions {
  std::string dir = "/var/tmp/strata";  // parent of the swap folders (the drive to measure)
  std::vector<uint32_t> blocks = {128u << 10, 256u << 10, 512u << 10, 1u << 20, 2u << 20, 4u << 20, 8u << 20};
  std::vector<unsigned> queue_depths = {1, 4, 16, 64};
  // Smaller passes and fewer rounds than the single-point bench (2 GiB, 7 rounds), so the 28
  // default points x 2 directions x 2 sides fit in a few minutes.
  uint64_t size = 256ull << 20;          // bytes per pass (at least; SweepPassBytes)
  // The store's tensor size, a multiple of every block. 16 MiB was chosen while reads were
  // checked per whole tensor (a 256 MiB pass ended with one 64 MiB hash); reads are now checked
  // per block as they land (Note [Verifying reads], offload/nvme_tier.cc), and the size has not
  // been measured again since.
  uint64_t tensor_bytes = 16ull << 20;
  int rounds = 2;          // over the whole grid
  double refine_s = 90;    // then re-visiting the best settings (0: none)
  bool checksums = true;
  bool run_fio = true;
  IoEngineKind engine = IoEngineKind::kAuto;
  uint64_t seed = 1;  // of the visiting order
};

class IoSweep {
 public:
  // Checks the grid and allocates the pinned pool every point shares (once: allocation is slow here).
  static StatusOr<std::unique_ptr<IoSweep>> Create(SweepOptions options);

  std::vector<GridPoint> Grid() const;  // blocks x queue depths, ascending
  // Visits each of `points` once, shuffled. With `budget_s` > 0, stops (returning OK) before a
  // visit that would end past budget_s seconds after `progress` began, by the mean visit so far.
  Status Round(std::vector<GridPoint> points, SweepProgress* progress, double budget_s = 0);
  // Rounds over `choose(Table())`, chosen afresh before each, while a whole round (at the mean
  // visit so far) still ends by `deadline_s` after `progress` began; adds the rounds started
  // to *rounds. The sweep's refinement and tune's contenders.
  Status RoundsUntil(const std::function<std::vector<GridPoint>(const SweepTable&)>& choose, double deadline_s,
                     SweepProgress* progress, int* rounds);
  // Medians per visited point, blocks then depths ascending, write before read.
  SweepTable Table() const;
  bool fio() const { return fio_; }
  const SweepOptions& options() const { return options_; }

 private:
  struct Samples {
    IoSamples write, read;
  };
  IoSweep(SweepOptions options, std::unique_ptr<PinnedPool> pool, bool fio);
  Status Visit(const GridPoint& p, SweepProgress* progress);

  SweepOptions options_;
  std::unique_ptr<PinnedPool> pool_;
  bool fio_;
  int rounds_started_ = 0;
  std::string engine_ = "?";
  std::map<GridPoint, Samples> samples_;
};

// The label of the fio anchor a sweep runs.
inline constexpr const char* kSweepFioAnchor = "fio io_uring --fixedbufs --registerfiles";

// Writes `name`.csv, .json and .svg into `out_dir` (created) and prints their paths; `where`
// goes into the picture's subtitle.
Status WriteSweepFiles(const SweepTable& table, const std::string& where, const std::string& out_dir,
                       const std::string& name);

// `bench io --sweep`: runs `options.rounds` rounds over the grid and the refinement, writes io_sweep.csv,
// io_sweep.json and io_sweep.svg into `out_dir` (created), prints the best settings and the
// files' paths to stdout. Returns the exit code.
int RunIoSweep(const SweepOptions& options, const std::string& out_dir);

}  // namespace strata::bench
