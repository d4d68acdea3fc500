#include "src/engine/prefetch.h"

#include <algorithm>

#include "strata/check.h"

namespace strata {

PrefetchScheduler::PrefetchScheduler(std::vector<Item> plan, TieredStore* store, PinnedPool* pool,
                                     uint64_t budget_bytes, Tracer* tracer)
    : plan_(std::move(plan)), store_(store), pool_(pool), budget_(budget_bytes), tracer_(tracer) {}

void PrefetchScheduler::IssueMore() {
  while (next_issue_ < plan_.size()) {
    const Item& item = plan_[next_issue_];
    if (!item.ready.Ready()) return;  // Take() waits for it
    const uint64_t bytes = store_->bytes(item.tensor);  // the buffer's; a read of parts moves less
    // See Note [Prefetch budget]: the next block to take is always allowed.
    if (!in_flight_.empty() && in_flight_bytes_ + bytes > budget_) return;
    std::optional<PinnedBuffer> buf = pool_->TryAcquire();
    if (!buf && !in_flight_.empty()) return;  // one comes back with the next Take
    if (!buf) buf = store_->AcquireBuffer(*pool_);  // the oldest write-back gives one back
    if (!buf) {
      // Held by copies to the device still reading them (they return when their copy has
      // finished), or by nothing that will ever return them: a bug, not a slow disk.
      Tracer::Span wait(tracer_, Track::kWait, "wait pinned buffer");
      buf = pool_->AcquireFor(std::chrono::minutes(5));
      STRATA_CHECK(buf) << "prefetch: no pinned buffer came back in 5 minutes (offload_param.buffer_count "
                        << pool_->buffer_count() << " too small for what is held?)";
    }
    STRATA_CHECK(bytes <= buf->size()) << "block " << item.block << " needs " << bytes << " bytes, buffers have "
                                       << buf->size();
    Event t = store_->ReadParts(item.tensor, {buf->data(), bytes}, item.parts);
    in_flight_.push_back({item.block, std::move(*buf), std::move(t), bytes});
    in_flight_bytes_ += bytes;
    high_water_ = std::max(high_water_, in_flight_bytes_);
    ++next_issue_;
  }
}

StatusOr<PinnedBuffer> PrefetchScheduler::Take(int block) {
  STRATA_CHECK(next_take_ < plan_.size() && plan_[next_take_].block == block)
      << "prefetch plan expected block " << (next_take_ < plan_.size() ? plan_[next_take_].block : -1) << ", got "
      << block;
  IssueMore();
  if (in_flight_.empty()) {  // its block's update is not done yet
    Tracer::Span wait(tracer_, Track::kOptimizerWait, "wait optimizer (read) b" + std::to_string(block));
    STRATA_RETURN_IF_ERROR(plan_[next_take_].ready.Wait());
    IssueMore();
  }
  STRATA_CHECK(!in_flight_.empty() && in_flight_.front().block == block) << "prefetch lost block " << block;
  InFlight f = std::move(in_flight_.front());
  in_flight_.pop_front();
  Status s;
  if (!f.event.Ready()) {
    Tracer::Span wait(tracer_, Track::kWait, "wait params g" + std::to_string(block));
    s = f.event.Wait();
  } else {
    s = f.event.Wait();
  }
  in_flight_bytes_ -= f.bytes;
  ++next_take_;
  IssueMore();
  if (!s.ok()) return s;
  return std::move(f.buffer);
}

void PrefetchScheduler::Drain() {
  for (auto& f : in_flight_) f.event.Wait().IgnoreError();
  in_flight_.clear();
  in_flight_bytes_ = 0;
}

}  // namespace strata
