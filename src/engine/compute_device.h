// ComputeDevice: where the engine's blocks run. The host itself (a CPU build, or
// strata.device "cpu"), or a CUDA device. The engine keeps every state on the host (pinned
// buffers, the CPU tier, NVMe) and moves only what a block needs: working weights in, by a
// host -> device copy before the all-gather; gradient shards out, by a device -> host copy
// once their reduce-scatter has finished. Collectives on device buffers go through the
// device's communicator (NCCL on a GPU; on the host, the host communicator itself).
//
// Everything here goes through LibTorch's device-generic API (tensors, c10::Stream), so it
// needs no CUDA header, the CPU tests run the same code path, and a CUDA build only has to
// link LibTorch's CUDA libraries.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "strata/communicator.h"
#include "strata/dtype.h"
#include "strata/pinned_pool.h"
#include "strata/status.h"

namespace strata {

class ComputeDevice {
 public:
  // `collectives`: the communicator for device buffers (borrowed). On the host it is the
  // host communicator; a CUDA device needs one that takes device pointers (NCCL).
  ComputeDevice(torch::Device device, Communicator* collectives) : device_(device), collectives_(collectives) {}

  // "cpu", "cuda[:N]" (N defaults to LOCAL_RANK), or "auto" (cuda when a CUDA device is
  // usable, else cpu). An error names the value, or says what
  // is missing (a CPU-only build of LibTorch, no device).
  static StatusOr<torch::Device> Parse(const std::string& spec, int local_rank);
  // Whether `spec` names a GPU here ("cuda[:N]", or "auto" where a CUDA device is usable),
  // without opening anything: what the compute dtype's "auto" needs to know.
  static bool NamesGpu(const std::string& spec);

  // Tests: the host, driven as if it were a separate device (weights copied into a device
  // shard buffer, gradients copied out), so CPU runs check the path a GPU takes.
  static ComputeDevice HostAsDevice(Communicator* collectives) {
    ComputeDevice d(torch::Device(torch::kCPU), collectives);
    d.as_device_ = true;
    return d;
  }

  const torch::Device& device() const { return device_; }
  // True when blocks run on the host itself: collectives read host memory directly.
  bool is_host() const { return device_.is_cpu() && !as_device_; }
  Communicator* collectives() const { return collectives_; }

  // Copies dst.nbytes() bytes from host memory `src` into `dst` (on this device). When it
  // returns, `src` may be reused. Ordered before the device work queued after it.
  Status CopyIn(const torch::Tensor& dst, const void* src) const;
  // Copies `src` (on this device) into host memory `dst` once the work queued before it has
  // produced it; `dst` holds the bytes when it returns.
  Status CopyOut(void* dst, const torch::Tensor& src) const;
  // "cpu", or the GPU's product name.
  std::string Name() const;
  // The device's stated dense peak in TFLOPS for `dtype` (bf16/fp16 tensor cores, fp32
  // without TF32) from its product name; 0 where not known (the host, unlisted GPUs).
  double PeakTflops(DType dtype) const;
  // Page-locks host memory the device copies from and to: mlock on the host,
  // cudaHostRegister for a CUDA device (so copies run at full speed, asynchronously).
  std::unique_ptr<HostPinner> MakeHostPinner() const;
  // Waits for the device work queued so far on LibTorch's current stream (not the whole
  // device), so a collective on another stream may read or overwrite its buffers. No-op on
  // the host.
  Status WaitForCompute() const;

 private:
  torch::Device device_;
  Communicator* collectives_;
  bool as_device_ = false;
};

// A compute device with the communicator it owns (NCCL on a GPU, met through `host`; none
// on the host, whose collectives are `host`'s). A GPU needs a CUDA build of Strata.
struct OpenedDevice {
  explicit OpenedDevice(Communicator* host) : device(torch::Device(torch::kCPU), host) {}
  std::unique_ptr<Communicator> collectives;
  ComputeDevice device;
};
StatusOr<std::unique_ptr<OpenedDevice>> OpenComputeDevice(const std::string& spec, int local_rank, Communicator* host);

}  // namespace strata
