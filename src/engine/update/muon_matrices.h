// Folder-private: which of a block's tensors Muon updates as matrices, and where each lies
// (Note [Muon]). Torch-free.
//
// Note [Muon]
// optimizer.type "Muon" is DeepSpeed 0.19.8's MuonWithAuxAdam: every parameter of at least
// two dimensions whose name (transformers') holds neither "embed" nor "lm_head" takes Muon,
// the rest AdamW (its "adam" half). Muon per matrix, as torch.optim.Muon and DeepSpeed's
// muon_update compute it:
//   m = lerp(m, g, 1 - momentum);  u = lerp(g, m, momentum) (Nesterov);
//   o = NS(u), Newton-Schulz's orthogonalisation of the WHOLE matrix;
//   p = p (1 - lr wd) - lr ratio o,  ratio = sqrt(max(1, rows / cols)).
// Element-wise but for NS, which needs the whole matrix: ZeRO cuts a matrix across
// sub-groups and ranks, and with the states on NVMe no rank holds it. So the step does it in
// two passes over the states (Engine::Impl::SetMuonUpdates): first, block by block, each
// rank computes u over its own pieces (MuonNesterov, with the update's own momentum
// arithmetic; nothing written), the ranks add their zero-filled blocks (each element comes
// from one rank, so the sum is exact), and each rank orthogonalises the matrices its range
// touches, with LibTorch on the compute device, keeping its own slices of o (4 B per element
// of its optimizer range, in host memory between the passes); then the update window runs
// the element-wise rest over each piece (UpdateRule::kMuon) and AdamW over the others, every
// state written once. The iteration is ns_method's: DeepSpeed's "gram" (fp16 where the
// device has it, else fp32) or "standard" (bf16), the ratio folded into o as DeepSpeed does;
// or "torch", torch.optim.Muon's (bf16, its eps clamp, the ratio in the lr).
#pragma once

#include <cstdint>
#include <vector>

#include "src/engine/update/tensor_pieces.h"

namespace strata {

// One matrix Muon updates: flat elements [begin, begin + rows * cols) of its block, row-major
// in transformers' shape.
struct MuonMatrix {
  int64_t begin = 0, rows = 0, cols = 0;
  double lr_ratio = 1.0;  // the factor of lr in its step (MuonLrRatio)
  int64_t end() const { return begin + rows * cols; }
};

// A block's tensors (sorted, as TensorGroups'), and for each the matrix it is (an index into
// `matrices`) or -1: an AdamW parameter.
struct MuonTensors {
  TensorRanges ranges;
  std::vector<int> matrix;
  std::vector<MuonMatrix> matrices;
};

}  // namespace strata
