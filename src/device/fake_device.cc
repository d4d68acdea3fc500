// The fake asynchronous device (compute_device.h): device memory is host memory, compute
// runs on the caller's thread, and every copy and collective runs on a queue thread of its
// own, after its `after` events, with an injected delay and its destination poisoned (NaN)
// while in flight. A missing wait in the engine then reads NaN or stale bytes, and a test
// comparing with the host path fails, here, instead of a race on a GPU.
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "src/device/compute_device.h"
#include "src/device/work_queue.h"
#include "strata/check.h"
#include "strata/host_pinner.h"
#include "strata/log.h"

namespace strata {
namespace {

void Poison(void* p, size_t bytes) {
  // All-ones bytes: NaN in fp32, bf16 and fp16 alike.
  std::memset(p, 0xff, bytes);
}

// Pins as cudaHostRegister does: the range is registered with the device, not mlock'ed, so
// the kernel's VmLck never sees it (a report reading VmLck says 0 B, as on a GPU). Unpinning
// a range that was never pinned is an error there, and a failed check here.
class RegisteringPinner final : public HostPinner {
 public:
  RegisteringPinner(bool refuse, std::shared_ptr<LinkCounters> counters) : refuse_(refuse), counters_(std::move(counters)) {}
  const char* name() const override { return "fake registration"; }

 protected:
  Status Lock(void* data, size_t bytes) override {
    if (refuse_) return Error(StatusCode::kUnavailable, "the fake device refuses to pin {} bytes", bytes);
    if (counters_) counters_->pinned += bytes;
    std::lock_guard<std::mutex> lock(mu_);
    STRATA_CHECK(registered_.emplace(data, bytes).second) << "memory pinned twice";
    return Status();
  }
  void Unlock(void* data, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = registered_.find(data);
    STRATA_CHECK(it != registered_.end() && it->second == bytes) << "unpinning memory that was not pinned";
    registered_.erase(it);
  }

 private:
  const bool refuse_;
  const std::shared_ptr<LinkCounters> counters_;
  std::mutex mu_;
  std::map<void*, size_t> registered_;
};

// The blocks' group collectives on the fake device: each after a random delay, on the thread
// that computes (as a GPU's run on the calling block's stream), so that nothing in the engine
// may depend on when a rank's group collective happens against its copy and ZeRO queues.
class DelayedGroup final : public Communicator {
 public:
  DelayedGroup(std::unique_ptr<Communicator> inner, uint64_t seed, int max_delay_us, LinkCounters* counters)
      : inner_(std::move(inner)), rng_(seed), max_delay_us_(max_delay_us), counters_(counters) {}
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  const char* name() const override { return inner_->name(); }
  Status AllGather(const void* shard, void* full, size_t count, DType dtype) override {
    Delay();
    Count(&LinkCounters::group_gathered, count, dtype);
    return inner_->AllGather(shard, full, count, dtype);
  }
  Status ReduceScatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp op) override {
    Delay();
    return inner_->ReduceScatter(full, shard, count, dtype, op);
  }
  Status AllReduce(void* data, size_t count, DType dtype, ReduceOp op) override {
    Delay();
    Count(&LinkCounters::group_summed, count, dtype);
    return inner_->AllReduce(data, count, dtype, op);
  }
  Status Broadcast(void* data, size_t count, DType dtype, int root) override {
    Delay();
    return inner_->Broadcast(data, count, dtype, root);
  }
  Status Barrier() override { return inner_->Barrier(); }
  Status AllToAll(const void* in, void* out, size_t count, DType dtype) override {
    Delay();
    Count(&LinkCounters::group_exchanged, count * static_cast<size_t>(world_size()), dtype);
    return inner_->AllToAll(in, out, count, dtype);
  }

 private:
  void Delay() {
    if (max_delay_us_ <= 0) return;
    std::this_thread::sleep_for(std::chrono::microseconds(rng_() % (static_cast<uint64_t>(max_delay_us_) + 1)));
  }
  void Count(std::atomic<uint64_t> LinkCounters::*bytes, size_t count, DType dtype) {
    if (counters_) (counters_->*bytes) += count * DTypeSize(dtype);
  }
  std::unique_ptr<Communicator> inner_;
  std::mt19937_64 rng_;  // one group is called by one thread at a time (communicator.h)
  int max_delay_us_;
  LinkCounters* counters_;  // optional
};

class FakeAsyncDevice final : public ComputeDevice {
 public:
  FakeAsyncDevice(Communicator* comm, const FakeDeviceOptions& o)
      : comm_(comm), o_(o),
        in_(Track::kCopyIn, o.seed * 4 + 1, o.max_delay_us, o.copy_gbps, &tracer_),
        out_(Track::kCopyOut, o.seed * 4 + 2, o.max_delay_us, o.copy_gbps, &tracer_),
        coll_(Track::kDeviceComm, o.seed * 4 + 3, o.max_delay_us, 0, &tracer_),
        host_(Track::kDeviceComm, o.seed * 4 + 4, 0, 0, &g_untraced) {}
  ~FakeAsyncDevice() override { Synchronize().IgnoreError(); }

