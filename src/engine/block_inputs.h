// Note [Block inputs in the tiers]: with recompute, all a block keeps from its forward for its
// backward is its input, the activation checkpoint: a [B, T, C] tensor per block and
// micro-batch (every micro-batch's at once layer-major). strata.block_inputs says where it
// waits, a tier like those of the weights:
//   device  where it was made (on the host device, host memory);
//   host    off the host: copied out to host memory after the block's forward, on the copy
//           queue after the compute that made it, and back in before the block's backward;
//   nvme    the rank's swap file, through the store: written after the forward (from a
//           device, once its copy out to host memory has landed) and read back one visit
//           ahead of the backward that needs it, so the read runs beside the visit before.
// Block 0's input is the tokens; it stays. The bytes are copied exactly, so every placement
// gives the same bits as `device`. An input whose write has not completed when it is needed
// is used from the memory it is being written from (no read of a write in flight).
#pragma once

#include <cstddef>
#include <vector>

#include <torch/types.h>

#include "src/config/train_config.h"
#include "src/device/compute_device.h"
#include "src/engine/step_stats.h"
#include "strata/event.h"
#include "strata/status.h"
#include "strata/tiered_store.h"

namespace strata {

class BlockInputStash {
 public:
  // `passes`: the step's passes through each block (micro-batch-major 1: each micro-batch's
  // backward ends before the next forward; layer-major one per micro-batch, or 1 fused).
  // `bytes`: adds the bytes written to and read from the swap file (StepStats).
  BlockInputStash(ComputeDevice& dev, TieredStore* store, BlockInputsAt where, int blocks, size_t passes,
                  StepStats* bytes);
  BlockInputStash(const BlockInputStash&) = delete;
  BlockInputStash& operator=(const BlockInputStash&) = delete;
  ~BlockInputStash();  // waits for the copies and writes still reading or writing its memory

  // After block b's forward of pass p: *input (its saved input) moves to the tier; *input is
  // left empty unless it stays where it is.
  Status Keep(int b, size_t p, torch::Tensor* input);
  // Before block b's backward of pass p: its input back in *into (on the compute device), and
  // the next visit's (b, p + 1, else b - 1) brought closer.
  Status Fetch(int b, size_t p, torch::Tensor* into);
  // Waits for the writes to the swap file in flight; their memory stays held until the next Keep
  // or Fetch lets go of it (what the tests wait for, where a sleep would guess the disk's speed).
  Status WaitForWrites();

 private:
  struct Held {
    torch::Tensor device;  // off the host: the forward's tensor until its copy out has read it
    torch::Tensor host;    // in host memory: the copy out, or (nvme) until its write completed
    Event moved;           // the copy out (off the host)
    Event written;         // nvme: the write to the swap file
    bool write_started = false;
    torch::Tensor back;         // on its way back in host memory: h.host, or read into (nvme)
    torch::Tensor back_device;  // off the host: copied in from `back`
    Event read, copied_in;
    bool coming = false;        // Prepare ran
    std::vector<int64_t> sizes;  // the input's shape and type, for a read from disk
    torch::ScalarType dtype = torch::kFloat32;
    TensorHandle extent;        // nvme
  };
  bool Moves(int b) const { return b > 0 && where_ != BlockInputsAt::kDevice; }
  Status StartWrite(int b, size_t p, Held& h);
  // Starts bringing (b, p) back: the read (nvme), the copy in (off the host) once it can.
  Status Prepare(int b, size_t p);
  // Starts what became possible (writes after copies out, copies in after reads) and lets go
  // of the memory no longer needed.
  Status Pump();

  ComputeDevice& dev_;
  TieredStore* store_;
  const BlockInputsAt where_;
  const bool on_host_;  // the compute device is the host
  StepStats* bytes_;
  std::vector<std::vector<Held>> held_;  // [block][pass]
};

}  // namespace strata
