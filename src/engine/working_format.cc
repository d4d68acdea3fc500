// WorkingFormat (working_format.h).
#include "src/engine/working_format.h"

#include <algorithm>
#include <cstring>

#include "src/device/torch_call.h"
#include "strata/check.h"

namespace strata {

// Note [NF4 base] (nf4_blob.h). The staging holds the block as MakeBlock laid it out; the
// group's layout is the same order with each NF4 weight in its blob's elements, so every
// parameter moves down or stays, and walking them by offset never overwrites one not yet
// read (a blob is never longer than its weight's elements: checked).
Status WorkingFormat::Pack(int b, BlockRuntime& br, const ShardPlan& plan, torch::Tensor& flat, Blobs* blobs) {
  const int64_t esize = static_cast<int64_t>(plan.dsize);
  int64_t at = 0, decoded = 0;
  STRATA_RETURN_IF_ERROR(TorchCall("quantise NF4", [&] {
    torch::NoGradGuard no_grad;
    for (size_t i : br.by_offset) {
      ParamSlot& s = br.slots[i];
      const torch::Tensor from = flat.narrow(0, s.offset, s.numel);
      if (s.nf4) {
        std::vector<std::byte> blob = model::Nf4Blob(model::QuantizeNf4(from.view(s.shape)));
        s.stored = static_cast<int64_t>(blob.size()) / esize;
        STRATA_CHECK(s.stored <= s.numel) << s.name << ": an NF4 blob longer than the weight";
        flat.narrow(0, at, s.stored).zero_();
        blobs->push_back({i, std::move(blob)});
        s.decoded_at = decoded;
        decoded += s.numel;
      } else if (at != s.offset) {
        std::memmove(flat.data_ptr<float>() + at, from.data_ptr<float>(), s.numel * sizeof(float));
      }
      s.offset = at;
      at += s.stored;
    }
  }));
  const BlockPlan& bp = plan.blocks[b];
  STRATA_CHECK(at == bp.layout.numel && decoded <= plan.max_decoded)
      << "block " << b << " stores " << at << " elements (" << decoded << " in NF4), the plan " << bp.layout.numel;
  return Status();
}

void WorkingFormat::Place(int b, const BlockRuntime& br, const ShardPlan& plan, const Blobs& blobs,
                          const torch::Tensor& working) {
  const BlockPlan& bp = plan.blocks[b];
  const size_t dsize = plan.dsize;
  auto* dst = static_cast<std::byte*>(working.data_ptr());
  for (const auto& [i, blob] : blobs) {
    const ParamSlot& s = br.slots[i];
    const int64_t lo = std::max(s.offset, bp.working.begin), hi = std::min(s.offset + s.stored, bp.working.end());
    if (lo < hi)
      std::memcpy(dst + (lo - bp.working.begin) * dsize, blob.data() + (lo - s.offset) * dsize, (hi - lo) * dsize);
  }
}

Status WorkingFormat::Allocate(const ShardPlan& plan, torch::Device device, torch::ScalarType compute,
                               MemoryLedger* ledger) {
  return TorchCall("decode buffers", [&] {
    for (int i = 0; i < plan.decode_slots(); ++i) {
      decoded_.push_back(torch::empty({plan.max_decoded}, torch::TensorOptions().device(device).dtype(compute)));
      ledger->Add(StateKind::kGatherBuffers, Tier::kDevice, plan.max_decoded * plan.dsize);
    }
    if (plan.decode_slots() > 0) tables_ = model::Nf4Tables::On(device);
  });
}

void WorkingFormat::Bind(int b, BlockRuntime& br, const torch::Tensor& full, Tracer* tracer) {
  Tracer::Span span(tracer, Track::kCompute, br.nf4 ? "dequantise g" + std::to_string(b) : std::string());
  torch::Tensor decoded;
  if (br.nf4) decoded = decoded_[next_decode_++ % decoded_.size()];
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < br.params.size(); ++i) {
    const ParamSlot& s = br.slots[i];
    if (!s.nf4) {
      br.params[i].set_data(full.narrow(0, s.offset, s.numel).view(s.shape));
      continue;
    }
    torch::Tensor out = decoded.narrow(0, s.decoded_at, s.numel);
    model::DequantizeNf4Blob(full.narrow(0, s.offset, s.stored).view(torch::kUInt8), s.numel, out, tables_);
    br.params[i].set_data(out.view(s.shape));
  }
}

}  // namespace strata
