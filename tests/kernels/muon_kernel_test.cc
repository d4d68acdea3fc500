// Muon's element-wise half (Note [Update rules] in strata/cpu_adam.h), every ISA path forced in
// turn: the direction pass (MuonNesterov) and the update against torch's operations written
// out element by element in float (its lerp and its add with alpha, fused multiply-adds where
// the SIMD paths fuse, two roundings on the scalar path), bit for bit, for a momentum above and
// below one half (lerp from either end); the pass writes nothing but its output, and a tensor
// cut into slices is the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "kernels/forced_isa_test.h"
#include "strata/cast.h"
#include "strata/cpu_adam.h"
#include "strata/isa.h"

namespace strata {
namespace {

float MuonFma(bool fused, float a, float b, float c) { return fused ? std::fma(a, b, c) : a * b + c; }

// torch's lerp(start, end, w) for fp32 tensors: from the nearer end.
float TorchLerp(bool fused, float start, float end, float w) {
  return w < 0.5f ? MuonFma(fused, w, end - start, start) : MuonFma(fused, w - 1.0f, end - start, end);
}

struct MuonCase {
  size_t n;
  double momentum;
  bool decay, bf16_grad, half_copy;
  int threads;
};

class MuonIsaTest : public ForcedIsaTest {
 protected:
  void RunCase(const MuonCase& c) {
    SCOPED_TRACE(testing::Message() << "n=" << c.n << " momentum=" << c.momentum << " decay=" << c.decay
                                    << " bf16_grad=" << c.bf16_grad << " threads=" << c.threads
                                    << " isa=" << AdamIsaDescription());
    const bool fused = GetParam() != IsaLevel::kScalar;
    std::mt19937 rng(static_cast<uint32_t>(c.n * 5 + c.decay + 2 * c.bf16_grad));
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    std::vector<float> p(c.n + 3), m(c.n + 5), g(c.n + 2), o(c.n + 1), u(c.n);
    std::vector<uint16_t> g16(c.n + 7), half(c.n + 1);
    AdamHyperParams hp;
    hp.rule = UpdateRule::kMuon;
    hp.lr = 0.02;
    hp.beta1 = c.momentum;
    hp.weight_decay = c.decay ? 0.1 : 0.0;
    hp.muon_lr_ratio = std::sqrt(3.0);
    hp.grad_unscale = 1.0 / 256;
    hp.clip_coef = 0.5;
    const float gscale = static_cast<float>(hp.grad_unscale * hp.clip_coef);
    const float w = static_cast<float>(1.0 - c.momentum), mu = static_cast<float>(c.momentum);
    const float decay = static_cast<float>(1.0 - hp.lr * hp.weight_decay);
    const float neg_lr = static_cast<float>(-(hp.lr * hp.muon_lr_ratio));
    std::vector<float> want_p(c.n), want_m(c.n), want_u(c.n);
    for (size_t i = 0; i < c.n; ++i) {
      p[3 + i] = uni(rng);
      m[5 + i] = i % 11 == 0 ? 0.0f : 0.01f * uni(rng);
      o[1 + i] = 0.1f * uni(rng);
      float gi = i % 13 == 0 ? 0.0f : 256.0f * 0.05f * uni(rng);
      if (c.bf16_grad) {
        g16[7 + i] = Fp32ToBf16(gi);
        gi = Bf16ToFp32(g16[7 + i]);
      } else {
        g[2 + i] = gi;
      }
      const float gs = gi * gscale;
      want_m[i] = TorchLerp(fused, m[5 + i], gs, w);      // buf.lerp_(grad, 1 - momentum)
      want_u[i] = TorchLerp(fused, gs, want_m[i], mu);    // grad.lerp(buf, momentum)
      want_p[i] = MuonFma(fused, neg_lr, o[1 + i], p[3 + i] * decay);  // mul_(decay).add_(o, alpha)
    }
    AdamSpans s;
    s.params = {&p[3], c.n};
    s.exp_avg = {&m[5], c.n};
    if (c.bf16_grad) s.grad_bf16 = {&g16[7], c.n};
    else s.grad = {&g[2], c.n};
    if (c.half_copy) s.half_out = {&half[1], c.n};
    s.muon_update = {&o[1], c.n};

    const std::vector<float> m_before = m, p_before = p;
    ASSERT_TRUE(MuonNesterov(hp, s, u, {.num_threads = c.threads}).ok());
    EXPECT_EQ(m, m_before);
    EXPECT_EQ(p, p_before);
    EXPECT_EQ(std::memcmp(u.data(), want_u.data(), c.n * 4), 0);

    ASSERT_TRUE(AdamStep(hp, s, {.num_threads = c.threads}).ok());
    size_t bad = 0;
    for (size_t i = 0; i < c.n && bad < 5; ++i) {
      const bool ok = std::memcmp(&p[3 + i], &want_p[i], 4) == 0 && std::memcmp(&m[5 + i], &want_m[i], 4) == 0 &&
                      (!c.half_copy || half[1 + i] == Fp32ToBf16(want_p[i]));
      if (!ok) {
        ++bad;
        ADD_FAILURE() << "i=" << i << " p " << p[3 + i] << " vs " << want_p[i] << ", m " << m[5 + i] << " vs "
                      << want_m[i];
      }
    }
  }
};

TEST_P(MuonIsaTest, DirectionAndUpdateAreTorchsOperations) {
  for (size_t n : {size_t{1}, size_t{7}, size_t{33}, size_t{100003}})
    for (double momentum : {0.95, 0.3})
      for (bool bf16_grad : {false, true}) {
        const int threads = n > 1000 ? 3 : 1;
        RunCase({n, momentum, true, bf16_grad, false, threads});
        RunCase({n, momentum, false, bf16_grad, true, threads});
      }
}

// A tensor stepped in slices (its sub-groups, its ranks' ranges) is the tensor stepped whole.
TEST_P(MuonIsaTest, SlicesAreTheWholeTensor) {
  const size_t n = 50021;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> p(n), m(n), g(n), o(n), u(n), u2(n);
  for (size_t i = 0; i < n; ++i) p[i] = uni(rng), m[i] = 0.01f * uni(rng), g[i] = uni(rng), o[i] = uni(rng);
  std::vector<float> p2 = p, m2 = m;
  AdamHyperParams hp;
  hp.rule = UpdateRule::kMuon;
  hp.weight_decay = 0.05;
  hp.beta1 = 0.95;
  auto spans = [&](std::vector<float>& pp, std::vector<float>& mm) {
    AdamSpans s;
    s.params = pp, s.exp_avg = mm, s.grad = g, s.muon_update = o;
    return s;
  };
  const AdamSpans whole = spans(p, m), cut = spans(p2, m2);
  ASSERT_TRUE(MuonNesterov(hp, whole, u, {.num_threads = 2}).ok());
  ASSERT_TRUE(AdamStep(hp, whole, {.num_threads = 2}).ok());
  std::vector<std::pair<size_t, size_t>> storage;
  for (auto [lo, hi] : std::vector<std::pair<size_t, size_t>>{{0, 5000}, {5000, 20001}, {20001, 35000}, {35000, n}}) {
    const AdamSpans slice = SliceSpans(cut, lo, hi, &storage);
    ASSERT_TRUE(MuonNesterov(hp, slice, std::span<float>(u2).subspan(lo, hi - lo)).ok());
    ASSERT_TRUE(AdamStep(hp, slice).ok());
  }
  EXPECT_EQ(std::memcmp(u.data(), u2.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(p.data(), p2.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(m.data(), m2.data(), n * 4), 0);
}

INSTANTIATE_TEST_SUITE_P(Isa, MuonIsaTest, testing::Values(IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512));

TEST(MuonKernel, KeepsTheMomentumOnlyAndNeedsAnUpdatePerElement) {
  std::vector<float> p(4), m(4), v(4), g(4), o(3), u(4);
  AdamHyperParams hp;
  hp.rule = UpdateRule::kMuon;
  AdamSpans s;
  s.params = p, s.exp_avg = m, s.grad = g, s.muon_update = o;
  const Status short_update = AdamStep(hp, s);
  EXPECT_NE(short_update.message().find("orthogonalised update for each of its 4 elements; given 3"), std::string::npos)
      << short_update.ToString();
  s.muon_update = std::span<const float>(u);
  s.exp_avg_sq = v;
  EXPECT_FALSE(AdamStep(hp, s).ok());
  hp.rule = UpdateRule::kAdam;
  EXPECT_FALSE(MuonNesterov(hp, s, u).ok());
}

}  // namespace
}  // namespace strata
