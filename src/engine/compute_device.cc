#include "src/engine/compute_device.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include <cstring>

#if STRATA_CUDA_BUILD
#include "strata/cuda/cuda.h"
#endif

namespace strata {
namespace {

template <typename F>
Status DeviceCall(const char* what, const torch::Device& device, F&& f) {
  try {
    f();
    return Status();
  } catch (const c10::Error& e) {
    return Error(StatusCode::kInternal, "{} on {}: {}", what, device.str(), e.what_without_backtrace());
  }
}

}  // namespace

StatusOr<torch::Device> ComputeDevice::Parse(const std::string& spec, int local_rank) {
  if (spec == "cpu" || (spec == "auto" && !torch::cuda::is_available())) return torch::Device(torch::kCPU);
  if (spec == "auto") return Parse("cuda", local_rank);
  if (spec != "cuda" && spec.rfind("cuda:", 0) != 0)
    return InvalidArgument("strata.device: '{}' is not a device; use \"auto\", \"cpu\", \"cuda\" or \"cuda:N\"", spec);
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
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

bool ComputeDevice::NamesGpu(const std::string& spec) {
  if (spec == "auto") return torch::cuda::is_available();
  return spec.rfind("cuda", 0) == 0;
}

Status ComputeDevice::CopyIn(const torch::Tensor& dst, const void* src) const {
  if (device_.is_cpu()) {
    std::memcpy(dst.data_ptr(), src, dst.nbytes());
    return Status();
  }
  return DeviceCall("host -> device copy", device_, [&] {
    // A blocking copy: `src` (a pinned lease) goes back to its pool as soon as this returns.
    dst.copy_(torch::from_blob(const_cast<void*>(src), dst.sizes(), dst.options().device(torch::kCPU)));
  });
}

Status ComputeDevice::CopyOut(void* dst, const torch::Tensor& src) const {
  if (device_.is_cpu()) {
    std::memcpy(dst, src.data_ptr(), src.nbytes());
    return Status();
  }
  return DeviceCall("device -> host copy", device_, [&] {
    torch::from_blob(dst, src.sizes(), src.options().device(torch::kCPU)).copy_(src);
  });
}

std::string ComputeDevice::Name() const {
#if STRATA_CUDA_BUILD
  if (device_.is_cuda()) return cuda::DeviceName(device_.index());
#endif
  return device_.str();
}

double ComputeDevice::PeakTflops(DType dtype) const {
  // Dense (no sparsity) figures from NVIDIA's data sheets.
  struct Peak {
    const char* name_part;
    double half, fp32;
  };
  static const Peak kPeaks[] = {{"H100 PCIe", 756.0, 51.0}, {"H100", 989.4, 66.9}, {"H200", 989.4, 66.9},
                                {"H800", 989.4, 66.9},     {"A100", 312.0, 19.5}, {"L40S", 362.05, 91.6}};
  if (!device_.is_cuda()) return 0;
  const std::string name = Name();
  for (const Peak& p : kPeaks)
    if (name.find(p.name_part) != std::string::npos) return dtype == DType::kF32 ? p.fp32 : p.half;
  return 0;
}

std::unique_ptr<HostPinner> ComputeDevice::MakeHostPinner() const {
#if STRATA_CUDA_BUILD
  if (device_.is_cuda()) return cuda::MakeCudaHostPinner();
#endif
  return MakeMlockPinner();
}

Status ComputeDevice::WaitForCompute() const {
  if (device_.is_cpu()) return Status();
  return DeviceCall("waiting for the compute stream", device_, [&] {
    c10::impl::VirtualGuardImpl guard(device_.type());
    guard.getStream(device_).synchronize();
  });
}

StatusOr<std::unique_ptr<OpenedDevice>> OpenComputeDevice(const std::string& spec, int local_rank,
                                                          Communicator* host) {
  STRATA_ASSIGN_OR_RETURN(torch::Device d, ComputeDevice::Parse(spec, local_rank));
  auto out = std::make_unique<OpenedDevice>(host);
  if (d.is_cpu()) return out;
#if STRATA_CUDA_BUILD
  auto nccl = cuda::MakeNcclCommunicator(host, d.index());
  if (!nccl.ok()) return nccl.status().WithContext(fmt::format("NCCL on {}", d.str()));
  out->collectives = std::move(nccl).value();
  out->device = ComputeDevice(d, out->collectives.get());
  return out;
#else
  return Error(StatusCode::kFailedPrecondition, "strata.device '{}': this is a CPU build of Strata; configure with "
               "-DSTRATA_CUDA=ON for GPUs, or set strata.device=cpu", spec);
#endif
}

}  // namespace strata
