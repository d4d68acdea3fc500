#include "src/engine/update/parked_writes.h"

#include <utility>

#include "strata/check.h"

namespace strata {

ParkedWrites::ParkedWrites(int blocks, int capacity, Publish publish)
    : capacity_(capacity), publish_(std::move(publish)), released_(blocks, 0), parked_(blocks) {
  STRATA_CHECK(capacity >= 1) << "a delayed update needs at least one parking buffer";
}

void ParkedWrites::Park(int b, PinnedBuffer buffer) {
  std::unique_lock<std::mutex> lock(mu_);
  STRATA_CHECK(!parked_.at(b)) << "block " << b << " parked twice in one update";
  parked_[b] = std::move(buffer);
  ++count_;
  if (released_[b]) to_publish_.push_back(b);
  PublishReleased(lock);
}

void ParkedWrites::WaitForRoom() {
  PublishUntil([this] { return count_ < capacity_; });
}

void ParkedWrites::Drain() {
  PublishUntil([this] { return count_ == 0; });
}

// Only a release can make `done` true: each one queues a block to publish.
void ParkedWrites::PublishUntil(const std::function<bool()>& done) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    PublishReleased(lock);
    if (done()) return;
    changed_.wait(lock, [&] { return !to_publish_.empty(); });
  }
}

void ParkedWrites::Release(int b) {
  std::lock_guard<std::mutex> lock(mu_);
  if (released_.at(b)) return;
  released_[b] = 1;
  if (parked_[b]) {
    to_publish_.push_back(b);
    changed_.notify_all();
  }
}

void ParkedWrites::ReleaseAll() {
  for (int b = 0; b < static_cast<int>(released_.size()); ++b) Release(b);
}

int ParkedWrites::parked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

// The writes start without the lock: the store may block for a buffer of its own.
void ParkedWrites::PublishReleased(std::unique_lock<std::mutex>& lock) {
  while (!to_publish_.empty()) {
    const int b = to_publish_.front();
    to_publish_.pop_front();
    PinnedBuffer buffer = std::move(*parked_[b]);
    parked_[b].reset();
    lock.unlock();
    publish_(b, std::move(buffer));
    lock.lock();
    --count_;
  }
}

}  // namespace strata
