#include "src/engine/block_inputs.h"

#include <fmt/format.h>

#include "src/device/torch_call.h"
#include "strata/check.h"

namespace strata {

BlockInputStash::BlockInputStash(ComputeDevice& dev, TieredStore* store, BlockInputsAt where, int blocks, size_t passes,
                                 StepStats* bytes)
    : dev_(dev), store_(store), where_(where), on_host_(dev.is_host()), bytes_(bytes),
      held_(static_cast<size_t>(std::max(blocks, 0))) {
  for (auto& block : held_) block.resize(passes);
}

BlockInputStash::~BlockInputStash() {
  for (auto& block : held_)
    for (Held& h : block)
      for (Event* e : {&h.moved, &h.written, &h.read, &h.copied_in}) e->Wait().IgnoreError();
}

Status BlockInputStash::Keep(int b, size_t p, torch::Tensor* input) {
  if (!Moves(b)) return Status();
  Held& h = held_[b][p];
  // The slot's last input (the micro-batch before): its write must land before this one's starts.
  if (h.write_started) STRATA_RETURN_IF_ERROR(h.written.Wait());
  const TensorHandle extent = h.extent;
  h = Held();
  h.extent = extent;
  h.sizes = input->sizes().vec();
  h.dtype = input->scalar_type();
  if (on_host_) {  // (host is the device itself here: only nvme moves)
    STRATA_RETURN_IF_ERROR(TorchCall("block input to the swap file", [&] { h.host = input->contiguous(); }));
    *input = torch::Tensor();
    STRATA_RETURN_IF_ERROR(StartWrite(b, p, h));
    return Pump();  // the inputs whose writes have landed leave memory during the forward
  }
  STRATA_RETURN_IF_ERROR(TorchCall("block input to host memory", [&] {
    h.host = torch::empty(input->sizes(), input->options().device(torch::kCPU));
  }));
  h.moved = dev_.CopyOut(h.host.data_ptr(), *input, {dev_.RecordCompute()});
  h.device = std::move(*input);  // until the copy has read it
  *input = torch::Tensor();
  return Pump();
}

Status BlockInputStash::StartWrite(int b, size_t p, Held& h) {
  if (store_ == nullptr || store_->nvme() == nullptr)
    return Error(StatusCode::kFailedPrecondition, "strata.block_inputs \"nvme\": this run has no swap file (set "
                              "zero_optimization.offload_optimizer.device or offload_param.device to \"nvme\")");
  const uint64_t bytes = h.host.nbytes();
  if (!h.extent.valid()) {
    const std::string name = fmt::format("block_inputs.b{}.p{}", b, p);
    StatusOr<TensorHandle> found = store_->Find(name);
    if (found.ok()) {
      h.extent = *found;
    } else {
      STRATA_ASSIGN_OR_RETURN(h.extent, store_->Register(name, bytes, Tier::kNvme));
    }
  }
  if (store_->bytes(h.extent) != bytes)
    return Error(StatusCode::kFailedPrecondition,
                 "block {}'s input of pass {}: {} bytes, where its swap extent holds {} (the step's batch shape changed)",
                 b, p, bytes, store_->bytes(h.extent));
  h.written = store_->Write(h.extent, {static_cast<const std::byte*>(h.host.data_ptr()), bytes});
  h.write_started = true;
  bytes_->block_inputs_written += bytes;
  return Status();
}

Status BlockInputStash::WaitForWrites() {
  for (auto& block : held_)
    for (Held& h : block)
      if (h.write_started) STRATA_RETURN_IF_ERROR(h.written.Wait());
  return Status();
}

Status BlockInputStash::Pump() {
  for (size_t b = 0; b < held_.size(); ++b) {
    for (size_t p = 0; p < held_[b].size(); ++p) {
      Held& h = held_[b][p];
      if (h.device.defined() && h.moved.Ready()) {
        STRATA_RETURN_IF_ERROR(h.moved.Wait());
        h.device = torch::Tensor();
      }
      if (where_ != BlockInputsAt::kNvme) continue;
      if (!h.write_started && !h.coming && h.host.defined() && !h.device.defined())
        STRATA_RETURN_IF_ERROR(StartWrite(static_cast<int>(b), p, h));
      if (h.write_started && !h.coming && h.host.defined() && h.written.Ready()) {
        STRATA_RETURN_IF_ERROR(h.written.Wait());
        h.host = torch::Tensor();  // on disk now
      }
      if (!on_host_ && h.coming && h.back.defined() && h.read.Ready() && !h.back_device.defined()) {
        STRATA_RETURN_IF_ERROR(h.read.Wait());
        STRATA_RETURN_IF_ERROR(TorchCall("block input to the device", [&] {
          h.back_device = torch::empty(h.back.sizes(), h.back.options().device(dev_.device()));
        }));
        h.copied_in = dev_.CopyIn(h.back_device, h.back.data_ptr(), {});
      }
    }
  }
  return Status();
}

Status BlockInputStash::Prepare(int b, size_t p) {
  if (b < 0 || static_cast<size_t>(b) >= held_.size() || p >= held_[b].size() || !Moves(b)) return Status();
  Held& h = held_[b][p];
  if (h.coming || (!h.host.defined() && !h.write_started)) return Status();  // coming, or never kept
  h.coming = true;
  if (h.host.defined()) {  // still in host memory (copied out, or its write not done): from there
    h.back = h.host;
    if (!on_host_) {
      STRATA_RETURN_IF_ERROR(TorchCall("block input to the device", [&] {
        h.back_device = torch::empty(h.back.sizes(), h.back.options().device(dev_.device()));
      }));
      h.copied_in = dev_.CopyIn(h.back_device, h.back.data_ptr(), {h.moved});
    }
    return Status();
  }
  // On disk only: read it back (off the host, Pump copies it in once the read has landed).
  const uint64_t bytes = store_->bytes(h.extent);
  STRATA_RETURN_IF_ERROR(TorchCall("block input from the swap file", [&] {
    h.back = torch::empty(h.sizes, torch::TensorOptions().dtype(h.dtype));
  }));
  STRATA_CHECK(h.back.nbytes() == bytes) << "block " << b << "'s input: " << h.back.nbytes() << " bytes, its extent "
                                         << bytes;
  h.read = store_->Read(h.extent, {static_cast<std::byte*>(h.back.data_ptr()), bytes});
  bytes_->block_inputs_read += bytes;
  return Status();
}

Status BlockInputStash::Fetch(int b, size_t p, torch::Tensor* into) {
  if (!Moves(b)) return Status();
  STRATA_RETURN_IF_ERROR(Pump());
  STRATA_RETURN_IF_ERROR(Prepare(b, p));
  Held& h = held_[b][p];
  STRATA_CHECK(h.coming) << "block " << b << "'s input of pass " << p << " fetched before it was kept";
  STRATA_RETURN_IF_ERROR(h.read.Wait());
  if (on_host_) {
    *into = h.back;
  } else {
    if (!h.back_device.defined()) {  // read from disk, not yet copied in
      STRATA_RETURN_IF_ERROR(TorchCall("block input to the device", [&] {
        h.back_device = torch::empty(h.back.sizes(), h.back.options().device(dev_.device()));
      }));
      h.copied_in = dev_.CopyIn(h.back_device, h.back.data_ptr(), {});
    }
    STRATA_RETURN_IF_ERROR(dev_.ComputeAfter(h.copied_in));
    *into = h.back_device;
  }
  // Spent: what is left is a write in flight (its memory held until it lands) or none.
  h.back = h.back_device = torch::Tensor();
  h.coming = false;
  if (!h.write_started) {
    h.write_started = true;  // (nvme: never written, and no longer needed)
    h.host = torch::Tensor();
  }
  if (where_ == BlockInputsAt::kHost) h.host = torch::Tensor();
  // The next visit's input on its way: the next pass of this block, else the block below's first.
  if (p + 1 < held_[b].size()) return Prepare(b, p + 1);
  return Prepare(b - 1, 0);
}

}  // namespace strata
