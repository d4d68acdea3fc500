// DeviceEvent: a point in an asynchronous queue (a device's copy or collective queue, a host
// callback, the optimizer thread): it happens once the work before it has completed, and
// carries that work's Status. No LibTorch: the torch-free parts of the engine (the
// prefetcher) wait on these too.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "strata/status.h"

namespace strata {

// Shared by a queue (which completes it) and its waiters.
class EventState {
 public:
  virtual ~EventState() = default;
  virtual bool Ready() = 0;
  // Blocks the calling host thread until the work happened; its Status.
  virtual Status Wait() = 0;
};

// Completed by a host thread (the host and fake devices, host callbacks).
class HostEventState final : public EventState {
 public:
  bool Ready() override;
  Status Wait() override;
  void Set(Status status);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
};

// A point in a device queue. Cheap to copy; the default one has already happened (OK).
class DeviceEvent {
 public:
  DeviceEvent() = default;
  explicit DeviceEvent(std::shared_ptr<EventState> state) : state_(std::move(state)) {}
  static DeviceEvent Failed(Status status);
  bool Ready() const { return !state_ || state_->Ready(); }
  Status HostWait() const { return state_ ? state_->Wait() : Status(); }
  const std::shared_ptr<EventState>& state() const { return state_; }

 private:
  std::shared_ptr<EventState> state_;
};
using EventList = std::vector<DeviceEvent>;

}  // namespace strata
