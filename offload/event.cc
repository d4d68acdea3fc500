#include "strata/event.h"

#include "strata/check.h"

namespace strata {

bool HostEventState::Ready() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

Status HostEventState::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  return status_;
}

void HostEventState::Set(Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = std::move(status);
    done_ = true;
  }
  cv_.notify_all();
}

void PartsEventState::AddParts(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_ += n;
}

void PartsEventState::CompletePart(const Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  STRATA_CHECK(pending_ > 0) << "an event completed more often than it has parts";
  if (!status.ok() && status_.ok()) status_ = status;
  if (--pending_ == 0) cv_.notify_all();
}

Status PartsEventState::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return pending_ == 0; });
  return status_;
}

bool PartsEventState::Ready() {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_ == 0;
}

namespace {
class AllOfState final : public EventState {
 public:
  explicit AllOfState(EventList events) : events_(std::move(events)) {}
  bool Ready() override {
    for (const Event& e : events_)
      if (!e.Ready()) return false;
    return true;
  }
  Status Wait() override {
    Status first;
    for (const Event& e : events_)
      if (Status s = e.Wait(); !s.ok() && first.ok()) first = s;
    return first;
  }

 private:
  EventList events_;
};
}  // namespace

Event AllOf(EventList events) {
  if (events.size() == 1) return events[0];
  return Event(std::make_shared<AllOfState>(std::move(events)));
}

Event Event::Failed(Status status) {
  auto s = std::make_shared<HostEventState>();
  s->Set(std::move(status));
  return Event(std::move(s));
}

}  // namespace strata
