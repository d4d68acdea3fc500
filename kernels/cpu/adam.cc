// AdamStep / GradSumSquares: argument checks, per-step constants, the OpenMP split and the
// run-time choice of ISA. The arithmetic lives in adam_impl.h (templates) and the per-ISA
// files that instantiate it.
#include "strata/cpu_adam.h"
#include "strata/isa.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "adam_impl.h"
#include "strata/check.h"

namespace strata {
namespace {

using cpu::AdamArgs;

// Below this many elements per thread the OpenMP fork/join (a few microseconds) costs more
// than a second thread gains.
constexpr size_t kMinElementsPerThread = 1 << 15;
// Upper bound on threads, so that per-thread partial sums live on the stack.
constexpr int kMaxThreads = 256;

int ThreadsFor(size_t n, const AdamOptions& options) {
  const int wanted = options.num_threads > 0 ? options.num_threads : omp_get_max_threads();
  const size_t useful = std::max<size_t>(1, n / kMinElementsPerThread);
  return static_cast<int>(std::min<size_t>({static_cast<size_t>(wanted), useful, size_t{kMaxThreads}}));
}

// Thread t of nt gets [begin, end): contiguous (one sequential stream per array, which is
// what the hardware prefetchers follow best), boundaries on cache lines of `base`.
struct Range {
  size_t begin, end;
};
Range ThreadRange(const void* base, size_t elem_bytes, size_t n, int t, int nt) {
  const size_t line = 64 / elem_bytes;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(base);
  const size_t first_aligned = addr % elem_bytes ? 0 : std::min(n, ((64 - addr % 64) % 64) / elem_bytes);
  const size_t rest = n - first_aligned;
  const size_t per = (rest / nt + line - 1) / line * line;
  auto boundary = [&](int k) { return k == 0 ? 0 : k == nt ? n : std::min(n, first_aligned + k * per); };
  return {boundary(t), boundary(t + 1)};
}

// Runs fn(begin, end) over [0, n) on up to `threads` threads.
template <class Fn>
void ParallelRanges(const void* base, size_t elem_bytes, size_t n, int threads, Fn&& fn) {
  if (threads <= 1) {
    fn(0, 0, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const Range r = ThreadRange(base, elem_bytes, n, t, nt);
    if (r.begin < r.end) fn(t, r.begin, r.end);
  }
}

// The kernel of the active ISA among one function's three instantiations.
template <class Fn>
Fn ForActiveIsa(Fn avx512, Fn avx2, Fn scalar) {
  return ActiveIsa() == IsaLevel::kAvx512 ? avx512 : ActiveIsa() == IsaLevel::kAvx2 ? avx2 : scalar;
}

using AdamRangeFn = void (*)(const AdamArgs&, size_t, size_t);

AdamRangeFn PickAdamKernel() {
  switch (ActiveIsa()) {
    case IsaLevel::kAvx512:
      return DetectCpuFeatures().avx512_bf16 ? cpu::AdamRangeAvx512Bf16 : cpu::AdamRangeAvx512;
    case IsaLevel::kAvx2: return cpu::AdamRangeAvx2;
    case IsaLevel::kScalar: break;
  }
  return cpu::AdamRangeScalar;
}

bool IsFinite(double x) { return std::isfinite(x); }

Status ValidateHyperParams(const AdamHyperParams& hp) {
  if (!IsFinite(hp.lr) || hp.lr < 0) return InvalidArgument("Adam lr must be finite and >= 0, got {}", hp.lr);
  if (hp.rule != UpdateRule::kAdagrad && (!(hp.beta1 >= 0 && hp.beta1 < 1) || !(hp.beta2 >= 0 && hp.beta2 < 1)))
    return InvalidArgument("{} betas must lie in [0, 1), got ({}, {})", UpdateRuleName(hp.rule), hp.beta1, hp.beta2);
  if (hp.rule != UpdateRule::kLion && hp.rule != UpdateRule::kMuon && (!IsFinite(hp.eps) || hp.eps <= 0))
    return InvalidArgument("{} eps must be finite and > 0, got {}", UpdateRuleName(hp.rule), hp.eps);
  if (!IsFinite(hp.weight_decay) || hp.weight_decay < 0)
    return InvalidArgument("Adam weight_decay must be finite and >= 0, got {}", hp.weight_decay);
  if (hp.step < 1) return InvalidArgument("Adam step is 1-based, got {}", hp.step);
  if (hp.rule == UpdateRule::kLamb && (!IsFinite(hp.trust_ratio) || hp.trust_ratio < 0))
    return InvalidArgument("LAMB trust_ratio must be finite and >= 0, got {}", hp.trust_ratio);
  if (hp.rule == UpdateRule::kMuon && (!IsFinite(hp.muon_lr_ratio) || hp.muon_lr_ratio < 0))
    return InvalidArgument("Muon muon_lr_ratio must be finite and >= 0, got {}", hp.muon_lr_ratio);
  if (!IsFinite(hp.grad_unscale) || !IsFinite(hp.clip_coef) || hp.clip_coef < 0)
    return InvalidArgument("Adam grad_unscale ({}) and clip_coef ({}) must be finite, clip_coef >= 0",
                           hp.grad_unscale, hp.clip_coef);
  return Status::Ok();
}

// Elements of the sub-group: of the fp32 master, or of a split one's low halves.
size_t Elements(const AdamSpans& s) { return s.master_low.empty() ? s.params.size() : s.master_low.size(); }

// Lion and Muon keep exp_avg only, Adagrad exp_avg_sq only, all in fp32 (Note [Update rules]).
Status ValidateOneState(UpdateRule rule, const AdamSpans& s) {
  const size_t n = Elements(s);
  const bool keeps_m = rule != UpdateRule::kAdagrad;
  const size_t kept = keeps_m ? s.exp_avg.size() : s.exp_avg_sq.size(), other = keeps_m ? s.exp_avg_sq.size() : s.exp_avg.size();
  if (kept != n || other != 0 || !s.exp_avg_bf16.empty() || !s.exp_avg_sq_bf16.empty() || !s.exp_avg_8bit.empty() ||
      !s.exp_avg_sq_8bit.empty())
    return InvalidArgument("{} keeps {} only, {} fp32 elements; given exp_avg {}, exp_avg_sq {}{}", UpdateRuleName(rule),
                           keeps_m ? "exp_avg" : "exp_avg_sq", n, s.exp_avg.size(), s.exp_avg_sq.size(),
                           s.exp_avg_bf16.empty() && s.exp_avg_sq_bf16.empty() && s.exp_avg_8bit.empty() &&
                                   s.exp_avg_sq_8bit.empty()
                               ? ""
                               : " and bf16 or 8-bit moments");
  return Status::Ok();
}

Status ValidateSpans(UpdateRule rule, const AdamSpans& s) {
  const size_t n = Elements(s);
  if (!s.master_low.empty() && (!s.params.empty() || s.half_out.size() != n || s.half_format != HalfFormat::kBf16))
    return InvalidArgument("Adam with a split master needs no params ({} given) and {} bf16 working weights in "
                           "half_out ({} given{})", s.params.size(), n, s.half_out.size(),
                           s.half_format == HalfFormat::kBf16 ? "" : ", as fp16");
  const bool bf16_moments = !s.exp_avg_bf16.empty() || !s.exp_avg_sq_bf16.empty();
  const bool moments_8bit = !s.exp_avg_8bit.empty() || !s.exp_avg_sq_8bit.empty();
  const bool fp32_moments = !s.exp_avg.empty() || !s.exp_avg_sq.empty();
  if (rule == UpdateRule::kLamb) {
    if (bf16_moments || moments_8bit || s.exp_avg.size() != n || s.exp_avg_sq.size() != n)
      return InvalidArgument("LAMB keeps exp_avg and exp_avg_sq in fp32, {} elements each; given {} and {}{}", n,
                             s.exp_avg.size(), s.exp_avg_sq.size(),
                             bf16_moments || moments_8bit ? " and bf16 or 8-bit moments" : "");
  } else if (rule != UpdateRule::kAdam) {
    STRATA_RETURN_IF_ERROR(ValidateOneState(rule, s));
    if (rule == UpdateRule::kMuon && s.muon_update.size() != n)
      return InvalidArgument("Muon needs an orthogonalised update for each of its {} elements; given {}", n,
                             s.muon_update.size());
  } else if (moments_8bit) {
    if (bf16_moments || fp32_moments || s.exp_avg_8bit.size() != Moment8BitBytes(n) ||
        s.exp_avg_sq_8bit.size() != Moment8BitBytes(n))
      return InvalidArgument("Adam with 8-bit moments needs exactly two blobs of {} bytes for {} elements (given {} "
                             "and {}) and no other moments", Moment8BitBytes(n), n, s.exp_avg_8bit.size(),
                             s.exp_avg_sq_8bit.size());
  } else {
    const size_t m = bf16_moments ? s.exp_avg_bf16.size() : s.exp_avg.size();
    const size_t v = bf16_moments ? s.exp_avg_sq_bf16.size() : s.exp_avg_sq.size();
    if (m != n || v != n || (bf16_moments && fp32_moments))
      return InvalidArgument("Adam spans differ in length or kind: params {}, exp_avg {}, exp_avg_sq {}, "
                             "exp_avg_bf16 {}, exp_avg_sq_bf16 {}", n, s.exp_avg.size(), s.exp_avg_sq.size(),
                             s.exp_avg_bf16.size(), s.exp_avg_sq_bf16.size());
  }
  if (n == 0) return Status::Ok();
  const bool fp32 = s.grad.size() == n && s.grad_bf16.empty();
  const bool bf16 = s.grad_bf16.size() == n && s.grad.empty();
  if (!fp32 && !bf16)
    return InvalidArgument("Adam needs exactly one gradient of {} elements; got grad {}, grad_bf16 {}", n,
                           s.grad.size(), s.grad_bf16.size());
  if (!s.half_out.empty() && s.half_out.size() != n)
    return InvalidArgument("Adam half_out has {} elements, params {}", s.half_out.size(), n);
  for (size_t i = 0; i < s.no_decay.size(); ++i) {
    const auto [lo, hi] = s.no_decay[i];
    if (lo >= hi || hi > n || (i > 0 && lo < s.no_decay[i - 1].second))
      return InvalidArgument("Adam no_decay range {} [{}, {}) is empty, past the {} elements or not after the one "
                             "before", i, lo, hi, n);
  }
  if (moments_8bit && !s.no_decay.empty())
    return InvalidArgument("Adam with 8-bit moments takes no no_decay ranges (its blocks of {} are encoded whole)",
                           cpu::kBlock8Bit);
  if ((bf16_moments || moments_8bit) && s.rounding_index > UINT64_MAX - n)
    return InvalidArgument("Adam rounding_index {} + {} elements overflows 64 bits", s.rounding_index, n);
  return Status::Ok();
}

AdamArgs MakeArgs(const AdamHyperParams& hp, const AdamSpans& s) {
  AdamArgs a;
  a.p = s.params.data();
  a.lo = s.master_low.data();
  a.master_kind = s.master_low.empty() ? cpu::MasterKind::kFp32 : cpu::MasterKind::kSplit;
  a.m = s.exp_avg.data();
  a.v = s.exp_avg_sq.data();
  a.m16 = s.exp_avg_bf16.data();
  a.v16 = s.exp_avg_sq_bf16.data();
  a.moment_kind = !s.exp_avg_bf16.empty()   ? cpu::MomentKind::kBf16
                  : !s.exp_avg_8bit.empty() ? cpu::MomentKind::k8Bit
                                            : cpu::MomentKind::kFp32;
  if (a.moment_kind == cpu::MomentKind::k8Bit) {
    const size_t n = Elements(s);
    a.m8 = s.exp_avg_8bit.data();
    a.v8 = s.exp_avg_sq_8bit.data();
    a.m8_scale = cpu::Scales8Bit(a.m8, n);
    a.v8_scale = cpu::Scales8Bit(a.v8, n);
  }
  a.grad_kind = s.grad.empty() ? cpu::GradKind::kBf16 : cpu::GradKind::kFp32;
  a.g32 = s.grad.data();
  a.g16 = s.grad_bf16.data();
  a.half = s.half_out.data();
  a.half_kind = s.half_out.empty()                      ? cpu::HalfKind::kNone
                : s.half_format == HalfFormat::kBf16 ? cpu::HalfKind::kBf16
                                                     : cpu::HalfKind::kFp16;
  // Every constant in double, rounded to fp32 once (see AdamHyperParams).
  a.beta1 = static_cast<float>(hp.beta1);
  a.one_minus_beta1 = static_cast<float>(1.0 - hp.beta1);
  a.beta2 = static_cast<float>(hp.beta2);
  a.one_minus_beta2 = static_cast<float>(1.0 - hp.beta2);
  a.grad_scale = static_cast<float>(hp.grad_unscale * hp.clip_coef);
  a.decay = static_cast<float>(1.0 - hp.lr * hp.weight_decay);
  // Bias corrections: beta^t for t in the millions underflows gracefully to 0.
  const double t = static_cast<double>(hp.step);
  const double bc1 = hp.bias_correction ? 1.0 - std::pow(hp.beta1, t) : 1.0;
  const double bc2 = hp.bias_correction ? 1.0 - std::pow(hp.beta2, t) : 1.0;
  a.neg_step_size = static_cast<float>(-hp.lr / bc1);
  a.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  a.eps = static_cast<float>(hp.eps);
  a.rule = hp.rule;
  a.neg_lr = static_cast<float>(-hp.lr);
  if (hp.rule == UpdateRule::kAdagrad) {  // coupled: the gradient takes wd * p, the weights no factor
    a.l2 = static_cast<float>(hp.weight_decay);
    a.decay = 1;
  }
  if (hp.rule == UpdateRule::kLamb) {  // FusedLamb: u = m / denom + wd p, p -= (step_size trust) u
    a.l2 = static_cast<float>(hp.weight_decay);
    a.decay = 1;
    const float step_size = static_cast<float>(hp.bias_correction ? hp.lr * std::sqrt(bc2) / bc1 : hp.lr);
    a.neg_step_size = -(step_size * static_cast<float>(hp.trust_ratio));  // as FusedLamb multiplies them, in fp32
    a.eps_in = hp.eps_inside_sqrt ? a.eps : 0.0f;
    a.eps = hp.eps_inside_sqrt ? 0.0f : a.eps;
  }
  if (hp.rule == UpdateRule::kMuon) {  // torch: lerp weights in fp32, the step's alpha lr * ratio in double
    a.o = s.muon_update.data();
    a.lerp_coef = a.one_minus_beta1;
    a.lerp_small = a.lerp_coef < 0.5f;
    if (!a.lerp_small) a.lerp_coef -= 1.0f;
    a.nesterov_coef = a.beta1;
    a.nesterov_small = a.beta1 < 0.5f;
    if (!a.nesterov_small) a.nesterov_coef -= 1.0f;
    a.neg_lr = static_cast<float>(-(hp.lr * hp.muon_lr_ratio));
  }
  return a;
}

// Runs the kernel over [begin, end) of one thread. The kernel counts elements in 32 bits
// (cheap in SIMD): a range whose global indices (rounding_index + i) cross a multiple of 2^32
// runs in pieces, each with the key of its indices' high half.
// 8-bit moments: pieces end on a block boundary (the first at or after the index's), and a
// block that crosses one keeps the key of its first element.
void RunAdamRange(AdamRangeFn kernel, const AdamArgs& args, const AdamSpans& s, size_t begin, size_t end) {
  if (args.moment_kind == cpu::MomentKind::kFp32) return kernel(args, begin, end);
  const size_t unit = args.moment_kind == cpu::MomentKind::k8Bit ? cpu::kBlock8Bit : 1;
  AdamArgs a = args;
  a.sr_base = static_cast<uint32_t>(s.rounding_index);
  while (begin < end) {
    const uint64_t index = s.rounding_index + begin;
    const uint64_t to_boundary = (uint64_t{1} << 32) - (index & 0xffffffffu);
    const uint64_t piece = (to_boundary + unit - 1) / unit * unit;
    const size_t piece_end = static_cast<size_t>(std::min<uint64_t>(end, begin + piece));
    a.sr_key = cpu::RoundingKey(s.rounding_seed, index >> 32);
    kernel(a, begin, piece_end);
    begin = piece_end;
  }
}

template <class T>
GradStats SumSquaresParallel(const T* x, size_t n, const AdamOptions& options,
                             double (*kernel)(const T*, size_t, size_t)) {
  double partial[kMaxThreads] = {};
  ParallelRanges(x, sizeof(T), n, ThreadsFor(n, options),
                 [&](int t, size_t b, size_t e) { partial[t] = kernel(x, b, e); });
  double sum = 0;
  for (double s : partial) sum += s;  // fixed order: deterministic for a thread count
  return {sum, std::isfinite(sum)};
}

}  // namespace

Status AdamStep(const AdamHyperParams& hp, const AdamSpans& spans, const AdamOptions& options) {
  STRATA_RETURN_IF_ERROR(ValidateHyperParams(hp));
  STRATA_RETURN_IF_ERROR(ValidateSpans(hp.rule, spans));
  const size_t n = Elements(spans);
  if (n == 0) return Status::Ok();
  const AdamArgs args = MakeArgs(hp, spans);
  const AdamRangeFn kernel = PickAdamKernel();
  const bool split = args.master_kind == cpu::MasterKind::kSplit;
  if (args.moment_kind == cpu::MomentKind::k8Bit) {  // whole blocks per thread
    const size_t blocks = (n + cpu::kBlock8Bit - 1) / cpu::kBlock8Bit;
    ParallelRanges(nullptr, 1, blocks, ThreadsFor(n, options), [&](int, size_t b, size_t e) {
      RunAdamRange(kernel, args, spans, b * cpu::kBlock8Bit, std::min(n, e * cpu::kBlock8Bit));
    });
    return Status::Ok();
  }
  AdamHyperParams plain = hp;  // for the no-decay ranges
  plain.weight_decay = 0;
  const AdamArgs no_decay = spans.no_decay.empty() ? args : MakeArgs(plain, spans);
  ParallelRanges(split ? static_cast<const void*>(args.lo) : args.p, split ? 2 : sizeof(float), n,
                 ThreadsFor(n, options), [&](int, size_t b, size_t e) {
                   for (const auto& [lo, hi] : spans.no_decay) {  // the decayed part before each, then it
                     if (hi <= b) continue;
                     if (lo >= e) break;
                     if (lo > b) RunAdamRange(kernel, args, spans, b, lo);
                     const size_t stop = std::min(hi, e);
                     RunAdamRange(kernel, no_decay, spans, std::max(lo, b), stop);
                     b = stop;
                   }
                   if (b < e) RunAdamRange(kernel, args, spans, b, e);
                 });
  return Status::Ok();
}

AdamSpans SliceSpans(const AdamSpans& s, size_t begin, size_t end, std::vector<std::pair<size_t, size_t>>* no_decay) {
  STRATA_CHECK(s.exp_avg_8bit.empty() && s.exp_avg_sq_8bit.empty()) << "8-bit moments are encoded in whole blocks";
  STRATA_CHECK(begin <= end && end <= Elements(s)) << "[" << begin << ", " << end << ") of " << Elements(s);
  const size_t n = end - begin;
  auto cut = [&](auto span) { return span.empty() ? span : span.subspan(begin, n); };
  AdamSpans out = s;
  out.params = cut(s.params);
  out.exp_avg = cut(s.exp_avg);
  out.exp_avg_sq = cut(s.exp_avg_sq);
  out.grad = cut(s.grad);
  out.grad_bf16 = cut(s.grad_bf16);
  out.half_out = cut(s.half_out);
  out.exp_avg_bf16 = cut(s.exp_avg_bf16);
  out.exp_avg_sq_bf16 = cut(s.exp_avg_sq_bf16);
  out.master_low = cut(s.master_low);
  out.muon_update = cut(s.muon_update);
  out.rounding_index = s.rounding_index + begin;
  no_decay->clear();
  for (const auto& [lo, hi] : s.no_decay)
    if (lo < end && hi > begin) no_decay->emplace_back(std::max(lo, begin) - begin, std::min(hi, end) - begin);
  out.no_decay = *no_decay;
  return out;
}

Status LambNormSums(const AdamHyperParams& hp, const AdamSpans& spans, LambSums* sums, const AdamOptions& options) {
  if (hp.rule != UpdateRule::kLamb) return InvalidArgument("LambNormSums takes the LAMB rule, not {}", UpdateRuleName(hp.rule));
  STRATA_RETURN_IF_ERROR(ValidateHyperParams(hp));
  STRATA_RETURN_IF_ERROR(ValidateSpans(hp.rule, spans));
  *sums = {};
  const size_t n = Elements(spans);
  if (n == 0) return Status::Ok();
  const AdamArgs args = MakeArgs(hp, spans);
  AdamHyperParams plain = hp;
  plain.weight_decay = 0;
  const AdamArgs no_decay = MakeArgs(plain, spans);
  using SumsFn = void (*)(const AdamArgs&, size_t, size_t, double*, double*);
  const SumsFn kernel = ForActiveIsa<SumsFn>(cpu::LambSumsAvx512, cpu::LambSumsAvx2, cpu::LambSumsScalar);
  double w[kMaxThreads] = {}, u[kMaxThreads] = {};
  const bool split = args.master_kind == cpu::MasterKind::kSplit;
  ParallelRanges(split ? static_cast<const void*>(args.lo) : args.p, split ? 2 : sizeof(float), n,
                 ThreadsFor(n, options), [&](int t, size_t b, size_t e) {
                   for (const auto& [lo, hi] : spans.no_decay) {  // as AdamStep cuts them
                     if (hi <= b) continue;
                     if (lo >= e) break;
                     if (lo > b) kernel(args, b, lo, &w[t], &u[t]);
                     const size_t stop = std::min(hi, e);
                     kernel(no_decay, std::max(lo, b), stop, &w[t], &u[t]);
                     b = stop;
                   }
                   if (b < e) kernel(args, b, e, &w[t], &u[t]);
                 });
  for (int t = 0; t < kMaxThreads; ++t) {  // fixed order: deterministic for a thread count
    sums->weight_sq += w[t];
    sums->update_sq += u[t];
  }
  return Status::Ok();
}

Status MuonNesterov(const AdamHyperParams& hp, const AdamSpans& spans, std::span<float> out, const AdamOptions& options) {
  if (hp.rule != UpdateRule::kMuon) return InvalidArgument("MuonNesterov takes the Muon rule, not {}", UpdateRuleName(hp.rule));
  STRATA_RETURN_IF_ERROR(ValidateHyperParams(hp));
  const size_t n = spans.grad.empty() ? spans.grad_bf16.size() : spans.grad.size();
  if (spans.exp_avg.size() != n || out.size() != n || (!spans.grad.empty() && !spans.grad_bf16.empty()))
    return InvalidArgument("MuonNesterov needs one gradient, exp_avg and out of one length; given {} + {}, {} and {}",
                           spans.grad.size(), spans.grad_bf16.size(), spans.exp_avg.size(), out.size());
  if (n == 0) return Status::Ok();
  const AdamArgs args = MakeArgs(hp, spans);
  using NesterovFn = void (*)(const AdamArgs&, size_t, size_t, float*);
  const NesterovFn kernel = ForActiveIsa<NesterovFn>(cpu::MuonNesterovAvx512, cpu::MuonNesterovAvx2, cpu::MuonNesterovScalar);
  ParallelRanges(out.data(), sizeof(float), n, ThreadsFor(n, options),
                 [&](int, size_t b, size_t e) { kernel(args, b, e, out.data()); });
  return Status::Ok();
}

double LambTrustRatio(double weight_sq, double update_sq, double min_coeff, double max_coeff) {
  const float w = std::sqrt(static_cast<float>(weight_sq)), u = std::sqrt(static_cast<float>(update_sq));
  if (w == 0 || u == 0) return 1.0;
  float coeff = w / u;
  if (coeff > static_cast<float>(max_coeff)) coeff = static_cast<float>(max_coeff);
  if (coeff < static_cast<float>(min_coeff)) coeff = static_cast<float>(min_coeff);
  return coeff;
}

const char* UpdateRuleName(UpdateRule r) {
  switch (r) {
    case UpdateRule::kAdam: return "Adam";
    case UpdateRule::kLion: return "Lion";
    case UpdateRule::kAdagrad: return "Adagrad";
    case UpdateRule::kLamb: return "LAMB";
    case UpdateRule::kMuon: return "Muon";
  }
  return "?";
}

size_t Moment8BitBytes(size_t n) { return cpu::Blob8BitBytes(n); }

namespace {

void Encode8Bit(bool is_v, std::span<const float> x, std::span<uint8_t> blob, uint64_t seed, uint64_t index,
                bool nearest) {
  const size_t n = x.size();
  STRATA_CHECK(blob.size() == Moment8BitBytes(n)) << blob.size() << " bytes for " << n << " elements";
  float* scales = cpu::Scales8Bit(blob.data(), n);
  uint32_t hash[cpu::kBlock8Bit];
  for (size_t i = 0; i < n; i += cpu::kBlock8Bit) {  // as RunAdamRange keys them
    const uint64_t first = index + i;
    const uint32_t counter = static_cast<uint32_t>(first) + cpu::RoundingKey(seed, first >> 32);
    const size_t k = std::min(cpu::kBlock8Bit, n - i);
    float* scale = scales + i / cpu::kBlock8Bit;
    if (!nearest) cpu::Hashes8BitBlock(counter, k, hash);
    const uint32_t* bits = nearest ? nullptr : hash;
    if (is_v) cpu::Encode8BitBlock<cpu::FormatV, false>(x.data() + i, k, blob.data() + i, scale, bits, 16);
    else cpu::Encode8BitBlock<cpu::FormatM, true>(x.data() + i, k, blob.data() + i, scale, bits, 0);
  }
}

}  // namespace

void EncodeMoment8Bit(bool is_v, std::span<const float> x, std::span<uint8_t> blob, uint64_t seed, uint64_t index) {
  Encode8Bit(is_v, x, blob, seed, index, /*nearest=*/false);
}

void EncodeMoment8BitNearest(bool is_v, std::span<const float> x, std::span<uint8_t> blob) {
  Encode8Bit(is_v, x, blob, 0, 0, /*nearest=*/true);
}

void DecodeMoment8Bit(bool is_v, std::span<const uint8_t> blob, std::span<float> x) {
  const size_t n = x.size();
  STRATA_CHECK(blob.size() == Moment8BitBytes(n)) << blob.size() << " bytes for " << n << " elements";
  const float* scales = cpu::Scales8Bit(blob.data(), n);
  for (size_t i = 0; i < n; i += cpu::kBlock8Bit) {
    const size_t k = std::min(cpu::kBlock8Bit, n - i);
    if (is_v) cpu::Decode8BitBlock<cpu::FormatV, false>(blob.data() + i, scales[i / cpu::kBlock8Bit], k, x.data() + i);
    else cpu::Decode8BitBlock<cpu::FormatM, true>(blob.data() + i, scales[i / cpu::kBlock8Bit], k, x.data() + i);
  }
}

uint32_t AdamRoundingBits(uint64_t seed, uint64_t index) {
  return cpu::RoundingBits<cpu::ScalarOps<false>>(static_cast<uint32_t>(index) + cpu::RoundingKey(seed, index >> 32));
}

uint64_t MixRoundingSeed(uint64_t a, uint64_t b) { return cpu::SplitMix64(cpu::SplitMix64(a) ^ b); }

GradStats GradSumSquares(std::span<const float> grad, const AdamOptions& options) {
  auto kernel = ForActiveIsa(cpu::SumSquaresAvx512, cpu::SumSquaresAvx2, cpu::SumSquaresScalar);
  return SumSquaresParallel(grad.data(), grad.size(), options, kernel);
}

GradStats GradSumSquares(std::span<const uint16_t> grad_bf16, const AdamOptions& options) {
  auto kernel = ForActiveIsa(cpu::SumSquaresBf16Avx512, cpu::SumSquaresBf16Avx2, cpu::SumSquaresBf16Scalar);
  return SumSquaresParallel(grad_bf16.data(), grad_bf16.size(), options, kernel);
}

namespace {

template <class Acc, class Part>
void AccumulateParallel(std::span<Acc> acc, std::span<const Part> part, float scale, bool overwrite,
                        const AdamOptions& options) {
  STRATA_CHECK(acc.size() == part.size()) << acc.size() << " vs " << part.size();
  using Kernel = void (*)(Acc*, const Part*, float, bool, size_t, size_t);
  const Kernel kernel = ForActiveIsa<Kernel>(cpu::AccumulateAvx512, cpu::AccumulateAvx2, cpu::AccumulateScalar);
  ParallelRanges(acc.data(), sizeof(Acc), acc.size(), ThreadsFor(acc.size(), options),
                 [&](int, size_t b, size_t e) { kernel(acc.data(), part.data(), scale, overwrite, b, e); });
}

}  // namespace

void AccumulateGradient(std::span<float> acc, std::span<const float> part, float scale, bool overwrite,
                        const AdamOptions& options) {
  AccumulateParallel(acc, part, scale, overwrite, options);
}

void AccumulateGradient(std::span<uint16_t> acc_bf16, std::span<const float> part, float scale, bool overwrite,
                        const AdamOptions& options) {
  AccumulateParallel(acc_bf16, part, scale, overwrite, options);
}

void AccumulateBf16Gradient(std::span<float> acc, std::span<const uint16_t> part_bf16, float scale, bool overwrite,
                            const AdamOptions& options) {
  AccumulateParallel(acc, part_bf16, scale, overwrite, options);
}

void AccumulateBf16Gradient(std::span<uint16_t> acc_bf16, std::span<const uint16_t> part_bf16, float scale,
                            bool overwrite, const AdamOptions& options) {
  AccumulateParallel(acc_bf16, part_bf16, scale, overwrite, options);
}

void SplitMasterWeights(std::span<const float> master, std::span<uint16_t> working_bf16,
                        std::span<int16_t> master_low) {
  STRATA_CHECK(master.size() == working_bf16.size() && master.size() == master_low.size())
      << master.size() << " vs " << working_bf16.size() << " vs " << master_low.size();
  auto kernel = ForActiveIsa(cpu::SplitMasterAvx512, cpu::SplitMasterAvx2, cpu::SplitMasterScalar);
  kernel(master.data(), working_bf16.data(), master_low.data(), master.size());
}

void SplitMasterWeightsInPlace(float* master, size_t n, uint16_t* working_bf16) {
  // In chunks: chunk [s, s + k)'s low halves go to bytes [2s, 2s + 2k), below the first
  // element not yet read (byte 4(s + k)).
  constexpr size_t kChunk = 4096;
  int16_t low[kChunk];
  auto* bytes = reinterpret_cast<std::byte*>(master);
  for (size_t s = 0; s < n; s += kChunk) {
    const size_t k = std::min(kChunk, n - s);
    SplitMasterWeights({master + s, k}, {working_bf16 + s, k}, {low, k});
    std::memcpy(bytes + 2 * s, low, 2 * k);
  }
}

void JoinMasterWeights(std::span<const uint16_t> working_bf16, std::span<const int16_t> master_low,
                       std::span<float> master) {
  STRATA_CHECK(master.size() == working_bf16.size() && master.size() == master_low.size())
      << master.size() << " vs " << working_bf16.size() << " vs " << master_low.size();
  auto kernel = ForActiveIsa(cpu::JoinMasterAvx512, cpu::JoinMasterAvx2, cpu::JoinMasterScalar);
  kernel(working_bf16.data(), master_low.data(), master.data(), master.size());
}

const char* AdamIsaDescription() {
  switch (ActiveIsa()) {
    case IsaLevel::kAvx512: return DetectCpuFeatures().avx512_bf16 ? "avx512+bf16" : "avx512";
    case IsaLevel::kAvx2: return "avx2+fma+f16c";
    case IsaLevel::kScalar: break;
  }
  return "scalar";
}

}  // namespace strata
