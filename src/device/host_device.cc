// The host device (compute_device.h): blocks run here, on host buffers; every operation is
// complete when it returns. And the synchronous wrapper, which makes any device behave so.
#include <cstring>

#include "src/device/compute_device.h"

namespace strata {
namespace {

// The first error among `after` (waiting for each).
Status WaitAll(const EventList& after) {
  Status first;
  for (const Event& e : after)
    if (Status s = e.Wait(); !s.ok() && first.ok()) first = s;
  return first;
}

Event Done(const Status& s) { return s.ok() ? Event() : Event::Failed(s); }

class HostDevice final : public ComputeDevice {
 public:
  explicit HostDevice(Communicator* comm) : comm_(comm) {}
  torch::Device device() const override { return torch::Device(torch::kCPU); }
  bool is_host() const override { return true; }
  std::string Name() const override { return "cpu"; }
  Communicator* collectives() const override { return comm_; }

  Event CopyIn(const torch::Tensor& dst, const void* src, const EventList& after) override {
    if (Status s = WaitAll(after); !s.ok()) return Event::Failed(s);
    std::memcpy(dst.data_ptr(), src, dst.nbytes());
    return Event();
  }
  Event CopyOut(void* dst, const torch::Tensor& src, const EventList& after) override {
    if (Status s = WaitAll(after); !s.ok()) return Event::Failed(s);
    std::memcpy(dst, src.data_ptr(), src.nbytes());
    return Event();
  }
  Event AllGather(const void* shard, void* full, size_t count, DType dtype, const EventList& after) override {
    if (Status s = WaitAll(after); !s.ok()) return Event::Failed(s);
    return Done(comm_->AllGather(shard, full, count, dtype));
  }
  Event ReduceScatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp op,
                            const EventList& after) override {
    if (Status s = WaitAll(after); !s.ok()) return Event::Failed(s);
    return Done(comm_->ReduceScatter(full, shard, count, dtype, op));
  }
  Event AllReduce(void* data, size_t count, DType dtype, ReduceOp op, const EventList& after) override {
    if (Status s = WaitAll(after); !s.ok()) return Event::Failed(s);
    return Done(comm_->AllReduce(data, count, dtype, op));
  }
  Event Broadcast(void* data, size_t count, DType dtype, int root, const EventList& after) override {
    if (Status s = WaitAll(after); !s.ok()) return Event::Failed(s);
    return Done(comm_->Broadcast(data, count, dtype, root));
  }
  Status ComputeAfter(const Event& e) override { return e.Wait(); }
  Event RecordCompute() override { return Event(); }
  Event OnHost(std::function<Status()> fn, const EventList& after) override {
    if (Status s = WaitAll(after); !s.ok()) return Event::Failed(s);
    return Done(fn());
  }
  Status Synchronize() override { return Status(); }

 private:
  Communicator* comm_;
};

// Every operation of `inner`, waited for before returning: the synchronous schedule.
class SynchronousDevice final : public ComputeDevice {
 public:
  explicit SynchronousDevice(std::unique_ptr<ComputeDevice> inner) : inner_(std::move(inner)) {}
  torch::Device device() const override { return inner_->device(); }
  bool is_host() const override { return inner_->is_host(); }
  std::string Name() const override { return inner_->Name() + ", synchronous"; }
  double PeakTflops(DType d) const override { return inner_->PeakTflops(d); }
  uint64_t MemoryBytes() const override { return inner_->MemoryBytes(); }
  std::unique_ptr<HostPinner> MakeHostPinner() const override { return inner_->MakeHostPinner(); }
  Communicator* collectives() const override { return inner_->collectives(); }
  StatusOr<std::shared_ptr<Communicator>> BlockGroup(std::unique_ptr<Communicator> host_group) override {
    return inner_->BlockGroup(std::move(host_group));
  }

  Event CopyIn(const torch::Tensor& dst, const void* src, const EventList& after) override {
    return Waited(inner_->CopyIn(dst, src, after), "wait h2d");
  }
  Event CopyOut(void* dst, const torch::Tensor& src, const EventList& after) override {
    return Waited(inner_->CopyOut(dst, src, after), "wait d2h");
  }
  Event AllGather(const void* shard, void* full, size_t count, DType dtype, const EventList& after) override {
    return Waited(inner_->AllGather(shard, full, count, dtype, after), "wait all-gather");
  }
  Event ReduceScatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp op,
                            const EventList& after) override {
    return Waited(inner_->ReduceScatter(full, shard, count, dtype, op, after), "wait reduce-scatter");
  }
  Event AllReduce(void* data, size_t count, DType dtype, ReduceOp op, const EventList& after) override {
    return Waited(inner_->AllReduce(data, count, dtype, op, after), "wait all-reduce");
  }
  Event Broadcast(void* data, size_t count, DType dtype, int root, const EventList& after) override {
    return Waited(inner_->Broadcast(data, count, dtype, root, after), "wait broadcast");
  }
  Status ComputeAfter(const Event& e) override { return inner_->ComputeAfter(e); }
  Event RecordCompute() override { return inner_->RecordCompute(); }
  Event OnHost(std::function<Status()> fn, const EventList& after) override {
    return Waited(inner_->OnHost(std::move(fn), after), "wait host callback");
  }
  Status Synchronize() override { return inner_->Synchronize(); }
  void set_tracer(Tracer* tracer) override {
    tracer_ = tracer;
    inner_->set_tracer(tracer);
  }

 private:
  Event Waited(Event e, const char* what) {
    Tracer::Span span(e.Ready() ? nullptr : tracer_, Track::kWait, what);
    return Done(e.Wait());
  }
  std::unique_ptr<ComputeDevice> inner_;
};

}  // namespace

std::unique_ptr<ComputeDevice> MakeHostDevice(Communicator* comm) { return std::make_unique<HostDevice>(comm); }

std::unique_ptr<ComputeDevice> MakeSynchronousDevice(std::unique_ptr<ComputeDevice> inner) {
  return std::make_unique<SynchronousDevice>(std::move(inner));
}

}  // namespace strata
