#include "strata/ticket.h"

#include "strata/check.h"

namespace strata {

void TicketState::AddParts(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_ += n;
}

void TicketState::CompletePart(const Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  STRATA_CHECK(pending_ > 0) << "ticket completed more often than it has parts";
  if (!status.ok() && status_.ok()) status_ = status;
  if (--pending_ == 0) cv_.notify_all();
}

Status TicketState::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return pending_ == 0; });
  return status_;
}

bool TicketState::Done() {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_ == 0;
}

Ticket Ticket::Failed(Status status) {
  auto state = std::make_shared<TicketState>(1);
  state->CompletePart(status);
  return Ticket(std::move(state));
}

}  // namespace strata
