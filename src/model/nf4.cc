// Note [NF4]
// QLoRA's frozen base in 4 bits: each block of 64 elements is scaled by its absolute maximum
// into [-1, 1] and every element stored as the nearest of the 16 NF4 values (quantiles of a
// normal distribution); the blocks' absmax are in turn quantised ("double quantisation"):
// their mean is subtracted and the rest stored as 8-bit codes of bitsandbytes' signed dynamic
// type, scaled per 256 of them. About 4.127 bits an element instead of 16.
// The bytes are those of bitsandbytes 0.50's quantize_4bit(quant_type "nf4", blocksize 64,
// compress_statistics) on the CPU, so a checkpoint quantised here loads there and back:
//   * 4-bit codes: the element times the reciprocal of its block's absmax (a tail block is
//     divided by its own absmax), clamped to [-1, 1], then the index of the first NF4 midpoint
//     not below it (midpoints (c[i] + c[i+1]) / 2 in fp32), so a value on a midpoint takes the
//     lower code; pairs packed high nibble first;
//   * 8-bit absmax codes: per 256, v = x * (1 / max |x|), then looked up in a table of 65536
//     bins over [-1, 1] (bin (v + 1) / 2 * 65535 + 1/2, truncated; each bin holds the code
//     nearest the bin's value), which is not always the code nearest v itself (near a
//     midpoint the bin's value decides); a block of zeros has absmax 0 and codes 0.
// The tensor arithmetic (the mean, the reciprocals) goes through LibTorch's kernels, as
// bitsandbytes' own does, so it rounds alike; the dynamic code's linspace is LibTorch's fp32
// one, written out (nf4_blob.cc).
#include "src/model/nf4.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "src/model/nf4_blob.h"
#include "strata/check.h"

namespace strata::model {
namespace {

constexpr int64_t kBlock = 64, kAbsmaxBlock = 256, kBins = 65536;

// bins[i]: the dynamic code nearest -1 + 2i / 65535 (by the midpoints, ties to the lower code).
std::vector<uint8_t> DynamicBins(const torch::Tensor& code) {
  const float* c = code.data_ptr<float>();
  std::array<float, 255> mid;
  for (int i = 0; i < 255; ++i) mid[i] = 0.5f * (c[i] + c[i + 1]);
  std::vector<uint8_t> bins(kBins);
  int k = 0;
  for (int64_t i = 0; i < kBins; ++i) {
    const float v = -1.0f + (2.0f * static_cast<float>(i)) / static_cast<float>(kBins - 1);
    while (k < 255 && mid[k] < v) ++k;
    bins[i] = static_cast<uint8_t>(k);
  }
  return bins;
}

// x's 8-bit codes per 256 (absmax2, one per 256) as described in Note [NF4].
void QuantizeAbsmax(const torch::Tensor& x, Nf4Tensor* q) {
  static const std::vector<uint8_t> bins = DynamicBins(DynamicCode());
  const int64_t n = x.numel(), blocks = (n + kAbsmaxBlock - 1) / kAbsmaxBlock;
  q->absmax_q = torch::empty({n}, torch::kUInt8);
  q->absmax2 = torch::empty({blocks}, torch::kFloat32);
  const float* in = x.data_ptr<float>();
  uint8_t* out = q->absmax_q.data_ptr<uint8_t>();
  float* scale = q->absmax2.data_ptr<float>();
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kAbsmaxBlock, end = std::min(n, begin + kAbsmaxBlock);
    float m = 0.0f;
    for (int64_t i = begin; i < end; ++i) m = std::max(m, std::fabs(in[i]));
    scale[b] = m;
    if (m == 0.0f) {
      std::fill(out + begin, out + end, uint8_t{0});
      continue;
    }
    const float inv = 1.0f / m;
    for (int64_t i = begin; i < end; ++i) {
      const float v = std::clamp(in[i] * inv, -1.0f, 1.0f);
      const float position = (v + 1.0f) * 0.5f * static_cast<float>(kBins - 1) + 0.5f;
      out[i] = bins[static_cast<uint16_t>(position)];
    }
  }
}

}  // namespace

int64_t Nf4Tensor::numel() const { return c10::multiply_integers(shape); }
int64_t Nf4Tensor::bytes() const {
  return packed.numel() + absmax_q.numel() + absmax2.numel() * 4 + static_cast<int64_t>(sizeof offset);
}

const torch::Tensor& Nf4Code() {
  static const torch::Tensor code = torch::tensor(std::vector<float>(Nf4Values().begin(), Nf4Values().end()));
  return code;
}

const torch::Tensor& DynamicCode() {
  static const torch::Tensor code =
      torch::tensor(std::vector<float>(DynamicCodeValues().begin(), DynamicCodeValues().end()));
  return code;
}

