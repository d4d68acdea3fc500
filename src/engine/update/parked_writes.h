// ParkedWrites: the updated working weights of strata.optimizer_overlap "delayed", held in
// pinned buffers until the step running beside the update has read the old ones for the last
// time (Note [Delayed update], src/engine/update/delayed_update.cc). The optimizer thread parks each block's
// buffer and publishes it (writes it home) once the compute thread has released the block;
// the compute thread only flags, so the write's checksums and submission stay off it. At
// most `capacity` buffers are parked at once: the update gets no further ahead of the
// compute than the pinned memory planned for it. No LibTorch.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "strata/pinned_pool.h"

namespace strata {

class ParkedWrites {
 public:
  using Publish = std::function<void(int block, PinnedBuffer buffer)>;
  ParkedWrites(int blocks, int capacity, Publish publish);
  ParkedWrites(const ParkedWrites&) = delete;
  ParkedWrites& operator=(const ParkedWrites&) = delete;

  // Optimizer thread. Park: block b's new weights (published at once when b is released
  // already). WaitForRoom: before taking a buffer for the next block, publishes what was
  // released until fewer than `capacity` are parked. Drain: at the end of the update,
  // publishes every parked block as it is released.
  void Park(int b, PinnedBuffer buffer);
  void WaitForRoom();
  void Drain();
  // Compute thread: nothing reads block b's old weights any more (ReleaseAll: any block's).
  void Release(int b);
  void ReleaseAll();
  int parked() const;

 private:
  // Publishes the released blocks' buffers, the lock dropped meanwhile.
  void PublishReleased(std::unique_lock<std::mutex>& lock);
  // Publishes what is released until `done` (called under the lock) holds.
  void PublishUntil(const std::function<bool()>& done);
  mutable std::mutex mu_;
  std::condition_variable changed_;
  const int capacity_;
  Publish publish_;
  std::vector<char> released_;
  std::vector<std::optional<PinnedBuffer>> parked_;
  std::deque<int> to_publish_;  // parked and released, in release order
  int count_ = 0;               // parked, published or not yet
};

}  // namespace strata
