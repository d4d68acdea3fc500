// CPU AdamW for offloaded shards: one fused, memory-bound pass per shard sub-group.
//
// In an offload trainer the CPU updates every parameter every step with its states in host
// memory, so the step is bound by memory bandwidth: per parameter it reads p, g, m, v and
// writes p, m, v (28 B with fp32 gradients, 26 B with bf16 ones) plus 2 B when it also
// writes the bf16/fp16 working copy that the next forward fetches. Everything else that a
// step needs per element (gradient unscale, clip coefficient, decoupled weight decay, bias
// correction, the half-precision copy) is folded into that one pass. See
// Note [Adam step sequence] for how the pieces fit together.
//
// ISA: AVX-512 (with AVX512_BF16 conversion when the CPU has it), AVX2+FMA+F16C, or
// scalar, chosen at run time by ActiveIsa() (strata/isa.h; STRATA_FORCE_ISA=scalar|avx2|
// avx512 forces one, for tests and comparisons).
//
// Threading: each call parallelises its span with OpenMP into one contiguous,
// cache-line-aligned range per thread (AdamOptions::num_threads; 0 = OpenMP's default).
// Calls are synchronous: when a function returns, every output is written and visible.
// Concurrent calls on disjoint spans are allowed (each opens its own OpenMP team).
//
// Memory: nothing is allocated in a call; spans are borrowed for the call only; any size
// (including 0) and any element alignment are accepted. Outputs must not overlap inputs
// other than the in-place p, m, v they update.
//
// Note [Adam step sequence]
// A step over a shard split into sub-groups (the unit that is paged from NVMe) is:
//   1. GradSumSquares() over every sub-group's gradient (rank-local), then the caller
//      all-reduces the sums across ranks. A non-finite sum means some gradient element is
//      NaN or Inf (fp16 overflow): skip the step, lower the loss scale, and touch no state.
//   2. norm = sqrt(sum) * grad_unscale; clip_coef = ClipCoefficient(norm, max_norm).
//   3. AdamStep() once per sub-group with the same AdamHyperParams (same `step`), in any
//      order, possibly while the I/O of neighbouring sub-groups is in flight.
// The engine (src/engine/engine_optimizer.cc) is the one place that runs this sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "strata/status.h"