  torch::Device device() const override { return torch::Device(torch::kCPU); }
  bool is_host() const override { return false; }
  std::string Name() const override {
    return o_.copy_gbps > 0 ? fmt::format("fake async device (copies at {} GB/s)", o_.copy_gbps)
                            : fmt::format("fake async device (delays up to {} us, seed {})", o_.max_delay_us, o_.seed);
  }
  Communicator* collectives() const override { return comm_; }
  StatusOr<std::shared_ptr<Communicator>> BlockGroup(std::unique_ptr<Communicator> host_group) override {
    return std::shared_ptr<Communicator>(
        std::make_shared<DelayedGroup>(std::move(host_group), o_.seed * 4 + 5 + groups_++, o_.max_delay_us,
                                       o_.counters.get()));
  }
  std::unique_ptr<HostPinner> MakeHostPinner() const override {
    return std::make_unique<RegisteringPinner>(o_.refuse_pinning, o_.counters);
  }

  Event CopyIn(const torch::Tensor& dst, const void* src, const EventList& after) override {
    void* d = dst.data_ptr();
    const size_t n = dst.nbytes();
    if (o_.counters) o_.counters->in += n;
    return in_.Submit({after, Poisoner(d, n), [=] { std::memcpy(d, src, n); return Status(); }, "h2d", n, {}});
  }
  Event CopyOut(void* dst, const torch::Tensor& src, const EventList& after) override {
    const void* s = src.data_ptr();
    const size_t n = src.nbytes();
    if (o_.counters) o_.counters->out += n;
    return out_.Submit({after, Poisoner(dst, n), [=] { std::memcpy(dst, s, n); return Status(); }, "d2h", n, {}});
  }
  Event AllGather(const void* shard, void* full, size_t count, DType dtype, const EventList& after) override {
    const size_t n = count * DTypeSize(dtype) * comm_->world_size();
    // A shard that aliases its slot in `full` must not be poisoned before it is read.
    const bool aliased = static_cast<const std::byte*>(shard) >= static_cast<std::byte*>(full) &&
                         static_cast<const std::byte*>(shard) < static_cast<std::byte*>(full) + n;
    return coll_.Submit({after, aliased ? nullptr : Poisoner(full, n),
                         [=, this] { return comm_->AllGather(shard, full, count, dtype); }, "all-gather", n, {}});
  }
  Event ReduceScatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp op,
                            const EventList& after) override {
    const size_t n = count * DTypeSize(dtype);
    return coll_.Submit({after, Poisoner(shard, n),
                         [=, this] { return comm_->ReduceScatter(full, shard, count, dtype, op); }, "reduce-scatter", n, {}});
  }
  Event AllReduce(void* data, size_t count, DType dtype, ReduceOp op, const EventList& after) override {
    return coll_.Submit({after, nullptr, [=, this] { return comm_->AllReduce(data, count, dtype, op); }, "all-reduce",
                         count * DTypeSize(dtype), {}});
  }
  Event Broadcast(void* data, size_t count, DType dtype, int root, const EventList& after) override {
    const size_t n = count * DTypeSize(dtype);
    // Every rank but the root receives: their bytes are poisoned until it lands.
    return coll_.Submit({after, comm_->rank() == root ? nullptr : Poisoner(data, n),
                         [=, this] { return comm_->Broadcast(data, count, dtype, root); }, "broadcast", n, {}});
  }
  Status ComputeAfter(const Event& e) override { return e.Wait(); }
  Event RecordCompute() override { return Event(); }  // compute ran on the caller: done
  Event OnHost(std::function<Status()> fn, const EventList& after) override {
    return host_.Submit({after, nullptr, std::move(fn), "host callback", 0, {}});
  }
  Status Synchronize() override {
    Status first;
    for (WorkQueue* q : {&in_, &out_, &coll_, &host_}) q->last().Wait().IgnoreError();
    for (WorkQueue* q : {&in_, &out_, &coll_, &host_})
      if (Status s = q->first_error(); !s.ok() && first.ok()) first = s;
    return first;
  }

 private:
  std::function<void()> Poisoner(void* p, size_t n) const {
    if (!o_.poison) return nullptr;
    return [=] { Poison(p, n); };
  }

  Communicator* comm_;
  FakeDeviceOptions o_;
  uint64_t groups_ = 0;  // the block groups made so far: each its own stream of delays
  WorkQueue in_, out_, coll_, host_;
};

}  // namespace

std::unique_ptr<ComputeDevice> MakeFakeAsyncDevice(Communicator* comm, FakeDeviceOptions options) {
  return std::make_unique<FakeAsyncDevice>(comm, options);
}

}  // namespace strata
