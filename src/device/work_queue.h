// Folder-private: WorkQueue, one FIFO of device work and the thread that runs it, for the
// fake device's copy and collective queues and the host-callback queue of every device.
// Each piece of work waits (on the host) for its `after` events, optionally poisons its
// destination, sleeps an injected delay, runs, is traced, and completes its event; a piece
// whose `after` failed fails with that error without running.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "src/device/compute_device.h"

namespace strata {

// For queues that trace nothing of their own (the host callbacks, the optimizer thread,
// whose work records its own spans).
inline Tracer* g_untraced = nullptr;

// One FIFO queue and the thread that runs it.
class WorkQueue {
 public:
  struct Work {
    EventList after;
    std::function<void()> poison;  // runs first, once `after` happened
    std::function<Status()> run;
    std::string label;
    uint64_t bytes = 0;
    std::shared_ptr<HostEventState> done;
  };

  WorkQueue(Track track, uint64_t seed, int max_delay_us, double gbps, Tracer** tracer)
      : track_(track), rng_(seed), max_delay_us_(max_delay_us), gbps_(gbps), tracer_(tracer),
        thread_([this] { Loop(); }) {}
  ~WorkQueue() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  Event Submit(Work w) {
    w.done = std::make_shared<HostEventState>();
    Event e(w.done);
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_ = e;
      queue_.push_back(std::move(w));
    }
    cv_.notify_all();
    return e;
  }
  Event last() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_;
  }
  Status first_error() {
    std::lock_guard<std::mutex> lock(mu_);
    return first_error_;
  }

 private:
  void Loop() {
    while (true) {
      Work w;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        w = std::move(queue_.front());
        queue_.pop_front();
      }
      Status s;
      for (const Event& e : w.after)
        if (Status a = e.Wait(); !a.ok() && s.ok()) s = a;
      const double t0 = *tracer_ ? (*tracer_)->Now() : 0;
      if (s.ok()) {
        if (w.poison) w.poison();
        std::this_thread::sleep_for(Delay(w.bytes));
        s = w.run();
      }
      if (*tracer_) (*tracer_)->Add(track_, w.label, t0, (*tracer_)->Now(), w.bytes);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        if (first_error_.ok()) first_error_ = s;
      }
      w.done->Set(s);
    }
  }

  std::chrono::microseconds Delay(uint64_t bytes) {
    double us = max_delay_us_ > 0 ? std::uniform_int_distribution<int>(0, max_delay_us_)(rng_) : 0;
    if (gbps_ > 0) us += static_cast<double>(bytes) / (gbps_ * 1e3);
    return std::chrono::microseconds(static_cast<int64_t>(us));
  }

  Track track_;
  std::mt19937_64 rng_;  // used by the queue thread only
  int max_delay_us_;
  double gbps_;
  Tracer** tracer_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Work> queue_;
  Event last_;
  Status first_error_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace strata