namespace strata {

// Note [Update rules]
// AdamStep runs one of five element-wise rules, each in the one fused pass and with the
// master, gradient and half-copy formats described here; Lion and Adagrad as DeepSpeed
// 0.19.8's CPU kernels compute them (its cpu_lion.h, cpu_adagrad.h), operation for operation,
// LAMB as its FusedLamb does (fused_lamb_cuda_kernel.cu), Muon's element-wise half as
// torch.optim.Muon and DeepSpeed's MuonWithAuxAdam do:
//   kAdam     the AdamW below: m and v (exp_avg, exp_avg_sq)
//   kLion     c = b1 m + (1-b1) g;  p = p (1 - lr wd) - lr sign(c);  m = b2 m + (1-b2) g
//             exp_avg only; sign(+-0) = +-1 (DeepSpeed takes c's sign bit), so an element
//             whose gradient and momentum are 0 still moves by lr; eps and the step unused
//   kAdagrad  g = g + wd p (L2, coupled);  v = v + g^2;  p = p - lr g / (sqrt(v) + eps)
//             exp_avg_sq only (the sum of squares); betas and the step unused
//   kLamb     m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  u = m / (sqrt(v) + eps) + wd p
//             (eps_inside_sqrt: m / sqrt(v + eps));  p = p - step_size trust u, where
//             step_size = lr sqrt(1 - b2^t) / (1 - b1^t) (lr without bias_correction) and
//             trust = hp.trust_ratio, the tensor's LambTrustRatio of ||p|| and ||u|| over the
//             whole tensor, which LambNormSums gives in pieces (Note [LAMB trust ratio])
//   kMuon     m = lerp(m, g, 1 - b1) (b1: the momentum);  p = p (1 - lr wd) - lr ratio o, o
//             being spans.muon_update, the orthogonalised update that whole matrices give
//             (Note [Muon] in src/engine/update/muon_matrices.h), ratio hp.muon_lr_ratio;
//             exp_avg only (the momentum buffer); lerp as torch computes it, one fused
//             multiply-add from the nearer end. MuonNesterov gives the direction o is made of.
// g is the gradient times grad_unscale * clip_coef in each. Lion, Adagrad, LAMB and Muon keep
// fp32 states (no bf16 or 8-bit moments).
enum class UpdateRule { kAdam, kLion, kAdagrad, kLamb, kMuon };
const char* UpdateRuleName(UpdateRule r);  // "Adam", "Lion", "Adagrad", "LAMB", "Muon"

// Per-step hyper-parameters (PyTorch AdamW semantics: decoupled weight decay,
// p <- p * (1 - lr * weight_decay) before the Adam update). Passed by value to every
// sub-group of one step. Doubles, as in PyTorch: the folded per-step constants (1 - beta,
// lr / (1 - beta1^t), ...) are computed in double and rounded to fp32 once, so that
// betas = 0.999 means what it says (1 - 0.999f in float would be off by 1.3e-5 relative).
struct AdamHyperParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // 0 turns decay off (exactly: p is multiplied by 1)
  int64_t step = 1;           // 1-based count of steps taken, including this one
  bool bias_correction = true;
  // Multiplies every gradient element before use: the fp16 loss-scale unscale factor
  // (1 / loss_scale; 1 for bf16/fp32) ...
  double grad_unscale = 1.0;
  // ... and the global-norm clip coefficient computed by the caller (1 = no clipping).
  double clip_coef = 1.0;
  UpdateRule rule = UpdateRule::kAdam;  // Note [Update rules]
  // LAMB only: the tensor's trust ratio (LambTrustRatio), and where eps goes (FusedLamb's
  // eps_inside_sqrt).
  double trust_ratio = 1.0;
  bool eps_inside_sqrt = false;
  // Muon only: the factor of lr in the step but not in the decay (torch.optim.Muon's adjusted
  // lr, sqrt(max(1, rows / cols)); 1 where the update already carries it, as DeepSpeed's does).
  double muon_lr_ratio = 1.0;
};

// Format of the optional half-precision copy of the updated weights.
enum class HalfFormat { kBf16, kFp16 };

// The arrays of one sub-group, all of the same length n (elements, not bytes).
// Exactly one of `grad` (fp32) and `grad_bf16` has n elements; the other is empty
// (both are empty when n == 0). bf16/fp16 values are uint16_t bit patterns.
struct AdamSpans {
  std::span<float> params;       // fp32 master weights, updated in place
  std::span<float> exp_avg;      // Adam m, updated in place
  std::span<float> exp_avg_sq;   // Adam v, updated in place
  std::span<const float> grad;   // fp32 gradient, read only
  std::span<const uint16_t> grad_bf16;  // or a bf16 gradient, read only
  // Optional: receives the updated weights rounded (nearest-even) to `half_format`.
  // Empty = no copy. Written with streaming stores where aligned: do not expect it in cache.
  std::span<uint16_t> half_out;
  HalfFormat half_format = HalfFormat::kBf16;
  // Or m and v stored in bf16 (both, instead of exp_avg and exp_avg_sq): read, updated in
  // fp32 and rounded back STOCHASTICALLY in the same pass (Note [Stochastic rounding of the
  // moments]). exp_avg and exp_avg_sq are then empty.
  std::span<uint16_t> exp_avg_bf16, exp_avg_sq_bf16;
  // That rounding's random bits: element i's are AdamRoundingBits(rounding_seed,
  // rounding_index + i). Number the elements globally (rounding_index = the first one's
  // index in the whole tensor) and derive the seed from what the update is (e.g. the step
  // and the tensor), and the stored moments are the same bits however the tensor is split
  // into calls, threads or ranks. Unused with fp32 moments.
  uint64_t rounding_seed = 0;
  uint64_t rounding_index = 0;
  // Or m and v in 8 bits per element, blockwise (Note [8-bit moments]): each a blob of
  // Moment8BitBytes(n) bytes, read and written in the same pass, rounded stochastically with
  // the bits the bf16 moments take (rounding_seed, rounding_index). The blocks count from
  // element 0 of the span.
  std::span<uint8_t> exp_avg_8bit, exp_avg_sq_8bit;
  // Or the fp32 master stored split (Note [Split master]): its high halves are the bf16
  // working weights in half_out (read, then overwritten with the updated weights), its low
  // halves here, updated in place. `params` is then empty and half_format kBf16.
  std::span<int16_t> master_low;
  // Element ranges [first, second), sorted and disjoint, that take no weight decay (the
  // parameters strata.no_decay names: normalisation weights and biases); the rest take
  // hp.weight_decay. Each element's arithmetic is the same however the span is cut, so this
  // is exactly a call per range. Not with 8-bit moments (their blocks are encoded whole).
  std::span<const std::pair<size_t, size_t>> no_decay;
  // Muon only: the orthogonalised update of each element, read only.
  std::span<const float> muon_update;
};

