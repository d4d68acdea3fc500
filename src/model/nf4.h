// NF4 with double quantisation (QLoRA's 4-bit NormalFloat, as bitsandbytes stores it with
// quant_type "nf4", blocksize 64, compress_statistics): Note [NF4] in nf4.cc.
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata::model {

struct Nf4Tensor {
  std::vector<int64_t> shape;
  // uint8 [ceil(n / 2)]: one 4-bit code per element, element 2i in the high nibble of byte i.
  torch::Tensor packed;
  // uint8 [ceil(n / 64)]: each 64-element block's absmax minus `offset`, in the 8-bit dynamic
  // code, scaled per 256 of them by `absmax2`.
  torch::Tensor absmax_q;
  torch::Tensor absmax2;  // fp32 [ceil(ceil(n / 64) / 256)]
  float offset = 0;       // the mean of the blocks' absmax
  int64_t numel() const;
  int64_t bytes() const;  // what it occupies: packed + absmax_q + absmax2 + offset
};

// The 16 NF4 values (ascending, -1 .. 1) and bitsandbytes' signed 8-bit dynamic code (256
// values, ascending), fp32.
const torch::Tensor& Nf4Code();
const torch::Tensor& DynamicCode();

// `w` (any float dtype, on the CPU) quantised; its bytes are bitsandbytes' quantize_4bit.
Nf4Tensor QuantizeNf4(const torch::Tensor& w);
// Back to `dtype`: code * absmax per block, the absmax from its 8-bit code (as bitsandbytes'
// dequantize_4bit).
torch::Tensor DequantizeNf4(const Nf4Tensor& q, torch::ScalarType dtype = torch::kFloat32);

// q as the flat group stores it (Note [NF4 base] in nf4_blob.h).
std::vector<std::byte> Nf4Blob(const Nf4Tensor& q);
// The code tables on the device that dequantises.
struct Nf4Tables {
  torch::Tensor nf4, dynamic;  // fp32 [16], [256]
  static Nf4Tables On(const torch::Device& device);
};
// The n elements of `blob` (uint8, on any device, at least Nf4BlobBytes(n)) into `out` (n
// elements of any float dtype, on the blob's device): DequantizeNf4's values, bitwise.
void DequantizeNf4Blob(const torch::Tensor& blob, int64_t n, torch::Tensor out, const Nf4Tables& tables);

}  // namespace strata::model
