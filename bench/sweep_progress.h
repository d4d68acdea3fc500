// Progress of a long benchmark on stderr: "point i of N", what the last point measured, the
// time elapsed and an estimate of what is left (from the mean time per point so far, bounded
// by the budget when there is one). On a terminal one line is redrawn in place; otherwise (a
// log file, CI) each point gets its own line.
#pragma once

#include <string>

namespace strata::bench {

class SweepProgress {
 public:
  // `total`: points planned; `budget_s` > 0: the run stops starting points past it.
  SweepProgress(int total, double budget_s = 0);
  // Records one finished point and prints a line about it (`what`: its figures).
  void Done(const std::string& what);
  void Finish();  // ends the redrawn line
  void set_total(int total) { total_ = total; }
  int done() const { return done_; }
  double elapsed_s() const;
  double mean_point_s() const;  // 0 before the first point

 private:
  int total_, done_ = 0;
  double budget_s_, start_s_;
  bool tty_;
  bool drawn_ = false;
};

// "1:05" for 65 seconds.
std::string MinutesSeconds(double seconds);

}  // namespace strata::bench