// Note [Split master]
// With bf16 compute the fp32 master p and the working copy w = bf16(p) (nearest even) share
// their high 16 bits up to one carry, so storing both spends 2 B/param on what w already
// holds. Stored split, p is w and the 16-bit difference low = bits(p) - (bits(w) << 16),
// and is rebuilt as bits(p) = (bits(w) << 16) + low: 2 B/param less in memory and on disk,
// and the update writes 2 B/param less. For every finite p the difference lies in
// [-0x8000, 0x8000]; all but +0x8000 fit an int16. +0x8000 is a tie that rounded down to an
// even w (low half exactly 0x8000): it is stored as 0x7fff, p one fp32 ulp nearer to zero,
// which rounds to the same w (about one element in 2^17 per step; |change| 2^-24 of p).
// Everything else is exact, so the working weights are those of an fp32 master and the
// master differs from one only by those one-ulp steps. The split path rounds with integer
// ops on every ISA (AVX512_BF16's instruction would flush subnormal masters to zero).

// Note [Stochastic rounding of the moments]
// With beta2 = 0.999, v moves by 0.1% of itself per step while g^2 stays near v: less than
// half a bf16 ulp (0.2-0.4% of the value), so rounding to nearest stores v unchanged and v
// freezes until g^2 strays far from it (m likewise with beta1 near 1). Stochastic rounding
// (Fp32ToBf16Stochastic, strata/cast.h) rounds up with probability equal to the fraction
// of an ulp above the truncated value, so the stored value is the fp32 update on average
// and small increments accumulate in expectation. The random bits are a counter-based hash
// of (seed, element index) (AdamRoundingBits: the low 16 bits round m, the high 16 bits
// v), not a generator's stream: no state to carry or checkpoint, and the same bits on every
// ISA path and thread count, for a redone update and after a resume.

// Note [8-bit moments]
// strata.adam_states "8bit": m and v in 1 byte per element plus one fp32 scale (the largest
// |value|) per block of 256 elements, 1.016 B instead of 4 (fp32) or 2 (bf16); bitsandbytes'
// blockwise 8-bit Adam (Dettmers et al., 2022) is the idea, the code format is this one. A
// code is a small float relative to the block's scale: m a sign, 4 mantissa bits and 7
// octaves, then evenly spaced steps of 2^-10 down to 0; v 4 mantissa bits and 15 octaves (7.5
// for sqrt(v), what the update divides by), then steps of 2^-18. Rounding is stochastic (Note
// [Stochastic rounding of the moments]): a relative step of 1/16 is far coarser than v's
// 0.1% per step, which rounding to nearest would freeze. The update decodes a block into fp32
// on the stack, runs the fp32 AdamW over it and encodes it back, so it is the fp32 update on
// the decoded values and memory sees each array once. A v that decodes to 0 (below its range)
// is taken as m^2, so that an element whose m did not underflow is not updated by m / eps.
// The codes are integer and exact float operations: every ISA and thread count gives the same.

