#include "src/engine/prefetch.h"

#include <algorithm>

#include "strata/check.h"

namespace strata {

PrefetchScheduler::PrefetchScheduler(std::vector<int> plan, std::function<uint64_t(int)> bytes_of,
                                     uint64_t budget_bytes, PinnedPool* pool, IssueFn issue,
                                     std::function<bool()> reclaim, Tracer* tracer)
    : plan_(std::move(plan)), bytes_of_(std::move(bytes_of)), budget_(budget_bytes), pool_(pool),
      issue_(std::move(issue)), reclaim_(std::move(reclaim)), tracer_(tracer) {}

void PrefetchScheduler::IssueMore() {
  while (next_issue_ < plan_.size()) {
    const int g = plan_[next_issue_];
    const uint64_t bytes = bytes_of_(g);
    // See Note [Prefetch budget]: the next group to take is always allowed.
    if (!in_flight_.empty() && in_flight_bytes_ + bytes > budget_) return;
    std::optional<PinnedBuffer> buf = pool_->TryAcquire();
    while (!buf && in_flight_.empty() && reclaim_ && reclaim_()) buf = pool_->TryAcquire();
    if (!buf) {
      STRATA_CHECK(!in_flight_.empty()) << "prefetch: no pinned buffer free and none in flight (buffer_count too small)";
      return;
    }
    STRATA_CHECK(bytes <= buf->size()) << "group " << g << " needs " << bytes << " bytes, buffers have " << buf->size();
    Ticket t = issue_(g, {buf->data(), bytes});
    in_flight_.push_back({g, std::move(*buf), std::move(t), bytes});
    in_flight_bytes_ += bytes;
    high_water_ = std::max(high_water_, in_flight_bytes_);
    ++next_issue_;
  }
}

StatusOr<PinnedBuffer> PrefetchScheduler::Take(int group) {
  STRATA_CHECK(next_take_ < plan_.size() && plan_[next_take_] == group)
      << "prefetch plan expected group " << (next_take_ < plan_.size() ? plan_[next_take_] : -1) << ", got " << group;
  IssueMore();
  STRATA_CHECK(!in_flight_.empty() && in_flight_.front().group == group) << "prefetch lost group " << group;
  InFlight f = std::move(in_flight_.front());
  in_flight_.pop_front();
  Status s;
  if (!f.ticket.Done()) {
    Tracer::Span wait(tracer_, Track::kWait, "wait params g" + std::to_string(group));
    s = f.ticket.Wait();
  } else {
    s = f.ticket.Wait();
  }
  in_flight_bytes_ -= f.bytes;
  ++next_take_;
  IssueMore();
  if (!s.ok()) return s;
  return std::move(f.buffer);
}

void PrefetchScheduler::Drain() {
  for (auto& f : in_flight_) f.ticket.Wait().IgnoreError();
  in_flight_.clear();
  in_flight_bytes_ = 0;
}

}  // namespace strata
