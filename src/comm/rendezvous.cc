#include "src/comm/rendezvous.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <exception>
#include <future>
#include <string>
#include <thread>

namespace strata::comm {
namespace {

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string Text(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

// Ring 0's keys are the first ring's; every further ring of one run has its own.
std::string RingKey(int ring, const std::string& what) {
  return ring == 0 ? "strata/ring/" + what : fmt::format("strata/ring{}/{}", ring, what);
}

PeerAddress ParseAddress(const std::string& text, int rank) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error(fmt::format("rank {} published a bad address '{}'", rank, text));
  return PeerAddress{text.substr(0, colon), static_cast<uint16_t>(std::stoi(text.substr(colon + 1)))};
}

}  // namespace

struct Rendezvous::Impl : std::enable_shared_from_this<Impl> {
  LaunchEnv env;
  std::chrono::milliseconds timeout;
  std::unique_ptr<c10d::TCPStore> store;

  // Runs `fn`, turning LibTorch's exceptions into a Status that says where and who.
  template <typename Fn>
  Status Guarded(Fn&& fn) {
    try {
      fn();
      return Status::Ok();
    } catch (const std::exception& e) {
      std::string what = e.what();
      what = what.substr(0, what.find('\n'));  // c10d's messages are long; line 1 says what failed
      return Error(StatusCode::kUnavailable, "rendezvous at {}:{} (rank {} of {}, timeout {} ms): {}", env.master_addr,
                   env.master_port, env.rank, env.world_size, timeout.count(), what);
    }
  }

  // Guarded(fn) on a helper thread, waited for at most `deadline`. On the deadline the call
  // is abandoned (its thread keeps this Impl alive; fn owns what it touches besides it).
  template <typename Fn>
  Status Bounded(std::chrono::milliseconds deadline, Fn fn) {
    auto done = std::make_shared<std::promise<Status>>();
    std::future<Status> result = done->get_future();
    std::thread([self = shared_from_this(), done, fn = std::move(fn)]() mutable {
      done->set_value(self->Guarded(fn));
    }).detach();
    if (result.wait_for(deadline) == std::future_status::ready) return result.get();
    return Error(StatusCode::kUnavailable,
                 "rendezvous at {}:{} (rank {} of {}): no answer within {} ms (strata.comm_timeout_s); is another "
                 "program listening on MASTER_PORT {}?", env.master_addr, env.master_port, env.rank, env.world_size,
                 deadline.count(), env.master_port);
  }
};

Rendezvous::Rendezvous(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Rendezvous::~Rendezvous() = default;

StatusOr<std::unique_ptr<Rendezvous>> Rendezvous::Connect(const LaunchEnv& env, std::chrono::milliseconds timeout) {
  auto impl = std::make_shared<Impl>();
  impl->env = env;
  impl->timeout = timeout;
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(env.master_port);
  opts.isServer = env.rank == 0;
  opts.numWorkers = static_cast<size_t>(env.world_size);
  opts.waitWorkers = false;
  opts.timeout = timeout;
  Impl* p = impl.get();  // kept alive by the call's thread if it is abandoned
  const std::string host = env.master_addr;
  STRATA_RETURN_IF_ERROR(impl->Bounded(timeout + std::chrono::seconds(2), [p, host, opts] {
    p->store = std::make_unique<c10d::TCPStore>(host, opts);
  }));
  return std::unique_ptr<Rendezvous>(new Rendezvous(std::move(impl)));
}

StatusOr<std::vector<PeerAddress>> Rendezvous::ExchangeAddresses(const PeerAddress& mine, int ring) {
  auto peers = std::make_shared<std::vector<PeerAddress>>();
  Impl* p = impl_.get();
  // Two waits of up to the timeout each (everyone's address; rank 0: everyone has read).
  STRATA_RETURN_IF_ERROR(impl_->Bounded(2 * p->timeout + std::chrono::seconds(2), [p, peers, mine, ring] {
    c10d::TCPStore& store = *p->store;
    const LaunchEnv& env = p->env;
    store.set(RingKey(ring, std::to_string(env.rank)), Bytes(fmt::format("{}:{}", mine.host, mine.port)));
    std::vector<std::string> keys;
    for (int r = 0; r < env.world_size; ++r) keys.push_back(RingKey(ring, std::to_string(r)));
    store.wait(keys, p->timeout);
    for (int r = 0; r < env.world_size; ++r) peers->push_back(ParseAddress(Text(store.get(keys[static_cast<size_t>(r)])), r));
    // Rank 0 owns the store's server: it may only drop it after everyone has read.
    if (store.add(RingKey(ring, "read"), 1) == env.world_size) store.set(RingKey(ring, "all_read"), Bytes("1"));
    if (env.rank == 0) store.wait({RingKey(ring, "all_read")}, p->timeout);
  }));
  return *peers;
}

}  // namespace strata::comm
