// Event: the one completion type of Strata's asynchronous work, the store's I/O and the
// compute device's queues alike. An Event is a point in some queue (a tensor's read or
// write in the store, a device's copy, collective or compute, a host callback, the
// optimizer thread): it happens once the work before it has completed, and carries that
// work's Status.
//
// Semantics (cf. c10d's Work::wait): Wait() blocks the calling thread until the work has
// completed or failed, then returns its Status: OK, or the first error (for the store: with
// the tensor's name, the file, the offset and the errno). Wait() may be called more than once
// and from any thread; it returns the same Status each time. Memory passed to the work must
// stay valid and untouched until Wait() has returned (a read's destination holds valid data
// only if Wait() returned OK). Dropping an Event does not cancel the work. The default Event
// has already happened (OK). Cheap to copy.
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

// Completed once, by a host thread (the host and fake devices, host callbacks, the optimizer).
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

// Completed part by part (the store's operations, one part per block of I/O); the first
// error wins.
class PartsEventState final : public EventState {
 public:
  explicit PartsEventState(int pending_parts = 1) : pending_(pending_parts) {}
  // Adds parts still to complete (called by the issuer before any of them can complete).
  void AddParts(int n);
  // Marks one part done; the first non-OK status wins. Wakes waiters when all are done.
  void CompletePart(const Status& status);
  bool Ready() override;
  Status Wait() override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int pending_;
  Status status_;
};

class [[nodiscard]] Event {
 public:
  Event() = default;  // already happened, OK
  explicit Event(std::shared_ptr<EventState> state) : state_(std::move(state)) {}
  // An event that has happened with `status`.
  static Event Failed(Status status);

  // True once Wait() would not block.
  bool Ready() const { return !state_ || state_->Ready(); }
  [[nodiscard]] Status Wait() const { return state_ ? state_->Wait() : Status(); }
  const std::shared_ptr<EventState>& state() const { return state_; }

 private:
  std::shared_ptr<EventState> state_;
};
using EventList = std::vector<Event>;

// Happens once every one of `events` has; carries the first error among them (in order).
Event AllOf(EventList events);

}  // namespace strata
