// The CUDA device (compute_device.h), through LibTorch's device-generic API only (streams,
// events, tensors on "cuda"), so no CUDA header is needed here: compute runs on LibTorch's
// current stream; host -> device and device -> host copies each on a stream of their own
// from LibTorch's pool; collectives on a third, enqueued through NCCL (StreamCollectives); the
// blocks' group collectives (tensor and sequence parallelism) on the compute stream itself.
// Queues wait for each other's events on the device (c10::Event::block), never on the host;
// only host callbacks (a flag set by a thread) are waited for on the host. Built with
// STRATA_CUDA; a CPU build compiles it too (tests/CMakeLists.txt), to keep it honest.
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "src/device/compute_device.h"
#include "src/device/torch_call.h"
#include "src/device/work_queue.h"
#include "strata/cuda/cuda.h"

namespace strata {
namespace {

template <typename F>
Status CudaCall(const char* what, F&& f) {
  return TorchCall(fmt::format("{} on the GPU", what), std::forward<F>(f));
}

class CudaEventState final : public EventState {
 public:
  explicit CudaEventState(const c10::Stream& stream) : event_(c10::DeviceType::CUDA) { event_.record(stream); }
  bool Ready() override { return event_.query(); }
  Status Wait() override { return CudaCall("waiting for an event", [&] { event_.synchronize(); }); }
  const c10::Event& event() const { return event_; }

 private:
  c10::Event event_;
};

// The blocks' group collectives on the GPU (ComputeDevice::BlockGroup): NCCL over the group's
// ranks, each collective enqueued on LibTorch's current stream of the device, the stream the
// calling block's operations run on (autograd runs a function's backward on its forward's
// stream). It follows the operations that wrote its input and precedes those that read its
// result, with no wait on the host: communicator.h's "complete when it returns" holds in the
// stream's order, which is how every reader of the result (LibTorch operations) reads it.
class StreamOrderedGroup final : public Communicator {
 public:
  StreamOrderedGroup(std::unique_ptr<Communicator> host, std::unique_ptr<cuda::NcclCommunicator> nccl,
                     torch::Device device)
      : host_(std::move(host)), nccl_(std::move(nccl)), on_(nccl_->stream_collectives()), device_(device),
        guard_(c10::DeviceType::CUDA) {}
  int rank() const override { return nccl_->rank(); }
  int world_size() const override { return nccl_->world_size(); }
  const char* name() const override { return "nccl (block group)"; }
  Status AllGather(const void* shard, void* full, size_t count, DType dtype) override {
    return on_->AllGatherOn(Current(), shard, full, count, dtype);
  }
  Status ReduceScatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp op) override {
    return on_->ReduceScatterOn(Current(), full, shard, count, dtype, op);
  }
  Status AllReduce(void* data, size_t count, DType dtype, ReduceOp op) override {
    return on_->AllReduceOn(Current(), data, count, dtype, op);
  }
  Status Broadcast(void* data, size_t count, DType dtype, int root) override {
    return on_->BroadcastOn(Current(), data, count, dtype, root);
  }
  Status AllToAll(const void* in, void* out, size_t count, DType dtype) override {
    return on_->AllToAllOn(Current(), in, out, count, dtype);
  }
  Status Barrier() override { return nccl_->Barrier(); }

 private:
  void* Current() const { return guard_.getStream(device_).native_handle(); }
  std::unique_ptr<Communicator> host_;  // the group over host buffers NCCL met through
  std::unique_ptr<cuda::NcclCommunicator> nccl_;
  cuda::StreamCollectives* on_;
  torch::Device device_;
  c10::impl::VirtualGuardImpl guard_;
};

class CudaDevice final : public ComputeDevice {
 public:
  CudaDevice(int index, cuda::StreamCollectives* streams, Communicator* blocking)
      : device_(torch::kCUDA, static_cast<c10::DeviceIndex>(index)), guard_(c10::DeviceType::CUDA),
        copy_in_(guard_.getStreamFromGlobalPool(device_)), copy_out_(guard_.getStreamFromGlobalPool(device_)),
        coll_(guard_.getStreamFromGlobalPool(device_)), streams_(streams), blocking_(blocking),
        host_(Track::kDeviceComm, 0, 0, 0, &g_untraced) {}
  ~CudaDevice() override { Synchronize().IgnoreError(); }

  torch::Device device() const override { return device_; }
  bool is_host() const override { return false; }
  std::string Name() const override { return cuda::DeviceName(device_.index()); }
  double PeakTflops(DType dtype) const override;
  uint64_t MemoryBytes() const override { return cuda::DeviceMemoryBytes(device_.index()); }
  std::unique_ptr<HostPinner> MakeHostPinner() const override { return cuda::MakeCudaHostPinner(); }
  Communicator* collectives() const override { return blocking_; }
  StatusOr<std::shared_ptr<Communicator>> BlockGroup(std::unique_ptr<Communicator> host_group) override {
    STRATA_ASSIGN_OR_RETURN(auto nccl, cuda::MakeNcclCommunicator(host_group.get(), device_.index()));
    return std::shared_ptr<Communicator>(std::make_shared<StreamOrderedGroup>(std::move(host_group), std::move(nccl), device_));
  }

