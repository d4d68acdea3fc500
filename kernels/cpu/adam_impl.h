// Folder-private: the AdamW and gradient-norm kernels, written once as templates over a
// small "ops" type per ISA (adam_scalar.cc, adam_avx2.cc, adam_avx512.cc instantiate them
// with their own -m flags), and the per-ISA entry points that adam.cc dispatches to.
//
// Everything templated lives in an anonymous namespace on purpose: each ISA translation
// unit gets its own internal copy, so the linker can never merge an AVX-512 instantiation
// into the scalar path (an ODR trap with inline functions compiled under different flags).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "moments_8bit_impl.h"
#include "strata/cast.h"
#include "strata/cpu_adam.h"

namespace strata::cpu {

enum class GradKind { kFp32, kBf16 };
enum class HalfKind { kNone, kBf16, kFp16 };
enum class MomentKind { kFp32, kBf16, k8Bit };  // how Adam's m and v are stored
enum class MasterKind { kFp32, kSplit };  // fp32 master, or bf16 working weights + low half

// One step's arguments with every per-step constant folded (computed once in adam.cc).
struct AdamArgs {
  float* p = nullptr;
  int16_t* lo = nullptr;  // MasterKind::kSplit: the master's low halves (high halves: `half`)
  float* m = nullptr;
  float* v = nullptr;
  uint16_t* m16 = nullptr;  // MomentKind::kBf16: m and v as bf16 bits
  uint16_t* v16 = nullptr;
  uint8_t* m8 = nullptr;  // MomentKind::k8Bit: codes, and one scale per kBlock8Bit elements
  uint8_t* v8 = nullptr;
  float* m8_scale = nullptr;
  float* v8_scale = nullptr;
  const float* g32 = nullptr;
  const uint16_t* g16 = nullptr;
  uint16_t* half = nullptr;
  GradKind grad_kind = GradKind::kFp32;
  HalfKind half_kind = HalfKind::kNone;
  MomentKind moment_kind = MomentKind::kFp32;
  MasterKind master_kind = MasterKind::kFp32;
  UpdateRule rule = UpdateRule::kAdam;   // Note [Update rules] in strata/cpu_adam.h
  float beta1 = 0, one_minus_beta1 = 0;  // m = beta1 * m + (1 - beta1) * g
  float beta2 = 0, one_minus_beta2 = 0;  // v = beta2 * v + (1 - beta2) * g^2
  float grad_scale = 1;                  // grad_unscale * clip_coef
  float decay = 1;                       // 1 - lr * weight_decay
  float neg_step_size = 0;               // -lr / (1 - beta1^t)
  float inv_sqrt_bc2 = 1;                // 1 / sqrt(1 - beta2^t)
  float eps = 0;
  float neg_lr = 0;                      // Lion, Adagrad: -lr
  float l2 = 0;                          // Adagrad: g += l2 * p (coupled); LAMB: u += l2 * p
  float eps_in = 0;                      // LAMB: sqrt(v + eps_in) + eps (one of the two is 0)
  // Muon: the orthogonalised update of each element (whole matrices, computed before), and
  // torch's lerp of the momentum toward the gradient by w = 1 - momentum: m + w (g - m) for
  // w < 0.5, else g + (w - 1) (g - m), as one fused multiply-add (lerp_coef: w or w - 1).
  const float* o = nullptr;
  float lerp_coef = 0;
  bool lerp_small = true;
  // MuonNesterov: torch's g.lerp(m, momentum), the same way (nesterov_coef: momentum or momentum - 1).
  float nesterov_coef = 0;
  bool nesterov_small = false;
  // MomentKind::kBf16 and k8Bit: the stochastic rounding's key and the 32-bit counter of element 0;
  // element i's counter is sr_base + i (mod 2^32). See RoundingBits.
  uint32_t sr_key = 0;
  uint32_t sr_base = 0;
};

// Per-ISA kernels over elements [begin, end) of one call (run by one thread).
// `Avx512Bf16` uses the AVX512_BF16 conversion instruction; call it only when the CPU has it.
void AdamRangeScalar(const AdamArgs& a, size_t begin, size_t end);
void AdamRangeAvx2(const AdamArgs& a, size_t begin, size_t end);
void AdamRangeAvx512(const AdamArgs& a, size_t begin, size_t end);
void AdamRangeAvx512Bf16(const AdamArgs& a, size_t begin, size_t end);

// LAMB's norm pass (Note [LAMB trust ratio]) over [begin, end): adds sum p^2 and sum u^2 (in
// double) to *w and *u; writes nothing else.
void LambSumsScalar(const AdamArgs& a, size_t begin, size_t end, double* w, double* u);
void LambSumsAvx2(const AdamArgs& a, size_t begin, size_t end, double* w, double* u);
void LambSumsAvx512(const AdamArgs& a, size_t begin, size_t end, double* w, double* u);

// Muon's direction before its orthogonalisation (MuonNesterov in strata/cpu_adam.h) over
// [begin, end) into out; reads g and m, writes nothing else.
void MuonNesterovScalar(const AdamArgs& a, size_t begin, size_t end, float* out);
void MuonNesterovAvx2(const AdamArgs& a, size_t begin, size_t end, float* out);
void MuonNesterovAvx512(const AdamArgs& a, size_t begin, size_t end, float* out);

// A split master (Note [Split master]): n fp32 values to working weights + low halves, and back.
void SplitMasterScalar(const float* p, uint16_t* w, int16_t* lo, size_t n);
void SplitMasterAvx2(const float* p, uint16_t* w, int16_t* lo, size_t n);
void SplitMasterAvx512(const float* p, uint16_t* w, int16_t* lo, size_t n);
void JoinMasterScalar(const uint16_t* w, const int16_t* lo, float* p, size_t n);
void JoinMasterAvx2(const uint16_t* w, const int16_t* lo, float* p, size_t n);
void JoinMasterAvx512(const uint16_t* w, const int16_t* lo, float* p, size_t n);

// Sum of squares in double of x[begin, end) (fp32 or bf16 bits); NaN/Inf propagate.
double SumSquaresScalar(const float* x, size_t begin, size_t end);
double SumSquaresAvx2(const float* x, size_t begin, size_t end);
double SumSquaresAvx512(const float* x, size_t begin, size_t end);
double SumSquaresBf16Scalar(const uint16_t* x, size_t begin, size_t end);
double SumSquaresBf16Avx2(const uint16_t* x, size_t begin, size_t end);
double SumSquaresBf16Avx512(const uint16_t* x, size_t begin, size_t end);

// acc[begin, end) = scale * part + (overwrite ? 0 : acc), fp32 or bf16 accumulators and parts
// (Note [Gradient accumulation]).
void AccumulateScalar(float* acc, const float* part, float scale, bool overwrite, size_t begin, size_t end);
void AccumulateScalar(uint16_t* acc, const float* part, float scale, bool overwrite, size_t begin, size_t end);
void AccumulateAvx2(float* acc, const float* part, float scale, bool overwrite, size_t begin, size_t end);
void AccumulateAvx2(uint16_t* acc, const float* part, float scale, bool overwrite, size_t begin, size_t end);
void AccumulateAvx512(float* acc, const float* part, float scale, bool overwrite, size_t begin, size_t end);
void AccumulateAvx512(uint16_t* acc, const float* part, float scale, bool overwrite, size_t begin, size_t end);
// The same from a bf16 part (a bf16 compute gradient, widened exactly).
void AccumulateScalar(float* acc, const uint16_t* part, float scale, bool overwrite, size_t begin, size_t end);
void AccumulateScalar(uint16_t* acc, const uint16_t* part, float scale, bool overwrite, size_t begin, size_t end);
void AccumulateAvx2(float* acc, const uint16_t* part, float scale, bool overwrite, size_t begin, size_t end);
void AccumulateAvx2(uint16_t* acc, const uint16_t* part, float scale, bool overwrite, size_t begin, size_t end);
void AccumulateAvx512(float* acc, const uint16_t* part, float scale, bool overwrite, size_t begin, size_t end);
void AccumulateAvx512(uint16_t* acc, const uint16_t* part, float scale, bool overwrite, size_t begin, size_t end);

namespace {

// splitmix64's finaliser (Steele et al.): a full-avalanche 64-bit mix, for the per-call key.
inline uint64_t SplitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The key of the elements whose 64-bit index has high half `hi`, under `seed`.
inline uint32_t RoundingKey(uint64_t seed, uint64_t hi) {
  return static_cast<uint32_t>(SplitMix64(seed ^ SplitMix64(hi)) >> 32);
}

// Single-element ops, the scalar path and every ISA's head and tail. kHardwareFma: fused
// multiply-add (the SIMD files have -mfma, where std::fma is one instruction); the scalar
// file has no FMA and rounds twice, which a plain x86-64 CPU does as well.
template <bool kHardwareFma>
struct ScalarOps {
  static constexpr size_t kWidth = 1;
  using F = float;
  static F Set1(float x) { return x; }
  static F Load(const float* x) { return *x; }
  static void Store(float* x, F v) { *x = v; }
  static F LoadBf16(const uint16_t* x) {
    const uint32_t u = static_cast<uint32_t>(*x) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  template <bool kStream>
  static void StoreBf16(uint16_t* x, F v) { *x = Fp32ToBf16(v); }
  template <bool kStream>
  static void StoreFp16(uint16_t* x, F v) { *x = Fp32ToFp16(v); }
  // A split master (Note [Split master] in strata/cpu_adam.h): bits = (w << 16) + low.
  static F LoadSplit(const uint16_t* w, const int16_t* lo) {
    const uint32_t u = (static_cast<uint32_t>(*w) << 16) + static_cast<uint32_t>(static_cast<int32_t>(*lo));
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static void StoreSplit(uint16_t* w, int16_t* lo, F p) {
    uint32_t u;
    std::memcpy(&u, &p, 4);
    const uint16_t h = Fp32ToBf16(p);
    const int32_t d = static_cast<int32_t>(u - (static_cast<uint32_t>(h) << 16));
    *w = h;
    *lo = static_cast<int16_t>(d < -32768 ? -32768 : d > 32767 ? 32767 : d);
  }
  static F Mul(F a, F b) { return a * b; }
  static F Sub(F a, F b) { return a - b; }
  static F Div(F a, F b) { return a / b; }
  static F Sqrt(F a) { return std::sqrt(a); }
  static F Fma(F a, F b, F c) {
    if constexpr (kHardwareFma) return std::fma(a, b, c);
    else return a * b + c;
  }
  // x's sign bit xor'ed into v (Lion's -lr * sign(x), Note [Update rules]).
  static F XorSign(F x, F v) {
    uint32_t ux, uv;
    std::memcpy(&ux, &x, 4);
    std::memcpy(&uv, &v, 4);
    uv ^= ux & 0x80000000u;
    std::memcpy(&v, &uv, 4);
    return v;
  }
  static void Fence() {}
  static void Prefetch(const void*) {}
  // 32-bit lanes for the rounding's hash (unsigned: multiplies wrap).
  using U = uint32_t;
  static U SetU(uint32_t x) { return x; }
  static U CounterU(uint32_t first) { return first; }  // lane k holds first + k
  static U XorU(U a, U b) { return a ^ b; }
  static U SrlU(U a, int k) { return a >> k; }
  static U MulU(U a, U b) { return a * b; }
  // m and v rounded stochastically, m with the low 16 random bits, v with the high 16.
  static void StoreMomentsBf16(uint16_t* m16, F m, uint16_t* v16, F v, U bits) {
    *m16 = Fp32ToBf16Stochastic(m, bits & 0xffffu);
    *v16 = Fp32ToBf16Stochastic(v, bits >> 16);
  }
  // Gradient pass.
  using D = double;
  static D ZeroD() { return 0.0; }
  static double LoadAny(const float* x) { return *x; }
  static double LoadAny(const uint16_t* x) { return LoadBf16(x); }
  static void AccumulateSquares(D& acc, double x) { acc += x * x; }
  static double ReduceD(D acc) { return acc; }
};

// The constants broadcast once per range (stores through p, m, v... may alias AdamArgs as far
// as the compiler knows, so reading them from it inside the loop reloads them every time).
template <class Ops>
struct AdamConsts {
  using F = typename Ops::F;
  explicit AdamConsts(const AdamArgs& a)
      : grad_scale(Ops::Set1(a.grad_scale)), beta1(Ops::Set1(a.beta1)), one_minus_beta1(Ops::Set1(a.one_minus_beta1)),
        beta2(Ops::Set1(a.beta2)), one_minus_beta2(Ops::Set1(a.one_minus_beta2)),
        inv_sqrt_bc2(Ops::Set1(a.inv_sqrt_bc2)), eps(Ops::Set1(a.eps)), neg_step_size(Ops::Set1(a.neg_step_size)),
        decay(Ops::Set1(a.decay)), neg_lr(Ops::Set1(a.neg_lr)), l2(Ops::Set1(a.l2)), eps_in(Ops::Set1(a.eps_in)),
        one(Ops::Set1(1.0f)), lerp_coef(Ops::Set1(a.lerp_coef)), nesterov_coef(Ops::Set1(a.nesterov_coef)),
        lerp_small(a.lerp_small), nesterov_small(a.nesterov_small) {}
  F grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2, inv_sqrt_bc2, eps, neg_step_size, decay, neg_lr, l2,
      eps_in, one, lerp_coef, nesterov_coef;
  bool lerp_small, nesterov_small;
};

// One element or one vector of the AdamW update; identical arithmetic for every width, so
// a tail done one element at a time gives the bits the vector body would have given.
//   g' = g * grad_scale;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2
//   p  = p * decay - step_size * m / (sqrt(v) / sqrt(bc2) + eps)
template <class Ops>
inline void AdamUpdate(const AdamConsts<Ops>& c, typename Ops::F g, typename Ops::F& p, typename Ops::F& m,
                       typename Ops::F& v) {
  using F = typename Ops::F;
  const F gs = Ops::Mul(g, c.grad_scale);
  m = Ops::Fma(c.beta1, m, Ops::Mul(c.one_minus_beta1, gs));
  v = Ops::Fma(c.beta2, v, Ops::Mul(c.one_minus_beta2, Ops::Mul(gs, gs)));
  const F denom = Ops::Fma(Ops::Sqrt(v), c.inv_sqrt_bc2, c.eps);
  p = Ops::Fma(c.neg_step_size, Ops::Div(m, denom), Ops::Mul(p, c.decay));
}

// Lion as DeepSpeed's CPU kernel computes it (cpu_lion.h), operation for operation:
//   c = fma(g', 1-b1, b1 m);  p = fma(p, decay, -lr * sign(c));  m = fma(g', 1-b2, b2 m)
// (sign(+-0) = +-1, as its sign-bit trick gives; decay = 1 - lr wd, exactly 1 without decay).
template <class Ops>
inline void LionUpdate(const AdamConsts<Ops>& c, typename Ops::F g, typename Ops::F& p, typename Ops::F& m) {
  using F = typename Ops::F;
  const F gs = Ops::Mul(g, c.grad_scale);
  const F direction = Ops::Fma(gs, c.one_minus_beta1, Ops::Mul(m, c.beta1));
  p = Ops::Fma(p, c.decay, Ops::XorSign(direction, c.neg_lr));
  m = Ops::Fma(gs, c.one_minus_beta2, Ops::Mul(m, c.beta2));
}

// Adagrad as DeepSpeed's CPU kernel computes it (cpu_adagrad.h), operation for operation:
//   g'' = fma(p, l2, g');  v = fma(g'', g'', v);  p = fma(g'' / (sqrt(v) + eps), -lr, p)
template <class Ops>
inline void AdagradUpdate(const AdamConsts<Ops>& c, typename Ops::F g, typename Ops::F& p, typename Ops::F& v) {
  using F = typename Ops::F;
  const F gd = Ops::Fma(p, c.l2, Ops::Mul(g, c.grad_scale));
  v = Ops::Fma(gd, gd, v);
  const F denom = Ops::Fma(Ops::Sqrt(v), c.one, c.eps);  // sqrt(v) + eps, rounded once
  p = Ops::Fma(Ops::Div(gd, denom), c.neg_lr, p);
}

// LAMB's direction as FusedLamb computes it (Note [Update rules] in strata/cpu_adam.h), m and v
// updated: u = m / (sqrt(v + eps_in) + eps) + l2 p, eps_in or eps being 0 (adding 0 is exact,
// so either placement rounds as FusedLamb's own branch does). Its norm pass and its update
// both call this: the u whose norm sets the trust ratio is the u the update applies.
template <class Ops>
inline typename Ops::F LambDirection(const AdamConsts<Ops>& c, typename Ops::F g, typename Ops::F p,
                                     typename Ops::F& m, typename Ops::F& v) {
  using F = typename Ops::F;
  const F gs = Ops::Mul(g, c.grad_scale);
  m = Ops::Fma(c.beta1, m, Ops::Mul(c.one_minus_beta1, gs));
  v = Ops::Fma(c.beta2, v, Ops::Mul(c.one_minus_beta2, Ops::Mul(gs, gs)));
  const F denom = Ops::Fma(Ops::Sqrt(Ops::Fma(v, c.one, c.eps_in)), c.one, c.eps);
  return Ops::Fma(p, c.l2, Ops::Div(m, denom));
}

// p = p - (step_size trust) u, the product folded into neg_step_size once per tensor.
template <class Ops>
inline void LambUpdate(const AdamConsts<Ops>& c, typename Ops::F g, typename Ops::F& p, typename Ops::F& m,
                       typename Ops::F& v) {
  p = Ops::Fma(c.neg_step_size, LambDirection<Ops>(c, g, p, m, v), p);
}

// Element i (or the vector from it) of the gradient, fp32 or bf16 (widened exactly).
template <class Ops, GradKind kGrad>
inline typename Ops::F LoadGradient(const AdamArgs& a, size_t i) {
  if constexpr (kGrad == GradKind::kFp32) return Ops::Load(a.g32 + i);
  else return Ops::LoadBf16(a.g16 + i);
}

// Muon's momentum as torch's buf.lerp_(g', 1 - momentum) computes it (its vectorised lerp: one
// fused multiply-add from the nearer end), g' = g * grad_scale. The update and the pass that
// feeds the orthogonalisation (MuonNesterov) both call this: the momentum the update stores is
// the one the update direction was made from.
template <class Ops>
inline typename Ops::F MuonMomentum(const AdamConsts<Ops>& c, typename Ops::F gs, typename Ops::F m) {
  return Ops::Fma(c.lerp_coef, Ops::Sub(gs, m), c.lerp_small ? m : gs);
}

// Nesterov's direction, torch's g'.lerp(m, momentum) with m the new momentum.
template <class Ops>
inline typename Ops::F MuonDirection(const AdamConsts<Ops>& c, typename Ops::F gs, typename Ops::F m) {
  return Ops::Fma(c.nesterov_coef, Ops::Sub(m, gs), c.nesterov_small ? gs : m);
}

// p = p (1 - lr wd) - lr' o, as torch's param.mul_(1 - lr wd).add_(o, alpha=-lr') (its
// vectorised add is a fused multiply-add); the momentum moved on.
template <class Ops>
inline void MuonUpdate(const AdamConsts<Ops>& c, typename Ops::F g, typename Ops::F o, typename Ops::F& p,
                       typename Ops::F& m) {
  m = MuonMomentum<Ops>(c, Ops::Mul(g, c.grad_scale), m);
  p = Ops::Fma(c.neg_lr, o, Ops::Mul(p, c.decay));
}

// The moments a rule keeps: Adam and LAMB m and v, Lion and Muon m, Adagrad v (its sum of squares).
constexpr bool KeepsM(UpdateRule r) { return r != UpdateRule::kAdagrad; }
constexpr bool KeepsV(UpdateRule r) { return r != UpdateRule::kLion && r != UpdateRule::kMuon; }

// The random bits of kWidth consecutive elements (Note [Stochastic rounding of the moments]
// in strata/cpu_adam.h): lowbias32 (C. Wellons' hash-prospector: a bijection of 32 bits,
// two multiplies, low bias) of the element's counter plus the key, `first` being the first
// element's sum. Integer ops only, the same in every width, so every ISA path and every
// split of a range gives the same bits. (A fresh random key per call already makes each
// element's bits uniform from one step to the next; the hash decorrelates neighbouring
// elements within a call.)
template <class Ops>
inline typename Ops::U RoundingBits(uint32_t first) {
  using U = typename Ops::U;
  U x = Ops::CounterU(first);
  x = Ops::XorU(x, Ops::SrlU(x, 16));
  x = Ops::MulU(x, Ops::SetU(0x7feb352dU));
  x = Ops::XorU(x, Ops::SrlU(x, 15));
  x = Ops::MulU(x, Ops::SetU(0x846ca68bU));
  return Ops::XorU(x, Ops::SrlU(x, 16));
}

// Note [Adam memory traffic]
// The step is bound by memory bandwidth. Measured on Zen 4, 2 threads, 100M parameters,
// interleaved micro-benchmarks (medians of 5):
//  - software prefetch of the four input streams 1 KiB ahead: 58 ms instead of 67 (4 KiB
//    ahead: 59). The hardware prefetchers stop at 4 KiB page boundaries, and seven
//    concurrent streams per core restart them often;
//  - non-temporal stores for p, m, v: about 2x slower (the lines were just read into
//    cache; a streaming store evicts them). Kept only for the write-only half copy, where
//    they save the read-for-ownership of its 2 B/param: 66 ms instead of 69;
//  - one contiguous range per thread (not interleaved chunks): one stream per array each.
constexpr size_t kPrefetchBytes = 1024;

// Elements [begin, end) in steps of Ops::kWidth (end - begin must be a multiple of it).
// kStream: write the half copy with non-temporal stores (its destination is aligned).
// kMoments kBf16: m and v are read from bf16 and rounded back to it (stochastically: the low
// 16 random bits for m, the high 16 for v) in the same pass: the update itself is the fp32 one.
// kMaster kSplit: the master is read from the working weights (`half`, bf16) and its low
// halves, and written back to both: kHalf is then kBf16.
template <class Ops, GradKind kGrad, MomentKind kMoments, HalfKind kHalf, bool kStream,
          MasterKind kMaster = MasterKind::kFp32, UpdateRule kRule = UpdateRule::kAdam>
inline void AdamLoop(const AdamArgs& a, size_t begin, size_t end) {
  static_assert(kMaster == MasterKind::kFp32 || kHalf == HalfKind::kBf16);
  static_assert(kRule == UpdateRule::kAdam || kMoments == MomentKind::kFp32);
  constexpr bool kM = KeepsM(kRule), kV = KeepsV(kRule);
  using F = typename Ops::F;
  const AdamConsts<Ops> c(a);
  const uint32_t counter = a.sr_base + a.sr_key;  // element i's counter + key: counter + i
  constexpr size_t kAhead = kPrefetchBytes / sizeof(float);
  constexpr bool kBf16Moments = kMoments == MomentKind::kBf16;
#pragma GCC unroll 2
  for (size_t i = begin; i < end; i += Ops::kWidth) {
    // Addresses past the end are harmless: a prefetch never faults.
    if constexpr (kMaster == MasterKind::kSplit) {
      Ops::Prefetch(a.half + i + kAhead);
      Ops::Prefetch(a.lo + i + kAhead);
    } else {
      Ops::Prefetch(a.p + i + kAhead);
    }
    if constexpr (kBf16Moments) {
      Ops::Prefetch(a.m16 + i + kAhead);
      Ops::Prefetch(a.v16 + i + kAhead);
    } else {
      if constexpr (kM) Ops::Prefetch(a.m + i + kAhead);
      if constexpr (kV) Ops::Prefetch(a.v + i + kAhead);
    }
    if constexpr (kGrad == GradKind::kFp32) Ops::Prefetch(a.g32 + i + kAhead);
    else Ops::Prefetch(a.g16 + i + kAhead);
    F g;
    if constexpr (kGrad == GradKind::kFp32) g = Ops::Load(a.g32 + i);
    else g = Ops::LoadBf16(a.g16 + i);
    F p, m, v;
    if constexpr (kMaster == MasterKind::kSplit) p = Ops::LoadSplit(a.half + i, a.lo + i);
    else p = Ops::Load(a.p + i);
    if constexpr (kBf16Moments) {
      m = Ops::LoadBf16(a.m16 + i);
      v = Ops::LoadBf16(a.v16 + i);
    } else {
      if constexpr (kM) m = Ops::Load(a.m + i);
      if constexpr (kV) v = Ops::Load(a.v + i);
    }
    if constexpr (kRule == UpdateRule::kAdam) AdamUpdate<Ops>(c, g, p, m, v);
    else if constexpr (kRule == UpdateRule::kLamb) LambUpdate<Ops>(c, g, p, m, v);
    else if constexpr (kRule == UpdateRule::kLion) LionUpdate<Ops>(c, g, p, m);
    else if constexpr (kRule == UpdateRule::kMuon) MuonUpdate<Ops>(c, g, Ops::Load(a.o + i), p, m);
    else AdagradUpdate<Ops>(c, g, p, v);
    if constexpr (kMaster == MasterKind::kFp32) Ops::Store(a.p + i, p);
    if constexpr (kBf16Moments) {
      Ops::StoreMomentsBf16(a.m16 + i, m, a.v16 + i, v, RoundingBits<Ops>(counter + static_cast<uint32_t>(i)));
    } else {
      if constexpr (kM) Ops::Store(a.m + i, m);
      if constexpr (kV) Ops::Store(a.v + i, v);
    }
    if constexpr (kMaster == MasterKind::kSplit) Ops::StoreSplit(a.half + i, a.lo + i, p);  // (never streamed)
    else if constexpr (kHalf == HalfKind::kBf16) Ops::template StoreBf16<kStream>(a.half + i, p);
    if constexpr (kHalf == HalfKind::kFp16) Ops::template StoreFp16<kStream>(a.half + i, p);
  }
}

// A range: a one-element head up to the first cache-line boundary of p (so the vector body
// loads p, m, v... from aligned addresses when the arrays are co-aligned), the vector body,
// a one-element tail. Wide and Narrow are the vector and single-element ops of one ISA.
// (A split master aligns on its low halves' lines instead.)
template <class Wide, class Narrow, GradKind kGrad, MomentKind kMoments, HalfKind kHalf,
          MasterKind kMaster = MasterKind::kFp32, UpdateRule kRule = UpdateRule::kAdam>
inline void AdamRangeT(const AdamArgs& a, size_t begin, size_t end) {
  auto line_offset = [&](size_t i) {
    return kMaster == MasterKind::kSplit ? reinterpret_cast<uintptr_t>(a.lo + i) % 64
                                         : reinterpret_cast<uintptr_t>(a.p + i) % 64;
  };
  size_t head = begin;
  while (head < end && line_offset(head) != 0) ++head;
  const size_t body_end = head + (end - head) / Wide::kWidth * Wide::kWidth;
  AdamLoop<Narrow, kGrad, kMoments, kHalf, false, kMaster, kRule>(a, begin, head);
  // (A split master's working weights were just read: a streaming store would evict them.)
  const bool stream = kHalf != HalfKind::kNone && kMaster == MasterKind::kFp32 &&
                      reinterpret_cast<uintptr_t>(a.half + head) % (2 * Wide::kWidth) == 0;
  if (stream) {
    AdamLoop<Wide, kGrad, kMoments, kHalf, true, kMaster, kRule>(a, head, body_end);
    Wide::Fence();  // streaming stores are weakly ordered: publish them before returning
  } else {
    AdamLoop<Wide, kGrad, kMoments, kHalf, false, kMaster, kRule>(a, head, body_end);
  }
  AdamLoop<Narrow, kGrad, kMoments, kHalf, false, kMaster, kRule>(a, body_end, end);
}

template <class Wide, class Narrow, GradKind kGrad, MomentKind kMoments, UpdateRule kRule = UpdateRule::kAdam>
inline void AdamRangeHalf(const AdamArgs& a, size_t begin, size_t end) {
  constexpr MasterKind kFp32 = MasterKind::kFp32;
  if (a.master_kind == MasterKind::kSplit)  // (always with a bf16 copy: its high halves)
    return AdamRangeT<Wide, Narrow, kGrad, kMoments, HalfKind::kBf16, MasterKind::kSplit, kRule>(a, begin, end);
  switch (a.half_kind) {
    case HalfKind::kNone: return AdamRangeT<Wide, Narrow, kGrad, kMoments, HalfKind::kNone, kFp32, kRule>(a, begin, end);
    case HalfKind::kBf16: return AdamRangeT<Wide, Narrow, kGrad, kMoments, HalfKind::kBf16, kFp32, kRule>(a, begin, end);
    case HalfKind::kFp16: return AdamRangeT<Wide, Narrow, kGrad, kMoments, HalfKind::kFp16, kFp32, kRule>(a, begin, end);
  }
}

// Lion, Adagrad, LAMB and Muon (fp32 states): the gradient, half copy and master formats Adam has.
template <class Wide, class Narrow, UpdateRule kRule>
inline void Fp32StatesRangeDispatch(const AdamArgs& a, size_t begin, size_t end) {
  if (a.grad_kind == GradKind::kBf16)
    return AdamRangeHalf<Wide, Narrow, GradKind::kBf16, MomentKind::kFp32, kRule>(a, begin, end);
  AdamRangeHalf<Wide, Narrow, GradKind::kFp32, MomentKind::kFp32, kRule>(a, begin, end);
}

// 8-bit moments (Note [8-bit moments] in strata/cpu_adam.h), one block at a time: m and v
// decoded into fp32 on the stack, the fp32 update over the block, m and v encoded back. So the
// update is the fp32 one and memory sees each array once. `begin` starts a block.
template <class Wide, class Narrow, GradKind kGrad>
inline void Adam8BitRangeT(const AdamArgs& a, size_t begin, size_t end) {
  alignas(64) float m[kBlock8Bit], v[kBlock8Bit];
  alignas(64) uint32_t hash[kBlock8Bit];
  const uint32_t counter = a.sr_base + a.sr_key;
  AdamArgs block = a;
  block.moment_kind = MomentKind::kFp32;
  block.m = m;
  block.v = v;
  auto at = [](auto* p, size_t i) { return p ? p + i : p; };
  for (size_t i = begin; i < end; i += kBlock8Bit) {
    const size_t n = std::min(kBlock8Bit, end - i), q = i / kBlock8Bit;
    Decode8BitBlock<FormatM, true>(a.m8 + i, a.m8_scale[q], n, m);
    Decode8BitBlock<FormatV, false>(a.v8 + i, a.v8_scale[q], n, v);
    // A v below the format's range reads as 0; with m not 0 the update would be m / eps.
    // Such an element gets v = m^2 instead (|m| / sqrt(v) <= 1, as Adam's own elements).
    for (size_t j = 0; j < n; ++j) v[j] = a.v8[i + j] == 0 ? m[j] * m[j] : v[j];
    block.p = at(a.p, i);
    block.lo = at(a.lo, i);
    block.g32 = at(a.g32, i);
    block.g16 = at(a.g16, i);
    block.half = at(a.half, i);
    AdamRangeHalf<Wide, Narrow, kGrad, MomentKind::kFp32>(block, 0, n);
    Hashes8BitBlock(counter + static_cast<uint32_t>(i), n, hash);
    Encode8BitBlock<FormatM, true>(m, n, a.m8 + i, a.m8_scale + q, hash, 0);
    Encode8BitBlock<FormatV, false>(v, n, a.v8 + i, a.v8_scale + q, hash, 16);
  }
}

// The 2 x 3 x (3 + 1) (gradient, moments, half copy or split master) matrix for one ISA, chosen once per range.
template <class Wide, class Narrow>
inline void AdamRangeDispatch(const AdamArgs& a, size_t begin, size_t end) {
  if (a.rule == UpdateRule::kLion) return Fp32StatesRangeDispatch<Wide, Narrow, UpdateRule::kLion>(a, begin, end);
  if (a.rule == UpdateRule::kAdagrad) return Fp32StatesRangeDispatch<Wide, Narrow, UpdateRule::kAdagrad>(a, begin, end);
  if (a.rule == UpdateRule::kLamb) return Fp32StatesRangeDispatch<Wide, Narrow, UpdateRule::kLamb>(a, begin, end);
  if (a.rule == UpdateRule::kMuon) return Fp32StatesRangeDispatch<Wide, Narrow, UpdateRule::kMuon>(a, begin, end);
  if (a.moment_kind == MomentKind::k8Bit)
    return a.grad_kind == GradKind::kBf16 ? Adam8BitRangeT<Wide, Narrow, GradKind::kBf16>(a, begin, end)
                                          : Adam8BitRangeT<Wide, Narrow, GradKind::kFp32>(a, begin, end);
  const bool bf16_moments = a.moment_kind == MomentKind::kBf16;
  if (a.grad_kind == GradKind::kBf16)
    return bf16_moments ? AdamRangeHalf<Wide, Narrow, GradKind::kBf16, MomentKind::kBf16>(a, begin, end)
                        : AdamRangeHalf<Wide, Narrow, GradKind::kBf16, MomentKind::kFp32>(a, begin, end);
  return bf16_moments ? AdamRangeHalf<Wide, Narrow, GradKind::kFp32, MomentKind::kBf16>(a, begin, end)
                      : AdamRangeHalf<Wide, Narrow, GradKind::kFp32, MomentKind::kFp32>(a, begin, end);
}

// Note [Finite check]
// Squares of finite fp32 values are below 2^256 and a double holds up to 2^1024, so a sum
// of squares in double over any realistic span (< 2^700 elements) is finite exactly when
// every element is: the NaN/Inf check costs nothing beyond the norm's own read.
template <class Wide, class Narrow, class T>
inline double SumSquaresT(const T* x, size_t begin, size_t end) {
  typename Wide::D acc0 = Wide::ZeroD(), acc1 = Wide::ZeroD();
  size_t i = begin;
  for (; i + 2 * Wide::kWidth <= end; i += 2 * Wide::kWidth) {
    Wide::AccumulateSquares(acc0, Wide::LoadAny(x + i));
    Wide::AccumulateSquares(acc1, Wide::LoadAny(x + i + Wide::kWidth));
  }
  double sum = Wide::ReduceD(acc0) + Wide::ReduceD(acc1);
  for (; i < end; ++i) {
    const double e = Narrow::LoadAny(x + i);
    sum += e * e;
  }
  return sum;
}

// The split master's conversions, the vector body then one element at a time.
template <class Wide, class Narrow>
inline void SplitMasterT(const float* p, uint16_t* w, int16_t* lo, size_t n) {
  size_t i = 0;
  for (; i + Wide::kWidth <= n; i += Wide::kWidth) Wide::StoreSplit(w + i, lo + i, Wide::Load(p + i));
  for (; i < n; ++i) Narrow::StoreSplit(w + i, lo + i, Narrow::Load(p + i));
}

template <class Wide, class Narrow>
inline void JoinMasterT(const uint16_t* w, const int16_t* lo, float* p, size_t n) {
  size_t i = 0;
  for (; i + Wide::kWidth <= n; i += Wide::kWidth) Wide::Store(p + i, Wide::LoadSplit(w + i, lo + i));
  for (; i < n; ++i) Narrow::Store(p + i, Narrow::LoadSplit(w + i, lo + i));
}

// Note [Gradient accumulation]
// One fused multiply-add per element, scale * part + acc (0 for the step's first
// micro-batch, so the accumulators need no zeroing between steps), in fp32 and rounded to
// nearest even when the accumulator is bf16. Every ISA fuses (the scalar path through
// std::fma), so the result is bitwise the same on scalar, AVX2 and AVX-512.
template <class Ops, class Acc, class Part>
inline void AccumulateBody(Acc* acc, const Part* part, float scale, bool overwrite, size_t begin, size_t end) {
  using F = typename Ops::F;
  const F s = Ops::Set1(scale), zero = Ops::Set1(0.0f);
  for (size_t i = begin; i < end; i += Ops::kWidth) {
    F a = zero;
    if (!overwrite) {
      if constexpr (sizeof(Acc) == 4) a = Ops::Load(acc + i);
      else a = Ops::LoadBf16(acc + i);
    }
    F x;
    if constexpr (sizeof(Part) == 4) x = Ops::Load(part + i);
    else x = Ops::LoadBf16(part + i);  // exact: a bf16 gradient widened, as a copy to fp32 would
    const F r = Ops::Fma(s, x, a);
    if constexpr (sizeof(Acc) == 4) Ops::Store(acc + i, r);
    else Ops::template StoreBf16</*kStream=*/false>(acc + i, r);
  }
}

template <class Wide, class Narrow, class Acc, class Part>
inline void AccumulateT(Acc* acc, const Part* part, float scale, bool overwrite, size_t begin, size_t end) {
  const size_t body_end = begin + (end - begin) / Wide::kWidth * Wide::kWidth;
  AccumulateBody<Wide>(acc, part, scale, overwrite, begin, body_end);
  AccumulateBody<Narrow>(acc, part, scale, overwrite, body_end, end);
}

}  // namespace
}  // namespace strata::cpu