// Bytes of one 8-bit moment of n elements: n codes, padded to 64 bytes, then n / 256 scales.
size_t Moment8BitBytes(size_t n);
// One moment to and from its 8-bit blob (m: signed; v: `is_v`): rounded stochastically as
// AdamStep would with (seed, index), or to the nearest code (what a restore from fp32 values
// does: encoding what DecodeMoment8Bit gave then returns the same blob).
void EncodeMoment8Bit(bool is_v, std::span<const float> x, std::span<uint8_t> blob, uint64_t seed, uint64_t index);
void EncodeMoment8BitNearest(bool is_v, std::span<const float> x, std::span<uint8_t> blob);
void DecodeMoment8Bit(bool is_v, std::span<const uint8_t> blob, std::span<float> x);

// The 32 random bits of element `index` under `seed`: lowbias32 of (the index's low half +
// a key mixed (splitmix64) from the seed and the index's high half). What AdamStep uses;
// public for tests and for callers that round the same way.
uint32_t AdamRoundingBits(uint64_t seed, uint64_t index);

// A seed from two integers (splitmix64 of each, combined): e.g. (step, block), so that every
// step and every tensor gets its own bits.
uint64_t MixRoundingSeed(uint64_t a, uint64_t b);

struct AdamOptions {
  int num_threads = 0;  // OpenMP threads for this call; 0 = omp_get_max_threads()
};

// One AdamW step over one sub-group: p, m, v updated in place, half_out written if given.
// Returns InvalidArgument (and touches nothing) for mismatched lengths, a missing or
// doubled gradient, or out-of-range hyper-parameters (lr < 0, betas outside [0, 1),
// eps <= 0, step < 1, non-finite scale factors). Does not check the gradient for NaN/Inf:
// that is GradSumSquares()'s job, before any sub-group is stepped.
[[nodiscard]] Status AdamStep(const AdamHyperParams& hp, const AdamSpans& spans,
                              const AdamOptions& options = {});

// Elements [begin, end) of `spans`: every array narrowed, the rounding index moved on, the
// no_decay ranges clipped and shifted into `no_decay` (which the result's no_decay views: keep
// it alive). 8-bit moments are encoded in whole blocks and cannot be sliced (checked).
AdamSpans SliceSpans(const AdamSpans& spans, size_t begin, size_t end, std::vector<std::pair<size_t, size_t>>* no_decay);

// Note [LAMB trust ratio]
// LAMB scales each parameter tensor's update u by trust = ||p|| / ||u||, clamped to
// [min_coeff, max_coeff], or 1 where either norm is 0 (DeepSpeed 0.19.8's FusedLamb), the
// norms over the whole tensor before the update. A tensor is cut into sub-groups and, under
// ZeRO, into ranks: the step first sums p^2 and u^2 over each piece (LambNormSums, which
// computes u exactly as the update will and writes nothing), adds the pieces of a tensor
// across sub-groups and ranks, and then runs AdamStep over each piece with its tensor's
// ratio. u is computed twice, bit for bit the same both times; the states are read twice.
struct LambSums {
  double weight_sq = 0;  // sum of p^2 (the master before the update)
  double update_sq = 0;  // sum of u^2
};
[[nodiscard]] Status LambNormSums(const AdamHyperParams& hp, const AdamSpans& spans, LambSums* sums,
                                  const AdamOptions& options = {});
