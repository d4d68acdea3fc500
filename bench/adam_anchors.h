// Hardware anchors for `strata bench adam`, measured in the same run as the optimizer:
//  - the roofline: a memory-only pass with exactly AdamW's access pattern (read p, g, m, v;
//    write p, m, v; optionally write a 2-byte copy), no arithmetic, same vector width,
//    same thread split and same store kinds as the kernel (streaming stores for the copy);
//  - STREAM triad (a = b + s * c), the usual reference figure;
//  - oneDNN's fp32 -> bf16 reorder and L2-norm reduction beside the hand-written ones, to
//    decide which implementation Strata keeps (see the bench output and the issue note).
// All functions run on `threads` OpenMP threads and allocate nothing (oneDNN objects are
// created once by the caller-owned OneDnnTransforms).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace strata::bench {

// half may be null (the fp32-only pattern). Data is left as it was.
void RooflinePass(float* p, const float* g, float* m, float* v, uint16_t* half, size_t n, int threads);

// a[i] = b[i] + 3 * c[i]. Counted as 12 B/element (STREAM's convention: no write-allocate).
void TriadPass(float* a, const float* b, const float* c, size_t n, int threads);

// The library's hand-written fp32 -> bf16 cast (CastFp32ToBf16), split over threads.
void HandCastFp32ToBf16(const float* src, uint16_t* dst, size_t n, int threads);

// oneDNN primitives bound to fixed buffers (built once, executed many times). Null when
// oneDNN is not compiled in.
class OneDnnTransforms {
 public:
  virtual ~OneDnnTransforms() = default;
  virtual void ReorderFp32ToBf16() = 0;  // src -> dst
  virtual double SumSquares() = 0;       // of src (f32 accumulation inside oneDNN)
};
std::unique_ptr<OneDnnTransforms> MakeOneDnnTransforms(const float* src, uint16_t* dst, size_t n);

}  // namespace strata::bench
