// Note [Grouped-query attention] (src/model/layers.h): attention reads the shared key/value
// heads in the kernel instead of copies of them. Against the repeated heads: the same output
// and query gradient bit for bit, key/value gradients within 1e-6 in fp32, in training and in
// the cached (generation) path; and on the CPU the fused kernel, not the math fallback, runs.
#include <gtest/gtest.h>

#include "src/model/layers.h"

namespace strata::model {
namespace {

struct Grads {
  torch::Tensor y, q, k, v;
};

// `repeat`: the heads copied first (what the code did before), else CausalAttention.
Grads Attention(const torch::Tensor& q0, const torch::Tensor& k0, const torch::Tensor& v0, const torch::Tensor& dy,
          bool repeat) {
  torch::Tensor q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true),
                v = v0.clone().requires_grad_(true);
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  torch::Tensor y = repeat ? at::scaled_dot_product_attention(q, detail::RepeatKv(k, H), detail::RepeatKv(v, H), {}, 0.0,
                                                              true)
                                 .transpose(1, 2)
                                 .reshape({B, T, H * D})
                           : detail::CausalAttention(q, k, v, /*packed=*/nullptr);
  y.backward(dy);
  return {y.detach(), q.grad(), k.grad(), v.grad()};
}

double MaxRelative(const torch::Tensor& got, const torch::Tensor& want) {
  return (got - want).abs().max().item<double>() / want.abs().max().item<double>();
}

TEST(GroupedQueryAttention, ReadsTheSharedHeadsWithTheRepeatedHeadsResults) {
  torch::manual_seed(3);
  for (int64_t kv : {1, 2, 4, 8}) {  // multi-query, grouped, and (8 of 8) plain
    SCOPED_TRACE(::testing::Message() << kv << " key/value heads of 8");
    const int64_t B = 2, H = 8, T = 24, D = 16;
    const torch::Tensor q = torch::randn({B, H, T, D}), k = torch::randn({B, kv, T, D}),
                        v = torch::randn({B, kv, T, D}), dy = torch::randn({B, T, H * D});
    const Grads want = Attention(q, k, v, dy, /*repeat=*/true), got = Attention(q, k, v, dy, false);
    EXPECT_TRUE(torch::equal(got.y, want.y));
    EXPECT_TRUE(torch::equal(got.q, want.q));
    EXPECT_LE(MaxRelative(got.k, want.k), 1e-6);
    EXPECT_LE(MaxRelative(got.v, want.v), 1e-6);
    EXPECT_NE(at::_fused_sdp_choice(q, k, v, {}, 0.0, true, std::nullopt, kv != H), 0)
        << "the CPU's grouped-query attention fell back to the math kernel";
  }
}

TEST(GroupedQueryAttention, CachedPathMatchesTheRepeatedHeads) {
  torch::manual_seed(4);
  const int64_t B = 1, H = 6, Hkv = 2, D = 8;
  KvCache cache, repeated;
  for (int64_t step = 0; step < 3; ++step) {  // a prompt of 5, then one token at a time
    const int64_t T = step == 0 ? 5 : 1;
    const torch::Tensor q = torch::randn({B, H, T, D}), k = torch::randn({B, Hkv, T, D}), v = torch::randn({B, Hkv, T, D});
    const torch::Tensor got = detail::CachedCausalAttention(q, k, v, cache);
    const int64_t past = repeated.length();
    repeated.k = past == 0 ? k : torch::cat({repeated.k, k}, 2);
    repeated.v = past == 0 ? v : torch::cat({repeated.v, v}, 2);
    auto i64 = torch::TensorOptions().dtype(torch::kLong);
    const torch::Tensor mask = torch::arange(past + T, i64).unsqueeze(0) <= (torch::arange(T, i64) + past).unsqueeze(1);
    const torch::Tensor want =
        at::scaled_dot_product_attention(q, detail::RepeatKv(repeated.k, H), detail::RepeatKv(repeated.v, H), mask)
            .transpose(1, 2)
            .reshape({B, T, H * D});
    EXPECT_TRUE(torch::equal(got, want)) << "step " << step;
  }
}

}  // namespace
}  // namespace strata::model