  Event CopyIn(const torch::Tensor& dst, const void* src, const EventList& after) override {
    return On(copy_in_, after, "host -> device copy", [&] {
      // Pinned (cudaHostRegister'd) source: an asynchronous copy on this stream. The caching
      // allocator must not hand dst's memory to another stream's tensor before it lands.
      dst.copy_(torch::from_blob(const_cast<void*>(src), dst.sizes(), dst.options().device(torch::kCPU)), true);
      dst.record_stream(copy_in_);
    });
  }
  Event CopyOut(void* dst, const torch::Tensor& src, const EventList& after) override {
    return On(copy_out_, after, "device -> host copy", [&] {
      torch::from_blob(dst, src.sizes(), src.options().device(torch::kCPU)).copy_(src, true);
      src.record_stream(copy_out_);  // src may be freed by its owner while this copy reads it
    });
  }
  Event AllGather(const void* shard, void* full, size_t count, DType dtype, const EventList& after) override {
    return Collective(after, "all-gather", [&](void* s) { return streams_->AllGatherOn(s, shard, full, count, dtype); });
  }
  Event ReduceScatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp op,
                            const EventList& after) override {
    return Collective(after, "reduce-scatter",
                      [&](void* s) { return streams_->ReduceScatterOn(s, full, shard, count, dtype, op); });
  }
  Event AllReduce(void* data, size_t count, DType dtype, ReduceOp op, const EventList& after) override {
    return Collective(after, "all-reduce", [&](void* s) { return streams_->AllReduceOn(s, data, count, dtype, op); });
  }
  Event Broadcast(void* data, size_t count, DType dtype, int root, const EventList& after) override {
    return Collective(after, "broadcast", [&](void* s) { return streams_->BroadcastOn(s, data, count, dtype, root); });
  }
  Status ComputeAfter(const Event& e) override { return Order(guard_.getStream(device_), {e}); }
  Event RecordCompute() override { return Record(guard_.getStream(device_)); }
  Event OnHost(std::function<Status()> fn, const EventList& after) override {
    return host_.Submit({after, nullptr, std::move(fn), "host callback", 0, {}});
  }
  Status Synchronize() override {
    Status s = CudaCall("synchronising", [&] {
      for (const c10::Stream& st : {guard_.getStream(device_), copy_in_, copy_out_, coll_}) st.synchronize();
    });
    if (Status h = host_.last().Wait(); s.ok()) s = h;
    if (s.ok()) s = host_.first_error();
    if (s.ok()) s = streams_->AsyncError();
    return s;
  }

 private:
  // Makes `stream` wait for `after`: on the device for CUDA events, on the host for the rest.
  Status Order(const c10::Stream& stream, const EventList& after) {
    for (const Event& e : after) {
      if (!e.state()) continue;
      if (auto* c = dynamic_cast<CudaEventState*>(e.state().get())) {
        STRATA_RETURN_IF_ERROR(CudaCall("ordering streams", [&] { c->event().block(stream); }));
      } else {
        STRATA_RETURN_IF_ERROR(e.Wait());
      }
    }
    return Status();
  }
  Event Record(const c10::Stream& stream) {
    std::shared_ptr<EventState> s;
    Status st = CudaCall("recording an event", [&] { s = std::make_shared<CudaEventState>(stream); });
    return st.ok() ? Event(std::move(s)) : Event::Failed(st);
  }
  template <typename F>
  Event On(const c10::Stream& stream, const EventList& after, const char* what, F&& f) {
    if (Status s = Order(stream, after); !s.ok()) return Event::Failed(s);
    Status s = CudaCall(what, [&] {
      c10::StreamGuard g(stream);
      f();
    });
    return s.ok() ? Record(stream) : Event::Failed(s);
  }
  template <typename F>
  Event Collective(const EventList& after, const char* what, F&& f) {
    if (Status s = Order(coll_, after); !s.ok()) return Event::Failed(s);
    if (Status s = f(coll_.native_handle()); !s.ok()) return Event::Failed(s.WithContext(what));
    return Record(coll_);
  }

  torch::Device device_;
  c10::impl::VirtualGuardImpl guard_;
  c10::Stream copy_in_, copy_out_, coll_;
  cuda::StreamCollectives* streams_;
  Communicator* blocking_;
  WorkQueue host_;
};

double CudaDevice::PeakTflops(DType dtype) const {
  // Dense (no sparsity) figures from NVIDIA's data sheets.
  struct Peak {
    const char* name_part;
    double half, fp32;
  };
  static const Peak kPeaks[] = {{"H100 PCIe", 756.0, 51.0}, {"H100", 989.4, 66.9}, {"H200", 989.4, 66.9},
                                {"H800", 989.4, 66.9},     {"A100", 312.0, 19.5}, {"L40S", 362.05, 91.6}};
  const std::string name = Name();
  for (const Peak& p : kPeaks)
    if (name.find(p.name_part) != std::string::npos) return dtype == DType::kF32 ? p.fp32 : p.half;
  return 0;
}

}  // namespace

StatusOr<std::unique_ptr<ComputeDevice>> MakeCudaDevice(int index, cuda::StreamCollectives* collectives,
                                                        Communicator* blocking) {
  std::unique_ptr<ComputeDevice> d;
  STRATA_RETURN_IF_ERROR(CudaCall("opening the GPU", [&] {
    d = std::make_unique<CudaDevice>(index, collectives, blocking);
  }));
  return d;
}

}  // namespace strata
