#include "bench/adam_bench.h"

#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "bench/adam_anchors.h"
#include "bench/adam_peers.h"
#include "bench/bench_util.h"
#include "strata/check.h"
#include "strata/cpu_adam.h"
#include "strata/log.h"

namespace strata::bench {
namespace {

// Bytes moved per parameter (element), as the issue counts them.
constexpr double kAdamBytes = 28;      // fp32 p, g, m, v read; p, m, v written
constexpr double kAdamBf16Bytes = 30;  // ... plus the 2-byte bf16 copy
constexpr double kAdamBf16StatesBytes = 22;  // m, v in bf16 (read and written) with the bf16 copy
constexpr double kAdamSplitMasterBytes = 20;  // ... and the master as the copy + its low half (r2 w2)
constexpr double kAdam8BitStatesBytes = 18.1;  // m, v in 8 bits + a scale per 256 (r2.03 w2.03) with the bf16 copy
constexpr double kOneStateBytes = 20;  // Lion, Adagrad: fp32 p, g, one state read; p, the state written
constexpr double kLambBytes = 44;      // LAMB: its norm pass reads p, g, m, v (16), then Adam's 28
// Muon's element-wise half (its Newton-Schulz runs on the compute device): the direction pass
// reads g, m and writes u (12), the update reads p, g, m, o and writes p, m (24).
constexpr double kMuonBytes = 36;
constexpr double kTriadBytes = 12;     // STREAM's count: b, c read, a written
constexpr double kCastBytes = 6;       // fp32 read, bf16 written
constexpr double kNormBytes = 4;       // fp32 read

template <class T>
struct FreeDeleter {
  void operator()(T* p) const { std::free(p); }
};
template <class T>
using Array = std::unique_ptr<T[], FreeDeleter<T>>;

// 64-byte aligned, first touched by the threads that will use it (pages fault in here,
// once, not inside a timed pass: first touch runs at ~2 GB/s on this VM).
template <class T>
Array<T> AllocateTouched(size_t n, int threads, T value) {
  const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
  Array<T> a(static_cast<T*>(std::aligned_alloc(64, bytes)));
  STRATA_CHECK(a != nullptr) << "out of memory allocating " << bytes << " bytes";
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; ++i) a[i] = value;
  return a;
}

struct Variant {
  std::string key;    // JSON name
  std::string label;  // table name
  double bytes_per_param;
  uint64_t elements;  // per pass
  std::function<StatusOr<double>()> run;
  std::vector<double> seconds;
  bool once = false;  // too slow to repeat (oneDNN's reduction): measured in the first round only
};

// Per-round ratio t_a / t_b (paired within a round, so slow minutes cancel out).
Summary PairedRatio(const Variant& a, const Variant& b) {
  std::vector<double> r;
  for (size_t i = 0; i < std::min(a.seconds.size(), b.seconds.size()); ++i) r.push_back(a.seconds[i] / b.seconds[i]);
  return Summarize(r);
}

nlohmann::json Json(const Summary& s) { return {{"median", s.median}, {"min", s.min}, {"max", s.max}}; }

class Timer {
 public:
  Timer() : t0_(NowSeconds()) {}
  double Seconds() const { return NowSeconds() - t0_; }

 private:
  double t0_;
};

}  // namespace

