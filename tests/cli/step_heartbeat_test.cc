// StepHeartbeat (src/cli/step_heartbeat.h): silent in a short step; in a long one a line once
// it has run for the interval and then at most once per interval, with the passes done and the
// time the rest will take at the pace so far.
#include "src/cli/step_heartbeat.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace strata::cli {
namespace {

using std::chrono::seconds;

struct FakeClock {
  StepHeartbeat::Clock::time_point t{};
  StepHeartbeat::Clock::time_point operator()() const { return t; }
};

TEST(StepHeartbeat, SilentInAShortStepThenOneLinePerInterval) {
  FakeClock clock;
  std::vector<std::string> lines;
  StepHeartbeat hb(seconds(60), [&](const std::string& l) { lines.push_back(l); }, [&] { return clock(); });
  hb.BeginStep(3);
  for (size_t v = 0; v < 10; ++v) {  // a step of 10 passes in 50 s: nothing
    clock.t += seconds(5);
    hb.Visit(v, 10);
  }
  EXPECT_TRUE(lines.empty());

  hb.BeginStep(4);  // 10 passes of 30 s each
  for (size_t v = 0; v < 10; ++v) {
    hb.Visit(v, 10);
    clock.t += seconds(30);
  }
  // Reported at 60 s (2 done), 120 s (4 done), 180 s (6 done), 240 s (8 done).
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "step 4: 2 of 10 block passes done after 60 s; about 4.0 min to go for them (then the update)");
  EXPECT_EQ(lines[3], "step 4: 8 of 10 block passes done after 4.0 min; about 60 s to go for them (then the update)");
}

}  // namespace
}  // namespace strata::cli
