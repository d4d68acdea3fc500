// ComputeDevice: where the engine's blocks run, and the asynchronous queues that feed them.
//
// A device has four queues, each running its work in submission order:
//   compute     the LibTorch ops the engine issues (a GPU's current stream; the host itself)
//   copy in     host -> device copies of working shards
//   copy out    device -> host copies of gradient shards
//   collectives all-gather / reduce-scatter / all-reduce on device buffers
// and a host-callback thread for host work that consumes a copy (accumulating a gradient
// shard into the fp32 accumulator), off the compute thread. Every operation returns a
// Event that happens when it has completed, and takes the events it must wait for
// (`after`): the ordering between queues is stated by the engine, never implied.
//
// Semantics the engine relies on (each is a race a test on the fake device catches):
//  - host memory passed to CopyIn must not change until the copy's event happened (a pinned
//    buffer goes back to its pool only then);
//  - host memory written by CopyOut holds the bytes only once its event happened;
//  - compute issued after ComputeAfter(e) runs after e (device-side on a GPU: no host wait);
//  - a device buffer read by queued work must not be rewritten before that work's event
//    (RecordCompute() marks the compute issued so far).
//
// Implementations: the host (synchronous; blocks compute on host buffers with the host
// communicator: is_host()), a fake asynchronous device for tests and bench step (its copies
// and collectives run on threads with injected delays and poison their destination while in
// flight; compute runs on the host), and a CUDA device (LibTorch streams and events, NCCL on
// its own stream; STRATA_CUDA builds only).
#pragma once

#include <torch/types.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "strata/event.h"
#include "strata/communicator.h"
#include "strata/dtype.h"
#include "strata/host_pinner.h"
#include "strata/status.h"
#include "strata/trace.h"

namespace strata {

class ComputeDevice {
 public:
  virtual ~ComputeDevice() = default;

  // Where the tensors of running blocks live (kCPU for the host and the fake device).
  virtual torch::Device device() const = 0;
  // True when blocks run on the host on host buffers: no copies, host collectives, every
  // operation complete when it returns.
  virtual bool is_host() const = 0;
  // "cpu", "fake async (...)", or the GPU's product name.
  virtual std::string Name() const = 0;
  // The device's stated dense peak in TFLOPS for `dtype`; 0 where not known.
  virtual double PeakTflops(DType dtype) const { return 0; }
  // Bytes of device memory (0: the host's, or unknown).
  virtual uint64_t MemoryBytes() const { return 0; }
  // Page-locks host memory the device copies from and to (mlock; cudaHostRegister on a GPU).
  virtual std::unique_ptr<HostPinner> MakeHostPinner() const { return MakeMlockPinner(); }
  // The communicator for device buffers (collectives below go through it), borrowed.
  virtual Communicator* collectives() const = 0;
  // The blocks' own collectives over one group of the process mesh (Note [Process mesh]), on
  // this device's tensors, called from the thread that computes: made from `host_group`, a
  // communicator over the same ranks on host buffers. The host uses it as it is; the fake
  // device delays each call; a GPU makes an NCCL communicator over those ranks (met through
  // `host_group`) whose collectives run on the stream of the block that calls them.
  virtual StatusOr<std::shared_ptr<Communicator>> BlockGroup(std::unique_ptr<Communicator> host_group) {
    return std::shared_ptr<Communicator>(std::move(host_group));
  }

