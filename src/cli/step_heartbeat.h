// Progress within a training step. At long sequences on a CPU one step lasts tens of minutes
// (32K tokens of a 1 B model: about 20), and the step lines alone leave the run silent that
// long: once a step has run for `every`, and every `every` after, one line says how many of
// its block passes are done and, at their pace so far, how long the rest will take.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace strata::cli {

class StepHeartbeat {
 public:
  using Clock = std::chrono::steady_clock;
  StepHeartbeat(Clock::duration every, std::function<void(const std::string&)> print,
                std::function<Clock::time_point()> now = Clock::now);
  void BeginStep(int64_t step);
  // A block pass is starting: `done` of the step's `total` have finished.
  void Visit(size_t done, size_t total);

 private:
  Clock::duration every_;
  std::function<void(const std::string&)> print_;
  std::function<Clock::time_point()> now_;
  int64_t step_ = 0;
  Clock::time_point began_{}, next_{};
};

}  // namespace strata::cli
