#include "src/cli/startup_progress.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace strata::cli {

StartupProgress::StartupProgress(bool enabled, std::string first_phase, double quiet_s, double every_s)
    : enabled_(enabled), quiet_s_(quiet_s), every_s_(every_s), phase_(std::move(first_phase)) {
  if (const char* q = std::getenv("STRATA_STARTUP_QUIET_S")) quiet_s_ = std::atof(q);
  if (enabled_) thread_ = std::thread([this] { Report(); });
}

StartupProgress::~StartupProgress() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StartupProgress::Phase(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  phase_ = what;
}

void StartupProgress::Report() {
  using namespace std::chrono;
  auto next = t0_ + duration_cast<steady_clock::duration>(duration<double>(quiet_s_));
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_until(lock, next, [&] { return stop_; })) {
    const double s = duration<double>(steady_clock::now() - t0_).count();
    std::printf("start-up: %s (%.0f s so far)\n", phase_.c_str(), s);
    std::fflush(stdout);
    next += duration_cast<steady_clock::duration>(duration<double>(every_s_));
  }
}

}  // namespace strata::cli
