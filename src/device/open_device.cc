// Opening strata.device: the host, the fake asynchronous device, or a GPU with NCCL.
#include "src/device/compute_device.h"

#include <torch/cuda.h>

#if STRATA_CUDA_BUILD
#include "strata/cuda/cuda.h"
#endif

namespace strata {

#if STRATA_CUDA_BUILD
// cuda/cuda_device.cc (CUDA builds only).
StatusOr<std::unique_ptr<ComputeDevice>> MakeCudaDevice(int index, cuda::StreamCollectives* collectives,
                                                        Communicator* blocking);
#endif

bool SpecNamesGpu(const std::string& spec) {
  if (spec == "auto") return torch::cuda::is_available();
  return spec.rfind("cuda", 0) == 0;
}

namespace {

// The GPU a spec that names one gives local rank `local_rank`: N of "cuda:N", else the local
// rank; -1 where N is not a valid index.
int GpuIndexOf(const std::string& spec, int local_rank) {
  if (spec.size() <= 5) return local_rank;
  char* end = nullptr;
  const long index = std::strtol(spec.c_str() + 5, &end, 10);
  return *end != '\0' || index < 0 ? -1 : static_cast<int>(index);
}

}  // namespace

uint64_t VisibleDeviceMemory(const std::string& spec, int local_rank) {
#if STRATA_CUDA_BUILD
  if (!SpecNamesGpu(spec) || !torch::cuda::is_available()) return 0;
  const int index = GpuIndexOf(spec, local_rank);
  return index >= 0 && index < static_cast<int>(torch::cuda::device_count()) ? cuda::DeviceMemoryBytes(index) : 0;
#else
  (void)spec;
  (void)local_rank;
  return 0;
#endif
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
  const int index = GpuIndexOf(spec, local_rank);
  if (index < 0) return InvalidArgument("strata.device: '{}' has no valid device index", spec);
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
