// Note [NF4 base]
// QLoRA's frozen base (strata.lora.base_dtype "nf4"): each layer's seven projection weights
// are kept, in every tier and on the wire, as one blob of bytes each inside the block's flat
// group, in place of their compute-dtype elements:
//   [packed codes (n + 1) / 2 | absmax codes ceil(n / 64) | absmax2 fp32 x ceil(blocks / 256)
//    | offset fp32 | zeros to a multiple of 4 bytes]
// (bitsandbytes' quantize_4bit bytes, nf4.h), so a blob is a whole number of compute-dtype
// elements (2 or 4 bytes) and the group stays [frozen | trainable adapters]. Only the gathered
// block is dequantised, into a buffer of its own, for compute. Torch-free: the plan and the
// export size and decode blobs without LibTorch.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace strata::model {

struct Nf4BlobLayout {
  int64_t n = 0, blocks = 0, blocks2 = 0;  // elements, 64-element blocks, 256-block groups
  int64_t absmax_q_at = 0, absmax2_at = 0, offset_at = 0, bytes = 0;  // packed codes at 0
  static Nf4BlobLayout Of(int64_t n);
};
inline int64_t Nf4BlobBytes(int64_t n) { return Nf4BlobLayout::Of(n).bytes; }

// The 16 NF4 values, ascending, and bitsandbytes' signed 8-bit dynamic code (256 values,
// ascending), as fp32.
const std::array<float, 16>& Nf4Values();
const std::array<float, 256>& DynamicCodeValues();

// The n elements a blob holds, as fp32 (bitsandbytes' dequantize_4bit, bitwise).
void DecodeNf4Blob(std::span<const std::byte> blob, int64_t n, float* out);

}  // namespace strata::model
