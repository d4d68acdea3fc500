// Folder-private. HashWorkers: a few threads that run small tasks in order of posting, for
// verifying a read's pieces while the rest of it is still on the wire (Note [Verifying reads]
// in nvme_tier.cc). The destructor runs every posted task before it returns.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

class HashWorkers {
 public:
  explicit HashWorkers(unsigned threads);
  ~HashWorkers();
  HashWorkers(const HashWorkers&) = delete;
  HashWorkers& operator=(const HashWorkers&) = delete;

  void Post(std::function<void()> task);

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace strata
