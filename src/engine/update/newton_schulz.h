// Folder-private: Newton-Schulz's orthogonalisation of one whole matrix, Muon's o (Note [Muon]
// in update/muon_matrices.h), with LibTorch on the compute device, operation for operation as
// DeepSpeed 0.19.8's muon_update ("gram", "standard") or torch.optim.Muon ("torch") computes it.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

#include "src/config/train_config.h"
#include "strata/status.h"

namespace strata {

// o of the rows x cols matrix u (row-major fp32) into `out` (as many fp32 elements), on
// `device`; DeepSpeed's methods fold sqrt(max(1, rows / cols)) into o, as its muon_update does.
Status OrthogonalizeMatrix(MuonNs ns, const float* u, int64_t rows, int64_t cols, c10::Device device, float* out);

// The factor of lr in the matrix's step: torch.optim.Muon's adjusted lr for "torch", else 1
// (DeepSpeed's o carries it).
double MuonLrRatio(MuonNs ns, int64_t rows, int64_t cols);

}  // namespace strata
