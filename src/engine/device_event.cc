#include "src/engine/device_event.h"

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

DeviceEvent DeviceEvent::Failed(Status status) {
  auto s = std::make_shared<HostEventState>();
  s->Set(std::move(status));
  return DeviceEvent(std::move(s));
}

}  // namespace strata
