// The TCP ring under the TCP communicator: rank r sends to r+1 and receives from r-1, each
// over its own connection, and moves both directions at once so that neither side waits
// for the other to drain (no deadlock however large the buffers).
// Folder-private: used by src/comm and its tests only.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "src/comm/socket.h"
#include "strata/status.h"

namespace strata::comm {

struct PeerAddress {
  std::string host;
  uint16_t port = 0;
};

// One step of a ring collective: `send_bytes` from `send` to the next rank while
// `recv_bytes` arrive from the previous rank into `recv`. Buffers are the caller's.
struct RingStep {
  const char* send = nullptr;
  size_t send_bytes = 0;
  char* recv = nullptr;
  size_t recv_bytes = 0;
  // Pass-through (broadcast): `send` is `recv`, and only bytes already received may go on.
  bool forward = false;
  // Called after every receive with the total number of bytes received so far, so the
  // caller can reduce data as it lands. Runs on the calling thread.
  std::function<void(size_t)> on_recv;
};

class RingLinks {
 public:
  RingLinks(int rank, int world_size, FileDescriptor prev, FileDescriptor next, std::chrono::milliseconds timeout);

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int prev_rank() const { return (rank_ + world_size_ - 1) % world_size_; }
  int next_rank() const { return (rank_ + 1) % world_size_; }

  // Blocks until the step is done. Fails, naming the peer and `op`, when a neighbour closes
  // its connection, a socket errors, or no byte moves for longer than the timeout.
  Status Run(const RingStep& step, const char* op);

 private:
  Status PeerClosed(int peer, const char* op) const;
  Status CheckNext(short revents, bool owes_bytes, const char* op);

  int rank_;
  int world_size_;
  FileDescriptor prev_;
  FileDescriptor next_;
  std::chrono::milliseconds timeout_;
  bool next_closed_ = false;  // the next rank closed its link cleanly after a completed step
};

// Connects the ring: listens were opened by the caller (`listener`, whose address is
// peers[rank]); connects to peers[rank+1] and accepts the connection of rank-1, checking
// a handshake (magic, rank, world size). Bounded by `timeout`.
StatusOr<RingLinks> ConnectRing(int rank, const std::vector<PeerAddress>& peers, const FileDescriptor& listener,
                                std::chrono::milliseconds timeout, int buffer_bytes);

}  // namespace strata::comm
