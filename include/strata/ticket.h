// Ticket: the handle of one asynchronous store operation (a tensor's write or read).
//
// Semantics (cf. c10d's Work::wait): Wait() blocks the calling thread until every block
// of the operation has completed or failed, then returns the operation's Status: OK, or the
// first error with the tensor's name, the file, the offset and the errno. Wait() may be
// called more than once and from any thread; it returns the same Status each time. The
// memory passed to the operation must stay valid and untouched until Wait() has returned
// (for reads, the destination holds valid data only if Wait() returned OK). Destroying a
// Ticket without waiting does not cancel the operation; the store finishes it.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "strata/status.h"

namespace strata {

// Shared by the issuer (the I/O thread) and the waiter. Internal to the store.
class TicketState {
 public:
  explicit TicketState(int pending_parts = 1) : pending_(pending_parts) {}
  // Adds parts still to complete (called by the issuer before any of them can complete).
  void AddParts(int n);
  // Marks one part done; the first non-OK status wins. Wakes waiters when all are done.
  void CompletePart(const Status& status);
  Status Wait();
  bool Done();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int pending_;
  Status status_;
};

class [[nodiscard]] Ticket {
 public:
  Ticket() = default;  // an already completed, OK ticket
  explicit Ticket(std::shared_ptr<TicketState> state) : state_(std::move(state)) {}
  static Ticket Failed(Status status);

  [[nodiscard]] Status Wait() const { return state_ ? state_->Wait() : Status(); }
  // True once Wait() would not block.
  bool Done() const { return !state_ || state_->Done(); }

 private:
  std::shared_ptr<TicketState> state_;
};

}  // namespace strata
