// Sockets for the TCP communicator: an owning file descriptor and the few blocking helpers
// the ring set-up needs (listen, connect with retry, accept with a deadline). Every helper
// returns a Status that names the address it was working on; nothing here throws.
// Folder-private: used by src/comm and its tests only.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "strata/status.h"

namespace strata::comm {

// Owns one file descriptor; closes it on destruction. Move-only.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& o) noexcept {
    if (this != &o) Reset(std::exchange(o.fd_, -1));
    return *this;
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

using Clock = std::chrono::steady_clock;

// A listening TCP socket on all interfaces; port 0 picks a free one (read it with LocalPort).
// buffer_bytes > 0 sets SO_SNDBUF/SO_RCVBUF (inherited by accepted sockets; set before the
// handshake so that TCP window scaling can use them; the kernel caps them at wmem/rmem_max).
StatusOr<FileDescriptor> Listen(uint16_t port, int backlog, int buffer_bytes = 0);
StatusOr<uint16_t> LocalPort(const FileDescriptor& fd);

// The local IP address this host uses to reach `host` (no packet is sent), e.g. "10.0.0.5";
// what a rank publishes so that its ring neighbour can connect back to it.
StatusOr<std::string> LocalAddressTowards(const std::string& host, uint16_t port);

// Connects to host:port, retrying refused connections until `deadline`; buffer_bytes as Listen.
StatusOr<FileDescriptor> ConnectWithRetry(const std::string& host, uint16_t port, Clock::time_point deadline,
                                          int buffer_bytes = 0);

// Accepts one connection on `listener`, waiting no later than `deadline`.
StatusOr<FileDescriptor> AcceptUntil(const FileDescriptor& listener, Clock::time_point deadline);

// TCP_NODELAY and non-blocking: the settings of a ring link once connected.
Status ConfigureRingSocket(const FileDescriptor& fd);

// Blocking exact-size send/receive of a small message (the ring handshake), with a deadline.
Status SendAll(const FileDescriptor& fd, const void* data, size_t bytes, Clock::time_point deadline);
Status RecvAll(const FileDescriptor& fd, void* data, size_t bytes, Clock::time_point deadline);

// A TCP port on 127.0.0.1 that was free a moment ago (launcher and tests; racy by nature).
StatusOr<uint16_t> FindFreePort();

}  // namespace strata::comm
