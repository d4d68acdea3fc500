#include "io_pump.h"

#include <cstring>

#include "strata/check.h"
#include "strata/log.h"

namespace strata {

struct IoPump::Active {
  IoJob job;
  uint64_t next = 0;    // next byte of the job to issue
  int outstanding = 0;  // requests in flight
  Status status;
};

struct IoPump::Slot {
  Active* job = nullptr;
  uint64_t job_offset = 0;    // where this piece starts within the job
  uint32_t len = 0;           // caller bytes covered
  uint32_t io_len = 0;        // bytes transferred (len rounded up to kAlign when staged)
  uint32_t done = 0;          // bytes of io_len already transferred
  std::byte* io_buf = nullptr;
  std::byte* staging = nullptr;
  IoRequest Request(int tag) const {
    return IoRequest{job->job.op, 0, io_buf + done, io_len - done, job->job.file_offset + job_offset + done,
                     static_cast<uint64_t>(tag)};
  }
};

IoPump::IoPump(std::unique_ptr<IoEngine> engine, std::string file_path, uint32_t block_size, std::byte* staging,
               size_t staging_count)
    : engine_(std::move(engine)), file_path_(std::move(file_path)), block_(block_size), qd_(engine_->queue_depth()) {
  STRATA_CHECK(block_ % kAlign == 0 && block_ > 0) << "block size " << block_;
  for (size_t i = 0; i < staging_count; ++i) free_staging_.push_back(staging + i * block_);
  for (unsigned i = 0; i < qd_; ++i) {
    slots_.push_back(std::make_unique<Slot>());
    free_slots_.push_back(static_cast<int>(qd_ - 1 - i));
  }
  thread_ = std::thread([this] { Run(); });
}

IoPump::~IoPump() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void IoPump::Enqueue(IoJob job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
}

Status IoPump::RunOnPumpThread(std::function<Status(IoEngine&)> f) {
  Control c{std::move(f), Status(), false};
  std::unique_lock<std::mutex> lock(mu_);
  controls_.push_back(&c);
  cv_.notify_one();
  control_done_.wait(lock, [&] { return c.done; });
  return c.result;
}

NvmeTierStats IoPump::stats() const {
  return {bytes_written_.load(), bytes_read_.load(), requests_.load(), resubmissions_.load(), staged_.load()};
}

// Issues the next piece of the oldest job with work left. False when nothing can be issued
// now (no work, no free slot, or the piece needs a staging buffer and none is free).
bool IoPump::IssueOne(std::vector<IoRequest>* batch) {
  if (free_slots_.empty()) return false;
  for (auto& a : active_) {
    if (a->next >= a->job.bytes) continue;
    const uint64_t len = std::min<uint64_t>(block_, a->job.bytes - a->next);
    std::byte* user = a->job.user + a->next;
    const bool direct = reinterpret_cast<uintptr_t>(user) % kAlign == 0 && len % kAlign == 0;
    std::byte* staging = nullptr;
    if (!direct) {
      if (free_staging_.empty()) return false;  // wait for a staging buffer to come back
      staging = free_staging_.back();
      free_staging_.pop_back();
      staged_++;
    }
    const int tag = free_slots_.back();
    free_slots_.pop_back();
    Slot& s = *slots_[tag];
    s = Slot{a.get(), a->next, static_cast<uint32_t>(len), 0, 0, direct ? user : staging, staging};
    s.io_len = direct ? static_cast<uint32_t>(len) : static_cast<uint32_t>((len + kAlign - 1) / kAlign * kAlign);
    if (staging && a->job.op == IoOp::kWrite) {
      std::memcpy(staging, user, len);
      std::memset(staging + len, 0, s.io_len - len);  // the tail pad of the extent
    }
    a->next += len;
    a->outstanding++;
    in_flight_++;
    requests_++;
    batch->push_back(s.Request(tag));
    return true;
  }
  return false;
}

void IoPump::Complete(const IoCompletion& c, std::vector<IoRequest>* batch) {
  Slot& s = *slots_[c.tag];
  Active* a = s.job;
  const uint32_t want = s.io_len - s.done;
  const char* verb = a->job.op == IoOp::kRead ? "read" : "write";
  Status error;
  if (c.result == -EAGAIN || c.result == -EINTR) {
    resubmissions_++;
    batch->push_back(s.Request(static_cast<int>(c.tag)));  // the slot stays in flight
    return;
  } else if (c.result < 0) {
    error = ErrnoError(static_cast<int>(-c.result), "{} of {} failed: swap file '{}' offset {} ({} bytes)", verb,
                       a->job.what, file_path_, a->job.file_offset + s.job_offset + s.done, want);
  } else if (c.result == 0) {
    error = Error(StatusCode::kDataLoss, "{} of {} hit the end of swap file '{}' at offset {}: the file was "
                  "truncated behind the store's back", verb, a->job.what, file_path_,
                  a->job.file_offset + s.job_offset + s.done);
  } else if (static_cast<uint32_t>(c.result) < want) {
    s.done += static_cast<uint32_t>(c.result);  // short transfer: resubmit the rest
    resubmissions_++;
    batch->push_back(s.Request(static_cast<int>(c.tag)));
    return;
  }
  if (error.ok()) {
    if (s.staging && a->job.op == IoOp::kRead) std::memcpy(a->job.user + s.job_offset, s.staging, s.len);
    (a->job.op == IoOp::kRead ? bytes_read_ : bytes_written_) += s.len;
    if (a->job.on_piece && a->job.op == IoOp::kRead) a->job.on_piece(s.job_offset, s.len);
  } else if (a->status.ok()) {
    a->status = error;
    a->next = a->job.bytes;  // issue nothing more of a failed job
  }
  if (s.staging) free_staging_.push_back(s.staging);
  s = Slot{};
  free_slots_.push_back(static_cast<int>(c.tag));
  in_flight_--;
  a->outstanding--;
}

// A submission the engine refuses as a whole fails the requests in it (as EIO), so their
// jobs report an error instead of waiting forever.
void IoPump::SubmitOrFail(std::vector<IoRequest>* batch) {
  while (!batch->empty()) {
    Status s = engine_->Submit(*batch);
    if (s.ok()) return;
    LogError("I/O engine {} refused a submission: {}", engine_->name(), s.message());
    std::vector<IoRequest> failed;
    failed.swap(*batch);
    for (const IoRequest& r : failed) Complete(IoCompletion{r.tag, -EIO}, batch);
  }
}

void IoPump::Run() {
  std::vector<IoRequest> batch;
  std::vector<IoCompletion> done;
  Status attached = engine_->AttachDrivingThread();
  STRATA_CHECK(attached.ok()) << "I/O engine " << engine_->name() << ": " << attached.ToString();
  while (true) {
    bool control_pending = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (queue_.empty() && active_.empty() && controls_.empty()) {
        if (stop_) return;
        cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !controls_.empty(); });
      }
      // Controls run with nothing in flight; until then no new request is issued.
      while (!controls_.empty() && in_flight_ == 0) {
        Control* c = controls_.front();
        controls_.pop_front();
        c->result = c->f(*engine_);
        c->done = true;
        control_done_.notify_all();
      }
      control_pending = !controls_.empty();
      while (!queue_.empty()) {
        auto a = std::make_unique<Active>();
        a->job = std::move(queue_.front());
        queue_.pop_front();
        active_.push_back(std::move(a));
      }
    }
    // Zero-byte jobs finish at once.
    for (auto it = active_.begin(); it != active_.end();) {
      if ((*it)->job.bytes == 0) {
        (*it)->job.on_done(Status());
        it = active_.erase(it);
      } else {
        ++it;
      }
    }
    batch.clear();
    while (!control_pending && in_flight_ < qd_ && IssueOne(&batch)) {
    }
    SubmitOrFail(&batch);
    if (in_flight_ == 0) continue;
    done.clear();
    Status s = engine_->Reap(1, &done);
    STRATA_CHECK(s.ok()) << "I/O engine failed: " << s.ToString();
    batch.clear();
    for (const IoCompletion& c : done) Complete(c, &batch);
    SubmitOrFail(&batch);
    for (auto it = active_.begin(); it != active_.end();) {
      Active* a = it->get();
      if (a->next >= a->job.bytes && a->outstanding == 0) {
        a->job.on_done(a->status);
        it = active_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

}  // namespace strata
