#include "src/comm/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

namespace strata::comm {
namespace {

int MillisUntil(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

// Resolves host:port to an IPv4 address (the ring is IPv4, as torchrun's MASTER_ADDR usually is).
StatusOr<sockaddr_in> Resolve(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return Error(StatusCode::kNotFound, "cannot resolve host '{}': {}", host, gai_strerror(rc));
  }
  sockaddr_in addr = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
  freeaddrinfo(res);
  addr.sin_port = htons(port);
  return addr;
}

Status SetBufferSizes(int fd, int bytes) {
  if (bytes <= 0) return Status::Ok();
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes)) != 0) return ErrnoError(errno, "SO_SNDBUF");
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)) != 0) return ErrnoError(errno, "SO_RCVBUF");
  return Status::Ok();
}

// Waits for `events` on fd until the deadline; false on timeout.
StatusOr<bool> WaitFor(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  for (;;) {
    int n = poll(&p, 1, MillisUntil(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return ErrnoError(errno, "poll");
  }
}

}  // namespace

void FileDescriptor::Reset(int fd) {
  if (fd_ >= 0) close(fd_);  // close() errors on a socket carry no data-loss meaning
  fd_ = fd;
}

StatusOr<FileDescriptor> Listen(uint16_t port, int backlog, int buffer_bytes) {
  FileDescriptor fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoError(errno, "socket");
  int one = 1;
  if (setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
    return ErrnoError(errno, "setsockopt(SO_REUSEADDR)");
  }
  STRATA_RETURN_IF_ERROR(SetBufferSizes(fd.get(), buffer_bytes));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(port);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return ErrnoError(errno, "bind to port {}", port);
  }
  if (listen(fd.get(), backlog) != 0) return ErrnoError(errno, "listen on port {}", port);
  return fd;
}

StatusOr<uint16_t> LocalPort(const FileDescriptor& fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) return ErrnoError(errno, "getsockname");
  return ntohs(addr.sin_port);
}

StatusOr<std::string> LocalAddressTowards(const std::string& host, uint16_t port) {
  STRATA_ASSIGN_OR_RETURN(sockaddr_in remote, Resolve(host, port));
  // connect() on a UDP socket only picks the route and the local address; nothing is sent.
  FileDescriptor fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoError(errno, "socket");
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&remote), sizeof(remote)) != 0) {
    return ErrnoError(errno, "no route to {}:{}", host, port);
  }
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) return ErrnoError(errno, "getsockname");
  char text[INET_ADDRSTRLEN];
  if (!inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text))) return ErrnoError(errno, "inet_ntop");
  return std::string(text);
}

StatusOr<FileDescriptor> ConnectWithRetry(const std::string& host, uint16_t port, Clock::time_point deadline,
                                          int buffer_bytes) {
  STRATA_ASSIGN_OR_RETURN(sockaddr_in addr, Resolve(host, port));
  for (;;) {
    FileDescriptor fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return ErrnoError(errno, "socket");
    STRATA_RETURN_IF_ERROR(SetBufferSizes(fd.get(), buffer_bytes));
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    int err = errno;
    bool retry = err == ECONNREFUSED || err == ETIMEDOUT || err == EINTR || err == ENETUNREACH || err == EAGAIN;
    if (!retry) return ErrnoError(err, "connect to {}:{}", host, port);
    if (Clock::now() >= deadline) return ErrnoError(err, "connect to {}:{} (gave up at the deadline)", host, port);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

StatusOr<FileDescriptor> AcceptUntil(const FileDescriptor& listener, Clock::time_point deadline) {
  for (;;) {
    STRATA_ASSIGN_OR_RETURN(bool ready, WaitFor(listener.get(), POLLIN, deadline));
    if (!ready) return Error(StatusCode::kUnavailable, "accept: no connection before the deadline");
    FileDescriptor fd(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (fd.valid()) return fd;
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) return ErrnoError(errno, "accept");
  }
}

Status ConfigureRingSocket(const FileDescriptor& fd) {
  int one = 1;
  if (setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return ErrnoError(errno, "setsockopt(TCP_NODELAY)");
  }
  int flags = fcntl(fd.get(), F_GETFL);
  if (flags < 0 || fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) return ErrnoError(errno, "fcntl(O_NONBLOCK)");
  return Status::Ok();
}

Status SendAll(const FileDescriptor& fd, const void* data, size_t bytes, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = send(fd.get(), p, bytes, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) return ErrnoError(errno, "send");
    STRATA_ASSIGN_OR_RETURN(bool ready, WaitFor(fd.get(), POLLOUT, deadline));
    if (!ready) return Error(StatusCode::kUnavailable, "send: timed out");
  }
  return Status::Ok();
}

Status RecvAll(const FileDescriptor& fd, void* data, size_t bytes, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = recv(fd.get(), p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return Error(StatusCode::kUnavailable, "connection closed by the peer");
    if (errno != EAGAIN && errno != EINTR) return ErrnoError(errno, "recv");
    STRATA_ASSIGN_OR_RETURN(bool ready, WaitFor(fd.get(), POLLIN, deadline));
    if (!ready) return Error(StatusCode::kUnavailable, "recv: timed out");
  }
  return Status::Ok();
}

StatusOr<uint16_t> FindFreePort() {
  FileDescriptor fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoError(errno, "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return ErrnoError(errno, "bind");
  return LocalPort(fd);
}

}  // namespace strata::comm
