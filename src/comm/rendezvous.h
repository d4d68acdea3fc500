// Rendezvous through LibTorch's c10d TCPStore: every rank publishes the address of its ring
// listener and learns everyone else's. The only file of src/comm that includes LibTorch.
// Folder-private: used by src/comm only.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "src/comm/ring.h"
#include "strata/communicator.h"

namespace strata::comm {

class Rendezvous {
 public:
  // Rank 0 starts the store's server at env.master_addr:env.master_port, the others connect
  // to it. Connect before opening any other listener: once the store is up its port can no
  // longer be taken by an ephemeral bind of ours. LibTorch's exceptions become a Status.
  // Every store call has a deadline: c10d's client waits forever on a server that accepts
  // and never answers (another program on MASTER_PORT); such a call is abandoned.
  static StatusOr<std::unique_ptr<Rendezvous>> Connect(const LaunchEnv& env, std::chrono::milliseconds timeout);
  ~Rendezvous();

  // Publishes `mine` as this rank's listener of ring `ring` (0, 1, ... in the order every rank
  // builds them) and returns every rank's (index = rank). Rank 0 returns only once every rank
  // has read all addresses, so after the last ring it may drop the store.
  StatusOr<std::vector<PeerAddress>> ExchangeAddresses(const PeerAddress& mine, int ring = 0);

 private:
  struct Impl;
  explicit Rendezvous(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;  // shared with a store call abandoned on its deadline
};

}  // namespace strata::comm
