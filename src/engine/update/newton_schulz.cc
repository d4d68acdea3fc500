// Newton-Schulz's orthogonalisation (newton_schulz.h): DeepSpeed 0.19.8's
// zeropower_via_gram_newtonschulz and zeropower_via_newtonschulz5 and torch.optim.Muon's
// _zeropower_via_newtonschulz, in their operation order (Python's `c * A @ A` is (c A) A).
#include "src/engine/update/newton_schulz.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/types.h>

#include <cmath>
#include <cstring>

#include "src/device/torch_call.h"

namespace strata {
namespace {

constexpr double kA = 3.4445, kB = -4.7750, kC = 2.0315;
constexpr int kSteps = 5;
constexpr double kEps = 1e-7;

// The matrix's Frobenius norm as Tensor.norm() computes it (torch.linalg.vector_norm, 2).
torch::Tensor FrobeniusNorm(const torch::Tensor& x, bool keepdim) {
  return torch::linalg_vector_norm(x, 2, std::vector<int64_t>{-2, -1}, keepdim, std::nullopt);
}

// DeepSpeed's standard iteration on X (already normalised, in its compute dtype).
torch::Tensor StandardIterations(torch::Tensor x) {
  for (int i = 0; i < kSteps; ++i) {
    const torch::Tensor a = x.matmul(x.mT());
    const torch::Tensor b = a * kB + (a * kC).matmul(a);
    x = x * kA + b.matmul(x);
  }
  return x;
}

// ns_compute_dtype("gram") as DeepSpeed's accelerators answer it: fp16 on a GPU, and on the
// CPU where oneDNN has fp16 kernels (AVX512-FP16 or AMX-FP16: the CPU accelerator asks
// torch.ops.mkldnn._is_mkldnn_fp16_supported, the same operator asked here), else fp32.
torch::Dtype GramComputeType(const c10::Device& device) {
  if (device.is_cuda()) return torch::kFloat16;
  static const bool cpu_fp16 = [] {
    return c10::Dispatcher::singleton()
        .findSchemaOrThrow("mkldnn::_is_mkldnn_fp16_supported", "")
        .typed<bool()>()
        .call();
  }();
  return cpu_fp16 ? torch::kFloat16 : torch::kFloat32;
}

// zeropower_via_gram_newtonschulz: iterate on R = X X^T (n x n) when X is wide, restarting
// at iteration 2; in GramComputeType.
torch::Tensor GramNewtonSchulz(const torch::Tensor& g, bool tall, torch::Dtype compute) {
  torch::Tensor x = tall ? g.mT() : g;
  const int64_t n = x.size(-2), m = x.size(-1);
  x = (x / (FrobeniusNorm(x, true) + kEps)).to(compute);
  if (m <= n) {
    x = StandardIterations(x);
    return tall ? x.mT() : x;
  }
  torch::Tensor r = x.matmul(x.mT()), q;
  constexpr int kRestartAt = 2;
  for (int i = 0; i < kSteps; ++i) {
    if (i == kRestartAt) {
      x = q.matmul(x);
      r = x.matmul(x.mT());
      q = torch::Tensor();
    }
    const torch::Tensor z = r * kB + (r * kC).matmul(r);
    if (!q.defined()) {
      q = z.clone();
      q.diagonal().add_(kA);
    } else {
      q = q * kA + z.matmul(q);
    }
    if (i < kSteps - 1 && i + 1 != kRestartAt) {
      const torch::Tensor rz = r * kA + z.matmul(r);
      r = rz * kA + z.matmul(rz);
    }
  }
  return tall ? x.mT().matmul(q.mT()) : q.matmul(x);
}

// zeropower_via_newtonschulz5, in bf16.
torch::Tensor StandardNewtonSchulz(const torch::Tensor& g, bool tall) {
  torch::Tensor x = g.to(torch::kBFloat16);
  if (tall) x = x.mT();
  x = StandardIterations(x / (FrobeniusNorm(x, true) + kEps));
  return tall ? x.mT() : x;
}

// torch.optim.Muon's _zeropower_via_newtonschulz (bf16, the norm clamped at eps, addmm).
torch::Tensor TorchNewtonSchulz(const torch::Tensor& g, bool tall) {
  torch::Tensor x = g.to(torch::kBFloat16);
  if (tall) x = x.t();
  x.div_(FrobeniusNorm(x, false).clamp_min(kEps));
  for (int i = 0; i < kSteps; ++i) {
    const torch::Tensor gram = x.matmul(x.t());
    const torch::Tensor update = torch::addmm(gram, gram, gram, kB, kC);
    x = torch::addmm(x, update, x, kA);
  }
  return tall ? x.t() : x;
}

double AspectRatioScale(int64_t rows, int64_t cols) {
  return rows > cols ? std::sqrt(static_cast<double>(rows) / static_cast<double>(cols)) : 1.0;
}

}  // namespace

double MuonLrRatio(MuonNs ns, int64_t rows, int64_t cols) {
  return ns == MuonNs::kTorch ? AspectRatioScale(rows, cols) : 1.0;
}

Status OrthogonalizeMatrix(MuonNs ns, const float* u, int64_t rows, int64_t cols, c10::Device device, float* out) {
  return TorchCall("Muon's Newton-Schulz iteration", [&] {
    torch::NoGradGuard no_grad;
    const torch::Tensor g =
        torch::from_blob(const_cast<float*>(u), {rows, cols}, torch::kFloat32).to(device);  // (not written)
    const bool tall = rows > cols;
    torch::Tensor o;
    if (ns == MuonNs::kTorch) {
      o = TorchNewtonSchulz(g, tall);
    } else {
      o = ns == MuonNs::kGram ? GramNewtonSchulz(g, tall, GramComputeType(device))
                              : StandardNewtonSchulz(g, tall);
      o = o * AspectRatioScale(rows, cols);  // (in the iteration's dtype, as muon_update scales it)
    }
    const torch::Tensor host = o.to(torch::kFloat32).to(torch::kCPU).contiguous();
    std::memcpy(out, host.data_ptr<float>(), static_cast<size_t>(rows * cols) * sizeof(float));
  });
}

}  // namespace strata