// FusedLamb's coefficient from a tensor's sums (computed in fp32, as its kernel does).
double LambTrustRatio(double weight_sq, double update_sq, double min_coeff, double max_coeff);

// Muon's direction before orthogonalisation, for each element of `spans` (its gradient and
// exp_avg; the rule kMuon): the momentum moved on exactly as AdamStep will move it, then
// Nesterov's g.lerp(m, momentum) into `out` (as many elements). Nothing else is written.
[[nodiscard]] Status MuonNesterov(const AdamHyperParams& hp, const AdamSpans& spans, std::span<float> out,
                                  const AdamOptions& options = {});

// A fp32 master split into working weights and low halves (Note [Split master]), and back.
// Sizes must match (checked).
void SplitMasterWeights(std::span<const float> master, std::span<uint16_t> working_bf16,
                        std::span<int16_t> master_low);
void JoinMasterWeights(std::span<const uint16_t> working_bf16, std::span<const int16_t> master_low,
                       std::span<float> master);
// SplitMasterWeights in place: the low halves of master[0, n) are written, as n int16s, over
// its first 2n bytes (creation splits its staging this way, with no second buffer).
void SplitMasterWeightsInPlace(float* master, size_t n, uint16_t* working_bf16);

// Result of the gradient pass.
struct GradStats {
  double sum_squares = 0.0;  // sum of g[i]^2 over the span, in double, of the raw (scaled) gradient
  bool finite = true;        // false iff some element is NaN or +-Inf
};

// The pass that precedes the step: sum of squares for the global norm, NaN/Inf detection
// fused into the same read. Accumulates in double, so finite inputs cannot overflow (each
// square is below 2^256; see Note [Finite check]) and `finite` is exact. The sum is of
// the gradient as stored (before grad_unscale): multiply by grad_unscale^2 for the true
// norm. Results are deterministic for a given length and thread count.
GradStats GradSumSquares(std::span<const float> grad, const AdamOptions& options = {});
GradStats GradSumSquares(std::span<const uint16_t> grad_bf16, const AdamOptions& options = {});

// Adds one micro-batch's reduced gradient into a host accumulator, the pass before the
// gradient pass: acc = scale * part + acc in one fused multiply-add (fp32), rounded to
// nearest even for a bf16 accumulator (bits); `overwrite` (the step's first micro-batch):
// acc = scale * part + 0, so the accumulators need no zeroing. Bitwise the same on every ISA
// and thread count. Sizes must match (checked); part must not overlap acc.
void AccumulateGradient(std::span<float> acc, std::span<const float> part, float scale, bool overwrite,
                        const AdamOptions& options = {});
void AccumulateGradient(std::span<uint16_t> acc_bf16, std::span<const float> part, float scale, bool overwrite,
                        const AdamOptions& options = {});
// The same from a bf16 part (bf16 bits, widened exactly): what a bf16 parameter gradient
// flattened to fp32 and then added gives, without the fp32 copy.
void AccumulateBf16Gradient(std::span<float> acc, std::span<const uint16_t> part_bf16, float scale, bool overwrite,
                            const AdamOptions& options = {});
void AccumulateBf16Gradient(std::span<uint16_t> acc_bf16, std::span<const uint16_t> part_bf16, float scale,
                            bool overwrite, const AdamOptions& options = {});

// DeepSpeed's and PyTorch's clip_grad_norm_ coefficient: max_norm / (norm + 1e-6) when the
// global norm exceeds max_norm (> 0), else 1 (no clipping, not even by the epsilon).
inline double ClipCoefficient(double grad_norm, double max_norm) {
  return (max_norm > 0 && grad_norm > max_norm) ? max_norm / (grad_norm + 1e-6) : 1.0;
}

// The ISA path AdamStep and GradSumSquares take now (ActiveIsa(), plus whether AVX-512
// uses the hardware bf16 conversion), e.g. "avx512+bf16", for bench output and doctor.
const char* AdamIsaDescription();

}  // namespace strata
