// Start-up that takes a while (pinning host memory, writing a large model's initial states
// to NVMe, reading a checkpoint) says what it is doing: after `quiet_s` seconds of silence,
// one line every `every_s` seconds with the current phase and the time so far.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace strata::cli {

class StartupProgress {
 public:
  // Nothing is printed when !enabled (ranks other than the lead). The first phase is given
  // here, not by a Phase() call after it: the reporting thread may already print at once.
  // The environment variable STRATA_STARTUP_QUIET_S overrides quiet_s (tests).
  StartupProgress(bool enabled, std::string first_phase, double quiet_s = 3, double every_s = 5);
  ~StartupProgress();  // stops the reporting thread
  void Phase(const std::string& what);

 private:
  void Report();
  const bool enabled_;
  double quiet_s_, every_s_;
  const std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  std::mutex mu_;
  std::condition_variable cv_;
  std::string phase_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace strata::cli
