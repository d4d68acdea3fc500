// The host device, the synchronous wrapper, events, and opening strata.device. The fake
// asynchronous device is in fake_device.cc, the CUDA one in cuda_device.cc.
#include "src/engine/compute_device.h"

#include <cstring>

#if STRATA_CUDA_BUILD
#include "strata/cuda/cuda.h"
#endif

namespace strata {

#if STRATA_CUDA_BUILD
// cuda_device.cc (CUDA builds only).
StatusOr<std::unique_ptr<ComputeDevice>> MakeCudaDevice(int index, cuda::StreamCollectives* collectives,
                                                        Communicator* blocking);
#endif

namespace {

// The first error among `after` (waiting for each).
Status WaitAll(const EventList& after) {
  Status first;
  for (const DeviceEvent& e : after)
    if (Status s = e.HostWait(); !s.ok() && first.ok()) first = s;
  return first;
}

DeviceEvent Done(const Status& s) { return s.ok() ? DeviceEvent() : DeviceEvent::Failed(s); }

class HostDevice final : public ComputeDevice {
 public:
  explicit HostDevice(Communicator* comm) : comm_(comm) {}
  torch::Device device() const override { return torch::Device(torch::kCPU); }
  bool is_host() const override { return true; }
  std::string Name() const override { return "cpu"; }
  Communicator* collectives() const override { return comm_; }

  DeviceEvent CopyIn(const torch::Tensor& dst, const void* src, const EventList& after) override {
    if (Status s = WaitAll(after); !s.ok()) return DeviceEvent::Failed(s);
    std::memcpy(dst.data_ptr(), src, dst.nbytes());
    return DeviceEvent();
  }
  DeviceEvent CopyOut(void* dst, const torch::Tensor& src, const EventList& after) override {
    if (Status s = WaitAll(after); !s.ok()) return DeviceEvent::Failed(s);
    std::memcpy(dst, src.data_ptr(), src.nbytes());
    return DeviceEvent();
  }
  DeviceEvent AllGather(const void* shard, void* full, size_t count, DType dtype, const EventList& after) override {
    if (Status s = WaitAll(after); !s.ok()) return DeviceEvent::Failed(s);
    return Done(comm_->AllGather(shard, full, count, dtype));
  }
  DeviceEvent ReduceScatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp op,
                            const EventList& after) override {
    if (Status s = WaitAll(after); !s.ok()) return DeviceEvent::Failed(s);
    return Done(comm_->ReduceScatter(full, shard, count, dtype, op));
  }
  DeviceEvent AllReduce(void* data, size_t count, DType dtype, ReduceOp op, const EventList& after) override {
    if (Status s = WaitAll(after); !s.ok()) return DeviceEvent::Failed(s);
    return Done(comm_->AllReduce(data, count, dtype, op));
  }
  Status ComputeAfter(const DeviceEvent& e) override { return e.HostWait(); }
  DeviceEvent RecordCompute() override { return DeviceEvent(); }
  DeviceEvent OnHost(std::function<Status()> fn, const EventList& after) override {
    if (Status s = WaitAll(after); !s.ok()) return DeviceEvent::Failed(s);
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

  DeviceEvent CopyIn(const torch::Tensor& dst, const void* src, const EventList& after) override {
    return Waited(inner_->CopyIn(dst, src, after), "wait h2d");
  }
  DeviceEvent CopyOut(void* dst, const torch::Tensor& src, const EventList& after) override {
    return Waited(inner_->CopyOut(dst, src, after), "wait d2h");
  }
  DeviceEvent AllGather(const void* shard, void* full, size_t count, DType dtype, const EventList& after) override {
    return Waited(inner_->AllGather(shard, full, count, dtype, after), "wait all-gather");
  }
  DeviceEvent ReduceScatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp op,
                            const EventList& after) override {
    return Waited(inner_->ReduceScatter(full, shard, count, dtype, op, after), "wait reduce-scatter");
  }
  DeviceEvent AllReduce(void* data, size_t count, DType dtype, ReduceOp op, const EventList& after) override {
    return Waited(inner_->AllReduce(data, count, dtype, op, after), "wait all-reduce");
  }
  Status ComputeAfter(const DeviceEvent& e) override { return inner_->ComputeAfter(e); }
  DeviceEvent RecordCompute() override { return inner_->RecordCompute(); }
  DeviceEvent OnHost(std::function<Status()> fn, const EventList& after) override {
    return Waited(inner_->OnHost(std::move(fn), after), "wait host callback");
  }
  Status Synchronize() override { return inner_->Synchronize(); }
  void set_tracer(Tracer* tracer) override {
    tracer_ = tracer;
    inner_->set_tracer(tracer);
  }

