// io_uring engine. Discipline from liburing's examples: check every cqe->res, never
// assume a full transfer, bound what is in flight (the tier does), submit in batches.
#include <liburing.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "strata/check.h"
#include "strata/io_engine.h"
#include "strata/log.h"

namespace strata {
namespace {

class UringEngine final : public IoEngine {
 public:
  explicit UringEngine(unsigned qd) : qd_(qd) {}
  ~UringEngine() override {
    if (ready_) io_uring_queue_exit(&ring_);
  }

  // One thread (the I/O pump) drives the ring, so it is set up for a single issuer with
  // completion work deferred to that thread's own io_uring_enter: no task-work interrupts
  // per completion (the setting fio uses). Created disabled; the pump enables it, becoming
  // the issuer. Kernels older than 6.1 refuse these flags: then a plain ring.
  Status Init() {
    io_uring_params p{};
    p.flags = IORING_SETUP_R_DISABLED | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
              IORING_SETUP_COOP_TASKRUN;
    int rc = io_uring_queue_init_params(qd_, &ring_, &p);
    if (rc == 0) {
      disabled_ = true;
    } else {
      rc = io_uring_queue_init(qd_, &ring_, 0);
      if (rc < 0)
        return ErrnoError(-rc, "io_uring_queue_init(queue_depth={}) failed", qd_).WithContext("io_uring unavailable");
    }
    ready_ = true;
    return Status();
  }

  Status AttachDrivingThread() override {
    if (!disabled_) return Status();
    // liburing 2.3 (Debian bookworm) declares io_uring_enable_rings but does not export it.
    const long rc = syscall(__NR_io_uring_register, ring_.ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0);
    if (rc < 0) return ErrnoError(errno, "enabling the io_uring ring failed");
    disabled_ = false;
    return Status();
  }

  const char* name() const override { return "io_uring"; }
  unsigned queue_depth() const override { return qd_; }

  Status RegisterFiles(std::span<const int> fds) override {
    if (files_registered_) io_uring_unregister_files(&ring_);
    files_registered_ = false;
    fds_.assign(fds.begin(), fds.end());
    int rc = io_uring_register_files(&ring_, fds.data(), static_cast<unsigned>(fds.size()));
    if (rc == 0) files_registered_ = true;  // else: plain fds, still correct
    else LogOnce(LogLevel::kInfo, fmt::format("io_uring: file registration refused ({}); using plain descriptors", strerror(-rc)));
    return Status();
  }

  Status RegisterBuffers(std::span<const std::span<std::byte>> regions) override {
    if (!regions_.empty()) io_uring_unregister_buffers(&ring_);
    regions_.clear();
    std::vector<iovec> iov;
    for (auto r : regions) {
      // The kernel caps one registered buffer at 1 GiB; larger regions are left unregistered.
      if (r.size() == 0 || r.size() > (1ull << 30)) continue;
      iov.push_back({r.data(), r.size()});
    }
    if (iov.empty()) return Status();
    const int rc = io_uring_register_buffers(&ring_, iov.data(), static_cast<unsigned>(iov.size()));
    if (rc == 0) {
      for (auto& v : iov) regions_.push_back({static_cast<std::byte*>(v.iov_base), v.iov_len});
    } else {
      LogOnce(LogLevel::kInfo, fmt::format("io_uring: buffer registration refused ({}); I/O still works, with a "
                                           "page pinning per request", strerror(-rc)));
    }
    return Status();  // best effort: unregistered memory still works
  }

  Status Submit(std::span<const IoRequest> reqs) override {
    for (const IoRequest& r : reqs) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      STRATA_CHECK(sqe) << "submission queue full: caller exceeded queue_depth " << qd_;
      const int fd = files_registered_ ? r.file : fds_.at(r.file);
      const int buf_index = RegionOf(r.buf, r.len);
      if (r.op == IoOp::kRead) {
        if (buf_index >= 0) io_uring_prep_read_fixed(sqe, fd, r.buf, r.len, r.offset, buf_index);
        else io_uring_prep_read(sqe, fd, r.buf, r.len, r.offset);
      } else {
        if (buf_index >= 0) io_uring_prep_write_fixed(sqe, fd, r.buf, r.len, r.offset, buf_index);
        else io_uring_prep_write(sqe, fd, r.buf, r.len, r.offset);
      }
      if (files_registered_) sqe->flags |= IOSQE_FIXED_FILE;
      io_uring_sqe_set_data64(sqe, r.tag);
    }
    int pending = static_cast<int>(reqs.size());
    while (pending > 0) {
      int rc = io_uring_submit(&ring_);
      if (rc == -EINTR || rc == -EAGAIN) continue;
      if (rc < 0) return ErrnoError(-rc, "io_uring_submit failed");
      pending -= rc;
    }
    return Status();
  }

  Status Reap(unsigned min_complete, std::vector<IoCompletion>* out) override {
    unsigned got = 0;
    while (true) {
      io_uring_cqe* cqe = nullptr;
      unsigned head, n = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        out->push_back({io_uring_cqe_get_data64(cqe), cqe->res});
        ++n;
      }
      io_uring_cq_advance(&ring_, n);
      got += n;
      if (got >= min_complete) return Status();
      int rc = io_uring_wait_cqe(&ring_, &cqe);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN) return ErrnoError(-rc, "io_uring_wait_cqe failed");
    }
  }

 private:
  int RegionOf(const std::byte* p, size_t len) const {
    for (size_t i = 0; i < regions_.size(); ++i) {
      const auto& r = regions_[i];
      if (p >= r.data() && p + len <= r.data() + r.size()) return static_cast<int>(i);
    }
    return -1;
  }

  unsigned qd_;
  io_uring ring_{};
  bool ready_ = false;
  bool disabled_ = false;
  bool files_registered_ = false;
  std::vector<int> fds_;
  std::vector<std::span<std::byte>> regions_;
};

}  // namespace

StatusOr<std::unique_ptr<IoEngine>> MakeUringEngine(unsigned queue_depth) {
  auto engine = std::make_unique<UringEngine>(std::max(1u, queue_depth));
  Status s = engine->Init();
  if (!s.ok()) return Status(StatusCode::kUnavailable, s.message());
  return std::unique_ptr<IoEngine>(std::move(engine));
}

}  // namespace strata