  // dst.nbytes() bytes from host `src` into device tensor `dst`, after `after`.
  virtual Event CopyIn(const torch::Tensor& dst, const void* src, const EventList& after) = 0;
  // src.nbytes() bytes from device tensor `src` into host `dst`, after `after`.
  virtual Event CopyOut(void* dst, const torch::Tensor& src, const EventList& after) = 0;
  // Collectives on device buffers (communicator.h's semantics), after `after`.
  virtual Event AllGather(const void* shard, void* full, size_t count, DType dtype, const EventList& after) = 0;
  virtual Event ReduceScatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp op,
                                    const EventList& after) = 0;
  virtual Event AllReduce(void* data, size_t count, DType dtype, ReduceOp op, const EventList& after) = 0;
  // `count` elements at `data` from rank `root` to every rank's `data`.
  virtual Event Broadcast(void* data, size_t count, DType dtype, int root, const EventList& after) = 0;
  // Compute issued from now on runs after `e` (its error, if it failed, is returned).
  virtual Status ComputeAfter(const Event& e) = 0;
  // Happens when the compute issued so far has completed.
  virtual Event RecordCompute() = 0;
  // Runs `fn` on the host-callback thread after `after`, in submission order; the event
  // carries fn's Status.
  virtual Event OnHost(std::function<Status()> fn, const EventList& after) = 0;
  // Waits for everything queued so far; the first error of any of it.
  virtual Status Synchronize() = 0;

  // Spans of the copy and collective queues go to `tracer` (may be null).
  virtual void set_tracer(Tracer* tracer) { tracer_ = tracer; }

 protected:
  Tracer* tracer_ = nullptr;
};

// The host: blocks run here on host buffers, collectives on `comm` (borrowed).
std::unique_ptr<ComputeDevice> MakeHostDevice(Communicator* comm);

// A fake asynchronous device for tests and bench step. Device memory is host memory, but
// every copy and collective runs on a queue thread: it waits for its `after` events, fills
// its destination with NaN (poison: whoever reads it too early sees garbage), sleeps, then
// does the work and completes its event. Compute runs on the caller's thread (ComputeAfter
// waits on the host). Collectives use `comm` (borrowed; its own, not the engine's host
// communicator, which another thread uses meanwhile).
// Bytes the fake device's copies moved (tests compare them with EstimateLinkTraffic).
struct LinkCounters {
  std::atomic<uint64_t> in{0}, out{0};
  std::atomic<uint64_t> pinned{0};  // bytes the device's pinners were asked to lock, and did
  // The blocks' group collectives (BlockGroup): bytes put into all-reduces, all-gathers and
  // all-to-alls (each rank's whole send buffer).
  std::atomic<uint64_t> group_summed{0}, group_gathered{0}, group_exchanged{0};
};
struct FakeDeviceOptions {
  uint64_t seed = 1;              // random delays: uniform in [0, max_delay_us] per operation
  int max_delay_us = 0;
  double copy_gbps = 0;           // > 0: a copy also takes bytes / copy_gbps (a modelled link)
  bool poison = true;
  bool refuse_pinning = false;    // its pinner refuses, as cudaHostRegister can: pinned memory stays pageable
  std::shared_ptr<LinkCounters> counters = nullptr;  // optional: added to as each copy is submitted
};
std::unique_ptr<ComputeDevice> MakeFakeAsyncDevice(Communicator* comm, FakeDeviceOptions options);

// Wraps a device so that every operation completes before it returns: the synchronous
// schedule, as a baseline (bench step) with the same costs. `inner` is owned.
std::unique_ptr<ComputeDevice> MakeSynchronousDevice(std::unique_ptr<ComputeDevice> inner);

// strata.device: "cpu", "cuda[:N]" (N defaults to LOCAL_RANK), or "auto" (cuda when a CUDA
// device is usable, else cpu). A GPU gets its own communicator (NCCL), met through `host`.
// An error names the value, or says what is missing.
struct OpenedDevice {
  std::unique_ptr<Communicator> collectives;  // owned when the device needs its own
  std::unique_ptr<ComputeDevice> device;
};
StatusOr<OpenedDevice> OpenComputeDevice(const std::string& spec, int local_rank, Communicator* host);
// Whether `spec` names a GPU here ("cuda[:N]", or "auto" where a CUDA device is usable),
// without opening anything: what the compute dtype's "auto" needs to know.
bool SpecNamesGpu(const std::string& spec);
// Memory of the GPU `spec` gives local rank `local_rank`, read without opening the device
// (no NCCL), so that `strata estimate` on a GPU machine plans for the GPU train would open;
// 0 where none is visible, `spec` names none, or this is a CPU build.
uint64_t VisibleDeviceMemory(const std::string& spec, int local_rank);

}  // namespace strata
