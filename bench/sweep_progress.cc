#include "bench/sweep_progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "bench/bench_util.h"

namespace strata::bench {

std::string MinutesSeconds(double s) {
  const int t = static_cast<int>(std::max(0.0, s) + 0.5);
  return fmt::format("{}:{:02d}", t / 60, t % 60);
}

SweepProgress::SweepProgress(int total, double budget_s)
    : total_(total), budget_s_(budget_s), start_s_(NowSeconds()), tty_(isatty(STDERR_FILENO) == 1) {}

double SweepProgress::elapsed_s() const { return NowSeconds() - start_s_; }

double SweepProgress::mean_point_s() const { return done_ > 0 ? elapsed_s() / done_ : 0; }

void SweepProgress::Done(const std::string& what) {
  ++done_;
  const double elapsed = elapsed_s();
  double left = mean_point_s() * std::max(0, total_ - done_);
  if (budget_s_ > 0) left = std::min(left, std::max(0.0, budget_s_ - elapsed));
  const std::string line = fmt::format("[{:>3}/{}] {}  elapsed {}, ETA {}", done_, total_, what,
                                       MinutesSeconds(elapsed), MinutesSeconds(left));
  if (tty_) {
    std::fprintf(stderr, "\r%s\033[K", line.c_str());
    drawn_ = true;
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

void SweepProgress::Finish() {
  if (drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
}

}  // namespace strata::bench