Nf4Tensor QuantizeNf4(const torch::Tensor& w) {
  STRATA_CHECK(w.is_cpu() && w.is_floating_point() && w.numel() > 0) << "NF4 of " << w.sizes() << " " << w.dtype();
  torch::NoGradGuard no_grad;
  Nf4Tensor q;
  q.shape = w.sizes().vec();
  const torch::Tensor a = w.reshape(-1).to(torch::kFloat32);
  const int64_t n = a.numel(), full = n - n % kBlock;
  torch::Tensor absmax = torch::empty({0}, torch::kFloat32), scaled = torch::empty({0}, torch::kFloat32);
  if (full > 0) {
    const torch::Tensor blocks = a.narrow(0, 0, full).view({-1, kBlock});
    absmax = std::get<0>(blocks.abs().max(-1));
    scaled = (blocks * absmax.clamp_min(1e-38).reciprocal().view({-1, 1})).clamp(-1, 1).reshape(-1);
  }
  if (full < n) {  // the tail: divided by its absmax, which is stored clamped
    const torch::Tensor tail = a.narrow(0, full, n - full);
    const torch::Tensor m = tail.abs().max().clamp_min(1e-38);
    absmax = torch::cat({absmax, m.unsqueeze(0)});
    scaled = torch::cat({scaled, (tail / m).clamp(-1, 1)});
  }
  if (scaled.numel() % 2) scaled = torch::cat({scaled, torch::zeros({1}, torch::kFloat32)});
  const torch::Tensor& code = Nf4Code();
  const torch::Tensor midpoints = (code.narrow(0, 0, 15) + code.narrow(0, 1, 15)) / 2;
  const torch::Tensor codes = torch::bucketize(scaled, midpoints, /*out_int32=*/true).to(torch::kUInt8);
  q.packed = codes.slice(0, 0, codes.numel(), 2).bitwise_left_shift(4).bitwise_or(codes.slice(0, 1, codes.numel(), 2));
  const torch::Tensor offset = absmax.mean();
  q.offset = offset.item<float>();
  QuantizeAbsmax((absmax - offset).contiguous(), &q);
  return q;
}

torch::Tensor DequantizeNf4(const Nf4Tensor& q, torch::ScalarType dtype) {
  const int64_t n = q.numel(), blocks = q.absmax_q.numel();
  STRATA_CHECK(q.packed.numel() == (n + 1) / 2 && blocks == (n + kBlock - 1) / kBlock) << "a malformed NF4 tensor";
  // The blob's decoding (nf4_blob.cc), the one loop that spells out bitsandbytes' arithmetic.
  const std::vector<std::byte> blob = Nf4Blob(q);
  torch::Tensor out = torch::empty({n}, torch::kFloat32);
  DecodeNf4Blob(blob, n, out.data_ptr<float>());
  return out.view(q.shape).to(dtype);
}

std::vector<std::byte> Nf4Blob(const Nf4Tensor& q) {
  const Nf4BlobLayout l = Nf4BlobLayout::Of(q.numel());
  std::vector<std::byte> blob(l.bytes, std::byte{0});
  std::memcpy(blob.data(), q.packed.data_ptr(), l.absmax_q_at);
  std::memcpy(blob.data() + l.absmax_q_at, q.absmax_q.data_ptr(), l.blocks);
  std::memcpy(blob.data() + l.absmax2_at, q.absmax2.data_ptr(), 4 * l.blocks2);
  std::memcpy(blob.data() + l.offset_at, &q.offset, 4);
  return blob;
}

Nf4Tables Nf4Tables::On(const torch::Device& device) { return {Nf4Code().to(device), DynamicCode().to(device)}; }

// The arithmetic of DequantizeNf4 (and so of bitsandbytes) as tensor operations, so that it
// runs where the blob is: absmax = dynamic[code] * absmax2 + offset per block, then each
// element = nf4[code] * its block's absmax, rounded once to out's dtype.
void DequantizeNf4Blob(const torch::Tensor& blob, int64_t n, torch::Tensor out, const Nf4Tables& tables) {
  const Nf4BlobLayout l = Nf4BlobLayout::Of(n);
  STRATA_CHECK(blob.scalar_type() == torch::kUInt8 && blob.numel() >= l.bytes && out.numel() == n)
      << "an NF4 blob of " << blob.numel() << " bytes for " << out.numel() << " elements";
  // The fp32 fields need not be 4-byte aligned within the group: copied out first.
  const torch::Tensor absmax2 = blob.narrow(0, l.absmax2_at, 4 * l.blocks2).clone().view(torch::kFloat32);
  const torch::Tensor offset = blob.narrow(0, l.offset_at, 4).clone().view(torch::kFloat32);
  const torch::Tensor aq = blob.narrow(0, l.absmax_q_at, l.blocks).to(torch::kLong);
  torch::Tensor absmax = tables.dynamic.index_select(0, aq) *
                         absmax2.repeat_interleave(256).narrow(0, 0, l.blocks);
  absmax = absmax + offset;
  const torch::Tensor packed = blob.narrow(0, 0, l.absmax_q_at);
  const torch::Tensor codes =
      torch::stack({packed.bitwise_right_shift(4), packed.bitwise_and(15)}, 1).view({-1}).narrow(0, 0, n);
  const torch::Tensor values = tables.nf4.index_select(0, codes.to(torch::kLong)) *
                               absmax.repeat_interleave(64).narrow(0, 0, n);
  out.view({-1}).copy_(values);
}

}  // namespace strata::model
