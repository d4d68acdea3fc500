// The CPU communicator across processes: ring collectives over plain TCP sockets.
//
// Why not Gloo (LibTorch's c10d CPU backend): PyPI's LibTorch wheel ships no gloo headers,
// and Debian's libgloo would clash with the ~485 gloo symbols that libtorch_cpu.so already
// exports. So LibTorch only provides the rendezvous (its TCPStore, rendezvous.cc) and the
// data moves over our own ring.
//
// Note [Ring order makes reductions deterministic]
// Reduce-scatter splits the buffer into n chunks; chunk c starts at rank c+1 as that rank's
// own values and travels c+1 -> c+2 -> ... -> c, each rank adding its values on the right
// (partial + own). The accumulation order of every element is therefore fixed by the ring,
// (((x[c+1] + x[c+2]) + ...) + x[c]), whatever the timing. Partials travel as fp32 even for
// bf16/fp16 (twice the bytes) so the sum is rounded once, by the chunk's owner. The order
// differs from the local communicator's 0..n-1; each is bitwise reproducible run to run.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "src/comm/reduce.h"
#include "src/comm/rendezvous.h"
#include "src/comm/ring.h"
#include "strata/check.h"
#include "strata/communicator.h"
#include "strata/log.h"

namespace strata {
namespace {

using comm::RingStep;

// Fixed socket buffers (the kernel caps them at rmem/wmem_max, 4 MiB here): measured
// faster than TCP autotuning for the ring's large transfers on loopback.
constexpr int kSocketBufferBytes = 4 << 20;

// Chunk c of an n-way split: elements [begin(c), end(c)). All-reduce pads `total` virtually
// to n * per elements, so the last chunks are shorter or empty, without copying anything.
struct Chunks {
  size_t total;
  size_t per;
  size_t begin(int c) const { return std::min(static_cast<size_t>(c) * per, total); }
  size_t size(int c) const { return std::min(static_cast<size_t>(c + 1) * per, total) - begin(c); }
};

RingStep Duplex(const char* send, size_t send_bytes, char* recv, size_t recv_bytes) {
  RingStep step;
  step.send = send;
  step.send_bytes = send_bytes;
  step.recv = recv;
  step.recv_bytes = recv_bytes;
  return step;
}

// Combines the partial arriving from the previous rank with this rank's values as the
// bytes land: in[i] = op(in[i], own[i]) for every element completed so far.
struct ReduceOnArrival {
  float* in;
  const char* own;
  DType dtype;
  ReduceOp op;
  size_t reduced = 0;  // elements already combined

  void Arrived(size_t bytes_in) {
    const size_t ready = bytes_in / sizeof(float);
    comm::Accumulate(in + reduced, own + reduced * DTypeSize(dtype), dtype, ready - reduced, op);
    reduced = ready;
  }
};

class TcpCommunicator final : public Communicator {
 public:
  explicit TcpCommunicator(comm::RingLinks ring) : ring_(std::move(ring)) {
    STRATA_CHECK(ring_.world_size() >= 2) << "a ring needs two ranks; world 1 is the single-rank communicator";
  }
  int rank() const override { return ring_.rank(); }
  int world_size() const override { return ring_.world_size(); }
  const char* name() const override { return "tcp-ring"; }

  Status AllGather(const void* shard, void* full, size_t count, DType dtype) override {
    const size_t esize = DTypeSize(dtype);
    char* own = static_cast<char*>(full) + rank() * count * esize;
    if (shard != own && count > 0) std::memmove(own, shard, count * esize);
    return Guard(RingAllGather(static_cast<char*>(full), {world_size() * count, count}, esize, "all-gather"));
  }

  Status ReduceScatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp op) override {
    return Guard(RingReduceScatter(static_cast<const char*>(full), {world_size() * count, count}, dtype, op, shard,
                                   "reduce-scatter"));
  }

  // Reduce-scatter into this rank's slice of `data`, then all-gather the slices in place.
  Status AllReduce(void* data, size_t count, DType dtype, ReduceOp op) override {
    const Chunks chunks{count, (count + world_size() - 1) / world_size()};
    char* bytes = static_cast<char*>(data);
    const size_t esize = DTypeSize(dtype);
    STRATA_RETURN_IF_ERROR(Guard(
        RingReduceScatter(bytes, chunks, dtype, op, bytes + chunks.begin(rank()) * esize, "all-reduce")));
    return Guard(RingAllGather(bytes, chunks, esize, "all-reduce"));
  }

  // Pipelined pass-through from the root along the ring: each rank forwards bytes as soon
  // as they arrive; the rank before the root only receives.
  Status Broadcast(void* data, size_t count, DType dtype, int root) override {
    if (root < 0 || root >= world_size()) return InvalidArgument("broadcast: root {} outside a world of {}", root, world_size());
    const size_t bytes = count * DTypeSize(dtype);
    const int pos = (rank() - root + world_size()) % world_size();
    char* p = static_cast<char*>(data);
    RingStep step = pos == 0 ? Duplex(p, bytes, nullptr, 0)
                  : pos == world_size() - 1 ? Duplex(nullptr, 0, p, bytes)
                                            : Duplex(p, bytes, p, bytes);
    step.forward = pos != 0 && pos != world_size() - 1;
    return Guard(Run(step, "broadcast"));
  }

  // An all-gather of one byte per rank: it completes only once every rank has entered.
  Status Barrier() override {
    barrier_bytes_.assign(static_cast<size_t>(world_size()), 1);
    return Guard(RingAllGather(barrier_bytes_.data(), {barrier_bytes_.size(), 1}, 1, "barrier"));
  }

