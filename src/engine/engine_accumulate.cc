// Note [Accumulation in place]: alone on the host device a block's reduced gradient is its
// flattened parameter gradients (no collective, no copy to make), so instead of flattening
// them into the gradient buffer (a pass that reads each gradient and writes 4 B/param) and
// then adding the buffer into the accumulator (reading it again), each parameter's gradient
// is added into its range of the accumulator straight from its .grad, bf16 gradients widened
// in the kernel. The same fused multiply-add on the same values (a bf16 value widens to fp32
// exactly; what no gradient covers, padding, is written zero on the first micro-batch and
// then adds zero): bitwise the flattening path, at about half its memory traffic per
// micro-batch, which with many short micro-batches is what a host step spends most on.
#include <cstring>
#include <limits>

#include "src/engine/engine_impl.h"

namespace strata {

bool Engine::Impl::AccumulatesInPlace(int b) const {
  if (!io.dev->is_host() || io.comm->world_size() != 1 || plan.device_accum) return false;
  if (plan.compute != DType::kF32 && plan.compute != DType::kBF16) return false;
  if (model.tie && b == model.tie->owner_block && !plan.lora) return false;  // the head's share joins the flat buffer
  const BlockRuntime& br = model.blocks[b];
  const ElementRange acc = plan.blocks[b].grad;
  const torch::ScalarType scalar = compute_scalar();
  for (size_t i = 0; i < br.params.size(); ++i) {
    const ParamSlot& s = br.slots[i];
    if (s.offset + s.stored <= acc.begin || s.offset >= acc.begin + acc.len) continue;
    const torch::Tensor& g = br.params[i].grad();
    if (!g.defined() || !g.is_contiguous() || g.scalar_type() != scalar || g.numel() != s.numel) return false;
  }
  return true;
}

Status Engine::Impl::AccumulateInPlace(int b, const MicroBatch& mb) {
  UpdateMode& mode = *optimizer.mode;
  STRATA_RETURN_IF_ERROR(mode.BeforeAccumulate(b));
  BlockRuntime& br = model.blocks[b];
  const ElementRange range = plan.blocks[b].grad;
  const bool bf16_acc = plan.gsize == 2;
  const auto inv = static_cast<float>(1.0 / static_cast<double>(cfg.grad_accum));
  const AdamOptions threads{.num_threads = at::get_num_threads()};
  // acc[from, to) in accumulator elements (relative to range.begin).
  auto zero = [&](int64_t from, int64_t to) {
    if (to > from) std::memset(br.grad + from * plan.gsize, 0, static_cast<size_t>(to - from) * plan.gsize);
  };
  Tracer::Span span(io.tracer, Track::kCompute, "accumulate g" + std::to_string(b));
  STRATA_RETURN_IF_ERROR(TorchCall("accumulate gradients in place", [&] {
    int64_t covered = range.begin;  // group elements written so far
    for (size_t i : br.by_offset) {
      const ParamSlot& s = br.slots[i];
      torch::Tensor& param = br.params[i];
      const int64_t lo = std::max(s.offset, range.begin), hi = std::min(s.offset + s.stored, range.begin + range.len);
      if (lo < hi) {
        if (mb.first) zero(covered - range.begin, lo - range.begin);
        const auto n = static_cast<size_t>(hi - lo), at = static_cast<size_t>(lo - range.begin);
        const std::byte* part = static_cast<const std::byte*>(param.grad().data_ptr()) + (lo - s.offset) * plan.dsize;
        if (plan.compute == DType::kF32) {
          const std::span<const float> p(reinterpret_cast<const float*>(part), n);
          if (bf16_acc) AccumulateGradient({reinterpret_cast<uint16_t*>(br.grad) + at, n}, p, inv, mb.first, threads);
          else AccumulateGradient({reinterpret_cast<float*>(br.grad) + at, n}, p, inv, mb.first, threads);
        } else {
          const std::span<const uint16_t> p(reinterpret_cast<const uint16_t*>(part), n);
          if (bf16_acc) AccumulateBf16Gradient({reinterpret_cast<uint16_t*>(br.grad) + at, n}, p, inv, mb.first, threads);
          else AccumulateBf16Gradient({reinterpret_cast<float*>(br.grad) + at, n}, p, inv, mb.first, threads);
        }
        covered = std::max(covered, hi);
      }
      param.mutable_grad().reset();
    }
    if (mb.first) zero(covered - range.begin, range.len);
  }));
  if (PlantsOverflow(b, mb) && range.len > 0) {
    if (bf16_acc) reinterpret_cast<uint16_t*>(br.grad)[0] = 0x7f80;  // +Inf
    else reinterpret_cast<float*>(br.grad)[0] = std::numeric_limits<float>::infinity();
  }
  if (mb.last) mode.GradientFinal(b, Event());
  return Status();
}

}  // namespace strata