int RunAdamBench(const AdamBenchOptions& o) {
  const size_t n = o.params;
  const int threads = o.threads;
  if (n < 1024) {
    LogError("bench adam: --params must be at least 1024");
    return 2;
  }
  if (!o.json) std::printf("strata bench adam: allocating %s for Strata's arrays ...\n", HumanBytes(n * 28).c_str());
  std::fflush(stdout);

  // Strata's data: non-trivial weights and gradients, zero states (as at step 1).
  Array<float> p = AllocateTouched<float>(n, threads, 0), g = AllocateTouched<float>(n, threads, 0);
  Array<float> m = AllocateTouched<float>(n, threads, 0), v = AllocateTouched<float>(n, threads, 0);
  Array<float> scratch = AllocateTouched<float>(n, threads, 0);
  Array<uint16_t> half = AllocateTouched<uint16_t>(n, threads, 0);
  Array<uint16_t> m16 = AllocateTouched<uint16_t>(n, threads, 0), v16 = AllocateTouched<uint16_t>(n, threads, 0);
  Array<int16_t> low = AllocateTouched<int16_t>(n, threads, 0);  // a split master's low halves
  Array<uint8_t> m8 = AllocateTouched<uint8_t>(Moment8BitBytes(n), threads, 0);  // 8-bit m and v (zero: scale 0)
  Array<uint8_t> v8 = AllocateTouched<uint8_t>(Moment8BitBytes(n), threads, 0);
#pragma omp parallel num_threads(threads)
  {
    std::mt19937 rng(1234 + omp_get_thread_num());
    std::uniform_real_distribution<float> uni(-1, 1);
#pragma omp for schedule(static)
    for (size_t i = 0; i < n; ++i) p[i] = uni(rng), g[i] = 1e-2f * uni(rng);
  }

  // Peers, each with its own copy of N parameters.
  std::unique_ptr<AdamPeer> libtorch, deepspeed, deepspeed_lion, deepspeed_adagrad;
  std::string libtorch_why = "disabled (--no-libtorch)", deepspeed_why = "disabled (--no-deepspeed)", ops_why;
  if (o.libtorch) {
    auto peer = MakeLibTorchAdamW(n, threads);
    if (peer.ok()) libtorch = std::move(*peer);
    else libtorch_why = peer.status().ToString();
  }
  if (o.deepspeed) {
    auto peer = MakeDeepSpeedCpuAdam(o.python.empty() ? DefaultPeerPython() : o.python,
                                     o.deepspeed_script.empty() ? DefaultDeepSpeedScript() : o.deepspeed_script, n,
                                     threads);
    if (peer.ok()) deepspeed = std::move(*peer);
    else deepspeed_why = peer.status().ToString();
    // DeepSpeed's CPU Lion and Adagrad, beside Strata's (Note [Update rules]).
    for (auto [name, slot] : {std::pair{"lion", &deepspeed_lion}, std::pair{"adagrad", &deepspeed_adagrad}}) {
      if (!deepspeed) break;
      auto one = MakeDeepSpeedCpuAdam(o.python.empty() ? DefaultPeerPython() : o.python,
                                      o.deepspeed_script.empty() ? DefaultDeepSpeedScript() : o.deepspeed_script, n,
                                      threads, name);
      if (one.ok()) *slot = std::move(*one);
      else ops_why += fmt::format("{}CPU {}: {}", ops_why.empty() ? "" : "; ", name, one.status().ToString());
    }
  }
  std::unique_ptr<OneDnnTransforms> onednn, onednn_odd;
  if (o.onednn) {
    onednn = MakeOneDnnTransforms(g.get(), half.get(), n);
    onednn_odd = MakeOneDnnTransforms(g.get() + 1, half.get() + 1, n - 3);  // odd size, unaligned
  }

  AdamHyperParams hp{.lr = 1e-3, .weight_decay = 0.01};
  const AdamOptions adam_options{.num_threads = threads};
  AdamSpans spans;
  spans.params = {p.get(), n};
  spans.exp_avg = {m.get(), n};
  spans.exp_avg_sq = {v.get(), n};
  spans.grad = {g.get(), n};
  AdamSpans spans_bf16 = spans;
  spans_bf16.half_out = {half.get(), n};
  AdamSpans spans_bf16_states = spans_bf16;  // strata.adam_states "bf16"
  spans_bf16_states.exp_avg = spans_bf16_states.exp_avg_sq = {};
  spans_bf16_states.exp_avg_bf16 = {m16.get(), n};
  spans_bf16_states.exp_avg_sq_bf16 = {v16.get(), n};
  AdamSpans spans_split = spans_bf16_states;  // strata.master_weights "split" (its high halves: `half`)
  spans_split.params = {};
  spans_split.master_low = {low.get(), n};
  AdamSpans spans_8bit_states = spans_bf16_states;  // strata.adam_states "8bit"
  spans_8bit_states.exp_avg_bf16 = spans_8bit_states.exp_avg_sq_bf16 = {};
  spans_8bit_states.exp_avg_8bit = {m8.get(), Moment8BitBytes(n)};
  spans_8bit_states.exp_avg_sq_8bit = {v8.get(), Moment8BitBytes(n)};
  // Lion and Adagrad keep one fp32 state: m's array (Lion) or v's (Adagrad), the other empty.
  AdamSpans spans_lion = spans, spans_adagrad = spans;
  spans_lion.exp_avg_sq = {};
  spans_adagrad.exp_avg = {};
  auto adam = [&](const AdamSpans& s, UpdateRule rule = UpdateRule::kAdam) -> StatusOr<double> {
    ++hp.step;
    hp.rule = rule;
    Timer t;
    STRATA_RETURN_IF_ERROR(AdamStep(hp, s, adam_options));
    return t.Seconds();
  };
  auto timed = [](auto&& fn) -> StatusOr<double> {
    Timer t;
    fn();
    return t.Seconds();
  };

  std::vector<Variant> vs;
  vs.push_back({"strata_fp32", "Strata AdamW fp32", kAdamBytes, n, [&] { return adam(spans); }, {}});
  vs.push_back({"strata_bf16", "Strata AdamW + fused bf16 copy", kAdamBf16Bytes, n, [&] { return adam(spans_bf16); }, {}});
  vs.push_back({"strata_bf16_states", "Strata AdamW, bf16 m and v, bf16 copy", kAdamBf16StatesBytes, n,
                [&] { return adam(spans_bf16_states); }, {}});
  vs.push_back({"strata_split_master", "Strata AdamW, bf16 m and v, split master", kAdamSplitMasterBytes, n,
                [&] { return adam(spans_split); }, {}});
  vs.push_back({"strata_8bit_states", "Strata AdamW, 8-bit m and v, bf16 copy", kAdam8BitStatesBytes, n,
                [&] { return adam(spans_8bit_states); }, {}});
  vs.push_back({"strata_lion", "Strata Lion fp32", kOneStateBytes, n,
                [&] { return adam(spans_lion, UpdateRule::kLion); }, {}});
  vs.push_back({"strata_adagrad", "Strata Adagrad fp32", kOneStateBytes, n,
                [&] { return adam(spans_adagrad, UpdateRule::kAdagrad); }, {}});
  vs.push_back({"strata_lamb", "Strata LAMB fp32: norm pass + update", kLambBytes, n, [&]() -> StatusOr<double> {
                  ++hp.step;
                  hp.rule = UpdateRule::kLamb;
                  Timer t;
                  LambSums sums;
                  STRATA_RETURN_IF_ERROR(LambNormSums(hp, spans, &sums, adam_options));
                  hp.trust_ratio = LambTrustRatio(sums.weight_sq, sums.update_sq, 0.01, 10.0);
                  STRATA_RETURN_IF_ERROR(AdamStep(hp, spans, adam_options));
                  return t.Seconds();
                }, {}});
  vs.push_back({"strata_muon", "Strata Muon fp32: direction pass + update", kMuonBytes, n, [&]() -> StatusOr<double> {
                  AdamHyperParams muon = hp;
                  muon.rule = UpdateRule::kMuon;
                  muon.beta1 = 0.95;
                  AdamSpans s = spans_lion;
                  s.muon_update = {scratch.get(), n};  // (o = u: the orthogonalisation is not this pass)
                  Timer t;
                  STRATA_RETURN_IF_ERROR(MuonNesterov(muon, s, {scratch.get(), n}, adam_options));
                  STRATA_RETURN_IF_ERROR(AdamStep(muon, s, adam_options));
                  return t.Seconds();
                }, {}});
  // The same bytes in three memory-only passes: u = f(g, m) (r2 w1), o read, the one-state pattern (r3 w2).
  vs.push_back({"roofline_muon", "roofline: triad, 1 read, one-state pattern (r6 w3)", kMuonBytes, n, [&] {
                  return timed([&] {
                    TriadPass(scratch.get(), g.get(), m.get(), n, threads);
                    (void)GradSumSquares(std::span<const float>(scratch.get(), n), adam_options);
                    RooflinePass(p.get(), g.get(), m.get(), nullptr, nullptr, n, threads);
                  });
                }, {}});
  // Four read streams (as the norm pass reads them), then the Adam pattern.
  vs.push_back({"roofline_lamb", "roofline: 4 reads, then Adam's pattern (r8 w3)", kLambBytes, n, [&] {
                  return timed([&] {
                    for (const float* x : {p.get(), g.get(), m.get(), v.get()})
                      (void)GradSumSquares(std::span<const float>(x, n), adam_options);
                    RooflinePass(p.get(), g.get(), m.get(), v.get(), nullptr, n, threads);
                  });
                }, {}});
  vs.push_back({"roofline_one_state", "roofline: one-state pattern (r3 w2)", kOneStateBytes, n,
                [&] { return timed([&] { RooflinePass(p.get(), g.get(), m.get(), nullptr, nullptr, n, threads); }); }, {}});
  vs.push_back({"roofline_fp32", "roofline: Adam pattern, no math (r4 w3)", kAdamBytes, n,
                [&] { return timed([&] { RooflinePass(p.get(), g.get(), m.get(), v.get(), nullptr, n, threads); }); }, {}});
  vs.push_back({"roofline_bf16", "roofline + 2 B copy (r4 w4)", kAdamBf16Bytes, n,
                [&] { return timed([&] { RooflinePass(p.get(), g.get(), m.get(), v.get(), half.get(), n, threads); }); }, {}});
  vs.push_back({"triad", "STREAM triad", kTriadBytes, n,
                [&] { return timed([&] { TriadPass(scratch.get(), g.get(), m.get(), n, threads); }); }, {}});
  if (libtorch) vs.push_back({"libtorch", libtorch->Describe() + " AdamW fp32", kAdamBytes, n, [&] { return libtorch->TimedStep(false); }, {}});
  if (deepspeed) {
    vs.push_back({"deepspeed", deepspeed->Describe() + " CPU Adam fp32", kAdamBytes, n, [&] { return deepspeed->TimedStep(false); }, {}});
    vs.push_back({"deepspeed_copy", deepspeed->Describe() + " step + separate bf16 copy", kAdamBf16Bytes, n,
                  [&] { return deepspeed->TimedStep(true); }, {}});
  }
  if (deepspeed_lion)
    vs.push_back({"deepspeed_lion", deepspeed_lion->Describe() + " CPU Lion fp32", kOneStateBytes, n,
                  [&] { return deepspeed_lion->TimedStep(false); }, {}});
  if (deepspeed_adagrad)
    vs.push_back({"deepspeed_adagrad", deepspeed_adagrad->Describe() + " CPU Adagrad fp32", kOneStateBytes, n,
                  [&] { return deepspeed_adagrad->TimedStep(false); }, {}});
  vs.push_back({"cast_hand", "fp32->bf16 cast, hand-written", kCastBytes, n,
                [&] { return timed([&] { HandCastFp32ToBf16(g.get(), half.get(), n, threads); }); }, {}});
  vs.push_back({"cast_hand_odd", "fp32->bf16 cast, hand-written, odd N", kCastBytes, n - 3,
                [&] { return timed([&] { HandCastFp32ToBf16(g.get() + 1, half.get() + 1, n - 3, threads); }); }, {}});
  vs.push_back({"norm_strata", "grad sum of squares + NaN check (Strata)", kNormBytes, n,
                [&] { return timed([&] { (void)GradSumSquares(std::span<const float>(g.get(), n), adam_options); }); }, {}});
  if (onednn) {
    omp_set_num_threads(threads);  // oneDNN's OpenMP runtime takes the default team size
    vs.push_back({"cast_onednn", "fp32->bf16 oneDNN reorder", kCastBytes, n, [&] { return timed([&] { onednn->ReorderFp32ToBf16(); }); }, {}});
    vs.push_back({"norm_onednn", "sum of squares, oneDNN reduction (1 run)", kNormBytes, n,
                  [&] { return timed([&] { (void)onednn->SumSquares(); }); }, {}, /*once=*/true});
  }
  if (onednn_odd) {
    vs.push_back({"cast_onednn_odd", "fp32->bf16 oneDNN reorder, odd N", kCastBytes, n - 3,
                  [&] { return timed([&] { onednn_odd->ReorderFp32ToBf16(); }); }, {}});
  }

  // One warm-up round, then interleaved rounds; each round starts at a different variant.
  for (int r = -1; r < o.rounds; ++r) {
    for (size_t k = 0; k < vs.size(); ++k) {
      Variant& var = vs[(k + static_cast<size_t>(std::max(r, 0))) % vs.size()];
      if (var.once && r != 0) continue;
      auto s = var.run();
      if (!s.ok()) {
        LogError("bench adam: {}: {}", var.label, s.status().ToString());
        return 1;
      }
      if (r >= 0) var.seconds.push_back(*s);
    }
    if (!o.json) std::fprintf(stderr, "\rround %d/%d", r + 1, o.rounds);
  }
  if (!o.json) std::fprintf(stderr, "\n");

  auto find = [&](const std::string& key) -> const Variant* {
    for (const auto& var : vs)
      if (var.key == key) return &var;
    return nullptr;
  };
  auto rate = [](const Variant& var) {  // elements per second, per round
    std::vector<double> r;
    for (double s : var.seconds) r.push_back(static_cast<double>(var.elements) / s);
    return Summarize(r);
  };
  const Variant &fp32 = *find("strata_fp32"), &bf16 = *find("strata_bf16"), &states16 = *find("strata_bf16_states");
  const Variant& split = *find("strata_split_master");
  const Variant& states8 = *find("strata_8bit_states");
  const Variant &roof32 = *find("roofline_fp32"), &roof16 = *find("roofline_bf16"), &triad = *find("triad");
  const Variant *torch = find("libtorch"), *ds = find("deepspeed"), *ds_copy = find("deepspeed_copy");
  const Variant &lion = *find("strata_lion"), &adagrad = *find("strata_adagrad"), &roof1 = *find("roofline_one_state");
  const Variant *ds_lion = find("deepspeed_lion"), *ds_adagrad = find("deepspeed_adagrad");
  const Variant &lamb = *find("strata_lamb"), &roof_lamb = *find("roofline_lamb");
  const Variant &muon = *find("strata_muon"), &roof_muon = *find("roofline_muon");

  struct Ratio {
    std::string key, what;
    std::optional<Summary> value;
    double target;
  };
  std::vector<Ratio> ratios = {
      {"roofline_fraction", "Strata fp32 / roofline (time ratio)", PairedRatio(roof32, fp32), 0.90},
      {"roofline_fraction_bf16", "Strata + bf16 copy / roofline + copy", PairedRatio(roof16, bf16), 0.90},
      {"speedup_vs_libtorch", "Strata fp32 vs LibTorch AdamW", torch ? std::optional(PairedRatio(*torch, fp32)) : std::nullopt, 5},
      {"speedup_vs_libtorch_bf16", "Strata + bf16 copy vs LibTorch AdamW", torch ? std::optional(PairedRatio(*torch, bf16)) : std::nullopt, 5},
      {"ratio_vs_deepspeed", "Strata fp32 vs DeepSpeed CPU Adam", ds ? std::optional(PairedRatio(*ds, fp32)) : std::nullopt, 1.0},
      {"ratio_vs_deepspeed_copy", "Strata fused bf16 vs DeepSpeed step + copy", ds_copy ? std::optional(PairedRatio(*ds_copy, bf16)) : std::nullopt, 1.10},
      // 20 B/param instead of 22: the speed-up a memory-bound step should show.
      {"split_master_vs_bf16_states", "split master vs fp32 master (bf16 m, v)", PairedRatio(states16, split), 1.0},
      // 18 B/param instead of 22, but an encode per moment (an absmax, a hash, a rounding):
      // whether the step is still memory-bound.
      {"states_8bit_vs_bf16", "8-bit m, v vs bf16 m, v (time ratio)", PairedRatio(states16, states8), 1.0},
      {"roofline_fraction_lion", "Strata Lion / one-state roofline", PairedRatio(roof1, lion), 0.90},
      {"roofline_fraction_adagrad", "Strata Adagrad / one-state roofline", PairedRatio(roof1, adagrad), 0.90},
      {"ratio_vs_deepspeed_lion", "Strata Lion vs DeepSpeed CPU Lion",
       ds_lion ? std::optional(PairedRatio(*ds_lion, lion)) : std::nullopt, 1.0},
      {"ratio_vs_deepspeed_adagrad", "Strata Adagrad vs DeepSpeed CPU Adagrad",
       ds_adagrad ? std::optional(PairedRatio(*ds_adagrad, adagrad)) : std::nullopt, 1.0},
      // (DeepSpeed has no CPU LAMB: its FusedLamb runs on the GPU only.)
      {"roofline_fraction_lamb", "Strata LAMB / its roofline (4 reads + Adam's)", PairedRatio(roof_lamb, lamb), 0.90},
      // (DeepSpeed has no CPU Muon: MuonWithAuxAdam runs torch operations on the device.)
      {"roofline_fraction_muon", "Strata Muon (element-wise) / its roofline", PairedRatio(roof_muon, muon), 0.90},
  };

  const double gb = 1e9;
  if (o.json) {
    nlohmann::json j;
    j["params"] = n;
    j["threads"] = threads;
    j["rounds"] = o.rounds;
    j["isa"] = AdamIsaDescription();
    j["bytes_per_param"] = kAdamBytes;
    j["params_per_s"] = rate(fp32).median;
    j["gbps"] = rate(fp32).median * kAdamBytes / gb;
    j["roofline_gbps"] = rate(roof32).median * kAdamBytes / gb;
    j["triad_gbps"] = rate(triad).median * kTriadBytes / gb;
    j["libtorch_params_per_s"] = torch ? nlohmann::json(rate(*torch).median) : nlohmann::json(nullptr);
    j["deepspeed_params_per_s"] = ds ? nlohmann::json(rate(*ds).median) : nlohmann::json(nullptr);
    j["deepspeed_copy_params_per_s"] = ds_copy ? nlohmann::json(rate(*ds_copy).median) : nlohmann::json(nullptr);
    j["bf16_copy"] = {{"bytes_per_param", kAdamBf16Bytes},
                      {"params_per_s", rate(bf16).median},
                      {"gbps", rate(bf16).median * kAdamBf16Bytes / gb},
                      {"roofline_gbps", rate(roof16).median * kAdamBf16Bytes / gb}};
    j["bf16_states"] = {{"bytes_per_param", kAdamBf16StatesBytes},
                        {"params_per_s", rate(states16).median},
                        {"gbps", rate(states16).median * kAdamBf16StatesBytes / gb}};
    j["split_master"] = {{"bytes_per_param", kAdamSplitMasterBytes},
                         {"params_per_s", rate(split).median},
                         {"gbps", rate(split).median * kAdamSplitMasterBytes / gb}};
    j["states_8bit"] = {{"bytes_per_param", kAdam8BitStatesBytes},
                        {"params_per_s", rate(states8).median},
                        {"gbps", rate(states8).median * kAdam8BitStatesBytes / gb}};
    for (const auto& r : ratios) j[r.key] = r.value ? nlohmann::json(r.value->median) : nlohmann::json(nullptr);
    nlohmann::json spread;
    for (const auto& r : ratios)
      if (r.value) spread[r.key] = Json(*r.value);
    for (const auto& var : vs) spread[var.key + "_params_per_s"] = Json(rate(var));
    j["spread"] = spread;
    if (!libtorch) j["libtorch_unavailable"] = libtorch_why;
    if (!deepspeed) j["deepspeed_unavailable"] = deepspeed_why;
    if (!ops_why.empty()) j["deepspeed_ops_unavailable"] = ops_why;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }

  std::printf("N = %zu parameters, %d threads, ISA %s, %d interleaved rounds; median (min-max)\n", n, threads,
              AdamIsaDescription(), o.rounds);
  Table table({"variant", "ms", "M elem/s", "GB/s", "B/elem"});
  for (const auto& var : vs) {
    std::vector<double> ms;
    for (double s : var.seconds) ms.push_back(s * 1e3);
    const Summary r = rate(var);
    table.Row({var.label, Format(Summarize(ms), 1), fmt::format("{:.0f}", r.median / 1e6),
               Format(Summary{r.median * var.bytes_per_param / gb, r.min * var.bytes_per_param / gb,
                              r.max * var.bytes_per_param / gb, r.n}, 1),
               fmt::format("{:.0f}", var.bytes_per_param)});
  }
  table.Print(stdout);
  std::printf("\n");
  Table verdict({"ratio (per-round pairs)", "median (min-max)", "target", "met"});
  for (const auto& r : ratios) {
    if (!r.value) {
      verdict.Row({r.what, "null", fmt::format(">= {:.2f}", r.target), "-"});
      continue;
    }
    verdict.Row({r.what, Format(*r.value, 2), fmt::format(">= {:.2f}", r.target), r.value->median >= r.target ? "yes" : "NO"});
  }
  verdict.Print(stdout);
  if (!libtorch) std::printf("LibTorch: %s\n", libtorch_why.c_str());
  if (!deepspeed) std::printf("DeepSpeed: %s\n", deepspeed_why.c_str());
  if (!ops_why.empty()) std::printf("DeepSpeed: %s\n", ops_why.c_str());
  if (!onednn) std::printf("oneDNN: not measured\n");
  return 0;
}

}  // namespace strata::bench