 private:
  int Mod(int x) const { return ((x % world_size()) + world_size()) % world_size(); }

  // A failed collective leaves the ring in an unknown state (bytes of it may be in flight),
  // so every later call fails with the first error. The links stay open until destruction
  // (Note [Telling a dead neighbour from a finished one], ring.cc).
  Status Guard(Status s) {
    if (!s.ok() && broken_.ok()) broken_ = s;
    return s;
  }
  Status Run(const RingStep& step, const char* op) {
    if (!broken_.ok()) return broken_.WithContext(fmt::format("{}: communicator unusable after an earlier error", op));
    return ring_.Run(step, op);
  }

  // full[chunk c] already holds rank c's data for c == rank; afterwards, for every c.
  Status RingAllGather(char* full, const Chunks& chunks, size_t esize, const char* op) {
    for (int s = 0; s + 1 < world_size(); ++s) {
      const int send_c = Mod(rank() - s), recv_c = Mod(rank() - s - 1);
      STRATA_RETURN_IF_ERROR(Run(Duplex(full + chunks.begin(send_c) * esize, chunks.size(send_c) * esize,
                                        full + chunks.begin(recv_c) * esize, chunks.size(recv_c) * esize),
                                 op));
    }
    return Status::Ok();
  }

  // shard = op over ranks of chunk `rank` of `full`, in ring order (Note [Ring order makes reductions
  // deterministic]).
  // `shard` may alias that chunk of `full`: it is written only after the last step.
  Status RingReduceScatter(const char* full, const Chunks& chunks, DType dtype, ReduceOp op, void* shard,
                           const char* name) {
    const size_t esize = DTypeSize(dtype);
    const size_t max_chunk = chunks.per;
    if (partial_[0].size() < max_chunk) {
      partial_[0].resize(max_chunk);
      partial_[1].resize(max_chunk);
    }
    float* out = partial_[0].data();  // the partial this rank sends on
    float* in = partial_[1].data();   // the partial arriving from the previous rank
    for (int s = 0; s + 1 < world_size(); ++s) {
      const int send_c = Mod(rank() - s - 1), recv_c = Mod(rank() - s - 2);
      const size_t send_n = chunks.size(send_c), recv_n = chunks.size(recv_c);
      const char* own_send = full + chunks.begin(send_c) * esize;
      const char* send = reinterpret_cast<const char*>(out);
      if (s == 0 && dtype == DType::kF32) {
        send = own_send;  // the chain starts here: this rank's values as they are
      } else if (s == 0) {
        comm::LoadF32(own_send, dtype, send_n, out);
      }
      ReduceOnArrival reducer{in, full + chunks.begin(recv_c) * esize, dtype, op};
      RingStep step = Duplex(send, send_n * sizeof(float), reinterpret_cast<char*>(in), recv_n * sizeof(float));
      step.on_recv = [r = &reducer](size_t bytes_in) { r->Arrived(bytes_in); };  // small: no allocation
      STRATA_RETURN_IF_ERROR(Run(step, name));
      std::swap(out, in);
    }
    comm::StoreF32(out, dtype, chunks.size(rank()), shard);
    return Status::Ok();
  }

  comm::RingLinks ring_;
  Status broken_;
  std::vector<float> partial_[2];  // reduce-scatter scratch, grown once to the largest chunk
  std::vector<char> barrier_bytes_;
};

}  // namespace

StatusOr<std::vector<std::unique_ptr<Communicator>>> MakeTcpCommunicators(const LaunchEnv& env,
                                                                          std::chrono::milliseconds timeout,
                                                                          int count) {
  if (env.world_size < 1 || env.rank < 0 || env.rank >= env.world_size) {
    return InvalidArgument("tcp communicator: rank {} outside a world of {}", env.rank, env.world_size);
  }
  std::vector<std::unique_ptr<Communicator>> comms;
  if (env.world_size == 1) {
    for (int i = 0; i < count; ++i) comms.push_back(MakeSingleRankCommunicator());
    return comms;
  }
  // The store first: its port is then taken, and our ephemeral listeners cannot land on it.
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<comm::Rendezvous> rendezvous, comm::Rendezvous::Connect(env, timeout));
  auto host = comm::LocalAddressTowards(env.master_addr, static_cast<uint16_t>(env.master_port));
  if (!host.ok()) return host.status().WithContext("tcp communicator: finding this rank's address");
  for (int ring = 0; ring < count; ++ring) {
    STRATA_ASSIGN_OR_RETURN(comm::FileDescriptor listener, comm::Listen(0, env.world_size, kSocketBufferBytes));
    STRATA_ASSIGN_OR_RETURN(uint16_t port, comm::LocalPort(listener));
    STRATA_ASSIGN_OR_RETURN(std::vector<comm::PeerAddress> peers, rendezvous->ExchangeAddresses({*host, port}, ring));
    STRATA_ASSIGN_OR_RETURN(comm::RingLinks links,
                            comm::ConnectRing(env.rank, peers, listener, timeout, kSocketBufferBytes));
    LogDebug("tcp communicator: ring {}, rank {} of {} listening on {}:{}", ring, env.rank, env.world_size, *host, port);
    comms.push_back(std::make_unique<TcpCommunicator>(std::move(links)));
  }
  return comms;
}

StatusOr<std::unique_ptr<Communicator>> MakeTcpCommunicator(const LaunchEnv& env, std::chrono::milliseconds timeout) {
  STRATA_ASSIGN_OR_RETURN(auto comms, MakeTcpCommunicators(env, timeout, 1));
  return std::move(comms.front());
}

}  // namespace strata
