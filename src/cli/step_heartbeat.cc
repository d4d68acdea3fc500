#include "src/cli/step_heartbeat.h"

#include <fmt/format.h>

namespace strata::cli {
namespace {
std::string Minutes(double s) { return s < 90 ? fmt::format("{:.0f} s", s) : fmt::format("{:.1f} min", s / 60); }
}  // namespace

StepHeartbeat::StepHeartbeat(Clock::duration every, std::function<void(const std::string&)> print,
                             std::function<Clock::time_point()> now)
    : every_(every), print_(std::move(print)), now_(std::move(now)) {}

void StepHeartbeat::BeginStep(int64_t step) {
  step_ = step;
  began_ = now_();
  next_ = began_ + every_;
}

void StepHeartbeat::Visit(size_t done, size_t total) {
  const Clock::time_point t = now_();
  if (t < next_ || done == 0 || total == 0) return;
  next_ = t + every_;
  const double elapsed = std::chrono::duration<double>(t - began_).count();
  const double rest = elapsed / static_cast<double>(done) * static_cast<double>(total - done);
  print_(fmt::format("step {}: {} of {} block passes done after {}; about {} to go for them (then the update)", step_,
                     done, total, Minutes(elapsed), Minutes(rest)));
}

}  // namespace strata::cli