 private:
  DeviceEvent Waited(DeviceEvent e, const char* what) {
    Tracer::Span span(e.Ready() ? nullptr : tracer_, Track::kWait, what);
    return Done(e.HostWait());
  }
  std::unique_ptr<ComputeDevice> inner_;
};

}  // namespace

std::unique_ptr<ComputeDevice> MakeHostDevice(Communicator* comm) { return std::make_unique<HostDevice>(comm); }

std::unique_ptr<ComputeDevice> MakeSynchronousDevice(std::unique_ptr<ComputeDevice> inner) {
  return std::make_unique<SynchronousDevice>(std::move(inner));
}

bool SpecNamesGpu(const std::string& spec) {
  if (spec == "auto") return torch::cuda::is_available();
  return spec.rfind("cuda", 0) == 0;
}

StatusOr<OpenedDevice> OpenComputeDevice(const std::string& spec, int local_rank, Communicator* host) {
  OpenedDevice out;
  if (spec == "cpu" || (spec == "auto" && !torch::cuda::is_available())) {
    out.device = MakeHostDevice(host);
    return out;
  }
  if (spec == "fake" || spec.rfind("fake:", 0) == 0) {  // the fake asynchronous device (a demo of the overlap)
    if (host->world_size() != 1)
      return InvalidArgument("strata.device '{}': the fake device runs one rank only (it has no communicator of "
                             "its own across processes)", spec);
    FakeDeviceOptions o;
    o.copy_gbps = spec.size() > 5 ? std::strtod(spec.c_str() + 5, nullptr) : 10.0;
    if (!(o.copy_gbps > 0)) return InvalidArgument("strata.device '{}': expected fake:<GB/s of the modelled link>", spec);
    out.collectives = MakeSingleRankCommunicator();
    out.device = MakeFakeAsyncDevice(out.collectives.get(), o);
    return out;
  }
  if (spec != "auto" && spec != "cuda" && spec.rfind("cuda:", 0) != 0)
    return InvalidArgument("strata.device: '{}' is not a device; use \"auto\", \"cpu\", \"cuda\", \"cuda:N\" or "
                           "\"fake[:GB/s]\"", spec);
  if (!torch::cuda::is_available())
    return Error(StatusCode::kFailedPrecondition,
                 "strata.device '{}': no CUDA device is usable here (a CPU build of Strata, LibTorch without CUDA, "
                 "or no GPU); use \"cpu\"", spec);
  int index = local_rank;
  if (spec.size() > 5) {
    char* end = nullptr;
    index = static_cast<int>(std::strtol(spec.c_str() + 5, &end, 10));
    if (*end != '\0' || index < 0) return InvalidArgument("strata.device: '{}' has no valid device index", spec);
  }
  const int count = static_cast<int>(torch::cuda::device_count());
  if (index >= count)
    return InvalidArgument("strata.device '{}': device {} does not exist ({} visible)", spec, index, count);
#if STRATA_CUDA_BUILD
  STRATA_ASSIGN_OR_RETURN(auto nccl, cuda::MakeNcclCommunicator(host, index));
  cuda::StreamCollectives* streams = nccl->stream_collectives();
  out.collectives = std::move(nccl);
  STRATA_ASSIGN_OR_RETURN(out.device, MakeCudaDevice(index, streams, out.collectives.get()));
  return out;
#else
  return Error(StatusCode::kFailedPrecondition, "strata.device '{}': this is a CPU build of Strata; configure with "
               "-DSTRATA_CUDA=ON for GPUs, or set strata.device=cpu", spec);
#endif
}

}  // namespace strata
