// N ranks as threads of one process (tests, and the engine's own tests).
//
// Every collective has two phases separated by a generation barrier: each rank publishes
// its buffer pointers and arrives (phase 1), then reads what it needs from the others and
// writes only its own output, and arrives again (phase 2) so that nobody returns, and
// reuses or frees its input, while another rank may still be reading it. In-place
// all-reduce therefore reduces into a per-rank scratch buffer and copies it back after
// phase 2. Reductions add in rank order 0..n-1 in fp32: deterministic by construction.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "src/comm/reduce.h"
#include "strata/check.h"
#include "strata/communicator.h"

namespace strata {
namespace {

struct Slot {
  const void* in = nullptr;
  void* out = nullptr;
};

class SharedState {
 public:
  explicit SharedState(int n) : n_(n), slots_(static_cast<size_t>(n)) {}
  int n() const { return n_; }
  Slot& slot(int r) { return slots_[static_cast<size_t>(r)]; }

  // Returns when all n ranks have called it for the current generation.
  void Arrive() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    // Ranks here are threads of one test or tool: a peer that returned early (an error on
    // its side) would leave this one waiting forever, so a long silence is fatal, not a hang.
    const bool arrived = cv_.wait_for(lock, std::chrono::minutes(5), [&] { return generation_ != gen; });
    STRATA_CHECK(arrived) << "local communicator: " << (n_ - arrived_) << " of " << n_
                          << " ranks did not reach a collective within 5 minutes (did a rank return early with an error?)";
  }

 private:
  const int n_;
  std::vector<Slot> slots_;  // slot r is written only by rank r, before its phase-1 arrival
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<SharedState> shared, int rank) : shared_(std::move(shared)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return shared_->n(); }
  const char* name() const override { return "local"; }

  Status AllGather(const void* shard, void* full, size_t count, DType dtype) override {
    Publish(shard, full);
    const size_t bytes = count * DTypeSize(dtype);
    for (int r = 0; r < world_size(); ++r) {
      char* dst = static_cast<char*>(full) + r * bytes;
      const void* src = shared_->slot(r).in;
      if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
    }
    shared_->Arrive();
    return Status::Ok();
  }

  Status ReduceScatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp op) override {
    Publish(full, shard);
    ReduceInto(rank_ * count * DTypeSize(dtype), count, dtype, op, shard);
    shared_->Arrive();
    return Status::Ok();
  }

  Status AllReduce(void* data, size_t count, DType dtype, ReduceOp op) override {
    Publish(data, data);
    const size_t bytes = count * DTypeSize(dtype);
    if (result_.size() < bytes) result_.resize(bytes);
    ReduceInto(0, count, dtype, op, result_.data());
    shared_->Arrive();  // everyone has read every input: now overwrite ours
    if (bytes > 0) std::memcpy(data, result_.data(), bytes);
    return Status::Ok();
  }

  Status Broadcast(void* data, size_t count, DType dtype, int root) override {
    if (root < 0 || root >= world_size()) return InvalidArgument("broadcast: root {} outside a world of {}", root, world_size());
    Publish(data, data);
    const size_t bytes = count * DTypeSize(dtype);
    if (rank_ != root && bytes > 0) std::memcpy(data, shared_->slot(root).in, bytes);
    shared_->Arrive();
    return Status::Ok();
  }

  Status Barrier() override {
    shared_->Arrive();
    return Status::Ok();
  }

 private:
  void Publish(const void* in, void* out) {
    shared_->slot(rank_) = {in, out};
    shared_->Arrive();
  }

  // out[0..count) = op over ranks 0..n-1 (in that order) of (rank's input + byte_offset).
  void ReduceInto(size_t byte_offset, size_t count, DType dtype, ReduceOp op, void* out) {
    const auto input = [&](size_t r) {
      return static_cast<const char*>(shared_->slot(static_cast<int>(r)).in) + byte_offset;
    };
    comm::ReduceInOrder(input, static_cast<size_t>(world_size()), dtype, count, op, out);
  }

  std::shared_ptr<SharedState> shared_;
  const int rank_;
  std::vector<char> result_;  // all-reduce scratch, grown once to the largest count seen
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> MakeLocalCommunicators(int world_size) {
  STRATA_CHECK(world_size >= 1) << "world_size " << world_size;
  auto shared = std::make_shared<SharedState>(world_size);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < world_size; ++r) comms.push_back(std::make_unique<LocalCommunicator>(shared, r));
  return comms;
}

}  // namespace strata
