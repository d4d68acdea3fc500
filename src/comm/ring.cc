#include "src/comm/ring.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "strata/check.h"

namespace strata::comm {
namespace {

constexpr uint32_t kMagic = 0x5354524Au;  // "STRJ": a Strata ring link, not a stray client

struct Hello {
  uint32_t magic;
  int32_t rank;
  int32_t world_size;
};

bool IsPeerGone(int err) { return err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == ETIMEDOUT; }

// Whether the peer of `fd` has closed it (end of stream or reset), without consuming data.
bool IsClosed(int fd) {
  char byte;
  ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && IsPeerGone(errno));
}

}  // namespace

RingLinks::RingLinks(int rank, int world_size, FileDescriptor prev, FileDescriptor next,
                     std::chrono::milliseconds timeout)
    : rank_(rank), world_size_(world_size), prev_(std::move(prev)), next_(std::move(next)), timeout_(timeout) {}

// When both neighbours are gone, which went first cannot be told from here (one may have
// exited because of the other's death), so the message names both.
Status RingLinks::PeerClosed(int peer, const char* op) const {
  const bool is_prev = peer == prev_rank();
  const int other = is_prev ? next_rank() : prev_rank();
  if (world_size_ > 2 && IsClosed(is_prev ? next_.get() : prev_.get())) {
    return Error(StatusCode::kUnavailable, "{}: rank {} closed the connection (peer died?); the link with rank {} is closed too",
                 op, peer, other);
  }
  return Error(StatusCode::kUnavailable, "{}: rank {} closed the connection (peer died?)", op, peer);
}

// Note [Telling a dead neighbour from a finished one]
// The next rank never sends on its link, so that link turns readable only when the next
// rank closes it. A reset (POLLERR/POLLHUP) means it closed with our bytes unread: it died.
// A clean end of stream is a death only while this step still owes it bytes; once it has
// them all it may legitimately finish the collective and exit before we do.
// A rank that fails does not close its links itself (its process exiting does), so the
// neighbours of a dead rank see that rank's own close and name it, not a bystander's.
Status RingLinks::CheckNext(short revents, bool owes_bytes, const char* op) {
  if (revents & (POLLERR | POLLHUP)) return PeerClosed(next_rank(), op);
  if (!(revents & POLLIN)) return Status::Ok();
  char byte;
  ssize_t n = recv(next_.get(), &byte, 1, MSG_DONTWAIT);
  if (n > 0) return Error(StatusCode::kInternal, "{}: rank {} sent unexpected data on the ring", op, next_rank());
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return Status::Ok();
  if (n < 0 && !IsPeerGone(errno)) return ErrnoError(errno, "{}: link to rank {}", op, next_rank());
  if (n < 0 || owes_bytes) return PeerClosed(next_rank(), op);
  next_closed_ = true;  // finished and gone; stop polling for it (the next send fails)
  return Status::Ok();
}

Status RingLinks::Run(const RingStep& step, const char* op) {
  STRATA_CHECK(!step.forward || step.send == step.recv) << "forwarding sends the receive buffer";
  if (next_closed_ && step.send_bytes > 0) return PeerClosed(next_rank(), op);
  size_t sent = 0, received = 0;
  auto deadline = Clock::now() + timeout_;
  while (sent < step.send_bytes || received < step.recv_bytes) {
    const size_t send_limit = step.forward ? received : step.send_bytes;
    const short next_events = static_cast<short>((next_closed_ ? 0 : POLLIN) | (sent < send_limit ? POLLOUT : 0));
    pollfd fds[2] = {
        {prev_.get(), static_cast<short>(received < step.recv_bytes ? POLLIN : 0), 0},
        {next_.get(), next_events, 0},
    };
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    int n = poll(fds, 2, static_cast<int>(std::max<int64_t>(left, 0)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(errno, "{}: poll", op);
    if (n == 0) {
      const bool waiting_for_prev = received < step.recv_bytes;
      return Error(StatusCode::kUnavailable, "{}: timed out after {} ms waiting {} rank {}", op, timeout_.count(),
                   waiting_for_prev ? "for data from" : "to send to", waiting_for_prev ? prev_rank() : next_rank());
    }
    STRATA_RETURN_IF_ERROR(CheckNext(fds[1].revents, sent < step.send_bytes, op));
    bool progress = false;
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t k = recv(prev_.get(), step.recv + received, step.recv_bytes - received, MSG_DONTWAIT);
      if (k == 0 || (k < 0 && IsPeerGone(errno))) return PeerClosed(prev_rank(), op);
      if (k > 0) {
        received += static_cast<size_t>(k);
        progress = true;
        if (step.on_recv) step.on_recv(received);
      } else if (errno != EAGAIN && errno != EINTR) {
        return ErrnoError(errno, "{}: receive from rank {}", op, prev_rank());
      }
    }
    if (fds[1].revents & POLLOUT) {
      ssize_t k = send(next_.get(), step.send + sent, send_limit - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) {
        sent += static_cast<size_t>(k);
        progress = true;
      } else if (k < 0 && IsPeerGone(errno)) {
        return PeerClosed(next_rank(), op);
      } else if (k < 0 && errno != EAGAIN && errno != EINTR) {
        return ErrnoError(errno, "{}: send to rank {}", op, next_rank());
      }
    }
    if (progress) deadline = Clock::now() + timeout_;
  }
  return Status::Ok();
}

StatusOr<RingLinks> ConnectRing(int rank, const std::vector<PeerAddress>& peers, const FileDescriptor& listener,
                                std::chrono::milliseconds timeout, int buffer_bytes) {
  const int n = static_cast<int>(peers.size());
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  const auto deadline = Clock::now() + timeout;
  // Connect first, then accept: every listener already exists, so connect() completes
  // through the backlog and no rank waits on another's accept().
  const PeerAddress& to = peers[static_cast<size_t>(next)];
  auto next_fd = ConnectWithRetry(to.host, to.port, deadline, buffer_bytes);
  if (!next_fd.ok()) return next_fd.status().WithContext(fmt::format("ring: connecting to rank {}", next));
  STRATA_RETURN_IF_ERROR(ConfigureRingSocket(*next_fd));
  const Hello hello{kMagic, rank, n};
  STRATA_RETURN_IF_ERROR(SendAll(*next_fd, &hello, sizeof(hello), deadline));

  auto prev_fd = AcceptUntil(listener, deadline);
  if (!prev_fd.ok()) return prev_fd.status().WithContext(fmt::format("ring: waiting for rank {} to connect", prev));
  STRATA_RETURN_IF_ERROR(ConfigureRingSocket(*prev_fd));
  Hello got{};
  Status s = RecvAll(*prev_fd, &got, sizeof(got), deadline);
  if (!s.ok()) return s.WithContext(fmt::format("ring: handshake from rank {}", prev));
  if (got.magic != kMagic || got.rank != prev || got.world_size != n) {
    return Error(StatusCode::kFailedPrecondition,
                 "ring: rank {} expected rank {} of {} to connect, got magic {:#x} rank {} of {}", rank, prev, n,
                 got.magic, got.rank, got.world_size);
  }
  return RingLinks(rank, n, std::move(*prev_fd), std::move(*next_fd), timeout);
}

}  // namespace strata::comm
