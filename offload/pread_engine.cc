// The fallback engine: synchronous pread/pwrite at Submit, completions queued for Reap.
// Used where io_uring is refused (old kernels, seccomp) and with files on tmpfs.
#include <unistd.h>

#include <algorithm>
#include <deque>

#include "strata/io_engine.h"

namespace strata {
namespace {

class PreadEngine final : public IoEngine {
 public:
  explicit PreadEngine(unsigned qd) : qd_(qd) {}
  const char* name() const override { return "pread"; }
  unsigned queue_depth() const override { return qd_; }
  Status RegisterFiles(std::span<const int> fds) override {
    fds_.assign(fds.begin(), fds.end());
    return Status();
  }
  Status RegisterBuffers(std::span<const std::span<std::byte>>) override { return Status(); }

  Status Submit(std::span<const IoRequest> reqs) override {
    for (const IoRequest& r : reqs) {
      ssize_t n;
      do {
        n = r.op == IoOp::kRead ? pread(fds_.at(r.file), r.buf, r.len, static_cast<off_t>(r.offset))
                                : pwrite(fds_.at(r.file), r.buf, r.len, static_cast<off_t>(r.offset));
      } while (n < 0 && errno == EINTR);
      done_.push_back({r.tag, n < 0 ? -static_cast<int64_t>(errno) : static_cast<int64_t>(n)});
    }
    return Status();
  }

  Status Reap(unsigned min_complete, std::vector<IoCompletion>* out) override {
    if (done_.size() < min_complete) return Status(StatusCode::kInternal, "pread engine: reap of more than was submitted");
    while (!done_.empty()) {
      out->push_back(done_.front());
      done_.pop_front();
    }
    return Status();
  }

 private:
  unsigned qd_;
  std::vector<int> fds_;
  std::deque<IoCompletion> done_;
};

}  // namespace

std::unique_ptr<IoEngine> MakePreadEngine(unsigned queue_depth) {
  return std::make_unique<PreadEngine>(std::max(1u, queue_depth));
}

}  // namespace strata
