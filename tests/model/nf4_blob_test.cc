// Note [NF4 base]: an NF4 weight as the flat group stores it. The blob holds bitsandbytes'
// bytes (nf4_bnb_test.cc checks QuantizeNf4 against bitsandbytes itself), and each way of
// reading it back (the tensor operations that dequantise on the compute device, the plain
// loop of the export) gives DequantizeNf4's values bitwise, in every dtype.
#include <gtest/gtest.h>

#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "src/model/nf4.h"
#include "src/model/nf4_blob.h"

namespace strata {
namespace {

TEST(Nf4Blob, SizesAreWholeWordsAndTheFieldsFollowEachOther) {
  for (int64_t n : {1, 2, 63, 64, 65, 4096, 64 * 256, 64 * 256 + 1, 300 * 77}) {
    const model::Nf4BlobLayout l = model::Nf4BlobLayout::Of(n);
    EXPECT_EQ(l.absmax_q_at, (n + 1) / 2);
    EXPECT_EQ(l.blocks, (n + 63) / 64);
    EXPECT_EQ(l.absmax2_at, l.absmax_q_at + l.blocks);
    EXPECT_EQ(l.offset_at, l.absmax2_at + 4 * ((l.blocks + 255) / 256));
    EXPECT_EQ(l.bytes % 4, 0) << n;
    EXPECT_GE(l.bytes, l.offset_at + 4);
    EXPECT_LT(l.bytes, l.offset_at + 8);
  }
}

TEST(Nf4Blob, EveryDecodingEqualsDequantizeNf4Bitwise) {
  torch::manual_seed(7);
  const std::vector<torch::Tensor> weights = {torch::randn({64, 64}) * 0.02, torch::randn({300, 77}),
                                              torch::randn({3, 33}) * 5,
                                              torch::cat({torch::zeros({4, 64}), torch::randn({60, 64})})};
  const model::Nf4Tables tables = model::Nf4Tables::On(torch::kCPU);
  for (const torch::Tensor& w : weights) {
    SCOPED_TRACE(::testing::Message() << w.sizes());
    const model::Nf4Tensor q = model::QuantizeNf4(w);
    const std::vector<std::byte> blob = model::Nf4Blob(q);
    ASSERT_EQ(static_cast<int64_t>(blob.size()), model::Nf4BlobBytes(w.numel()));
    const torch::Tensor reference = model::DequantizeNf4(q).reshape(-1);
    std::vector<float> plain(w.numel());
    model::DecodeNf4Blob(blob, w.numel(), plain.data());
    EXPECT_TRUE(torch::equal(torch::from_blob(plain.data(), {w.numel()}, torch::kFloat32), reference));
    // In a group at an odd byte offset, as a blob after a bf16 norm weight of odd length lies.
    torch::Tensor group = torch::zeros({static_cast<int64_t>(blob.size()) + 3}, torch::kUInt8);
    std::memcpy(static_cast<std::byte*>(group.data_ptr()) + 3, blob.data(), blob.size());
    for (torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
      torch::Tensor out = torch::empty({w.numel()}, dtype);
      model::DequantizeNf4Blob(group.narrow(0, 3, static_cast<int64_t>(blob.size())), w.numel(), out, tables);
      EXPECT_TRUE(torch::equal(out, model::DequantizeNf4(q, dtype).reshape(-1))) << dtype;
    }
  }
}

TEST(Nf4Blob, TheWrittenOutDynamicCodeIsCreateDynamicMapsArithmetic) {
  // bitsandbytes' create_dynamic_map in LibTorch's operations (its linspace as the AVX2 and
  // AVX-512 kernels compute it, which every machine this runs on has).
  std::vector<float> expected;
  for (int i = 0; i < 7; ++i) {
    const torch::Tensor b = torch::linspace(0.1, 1, (1 << i) + 1, torch::kFloat32);
    const torch::Tensor means = (b.narrow(0, 0, b.size(0) - 1) + b.narrow(0, 1, b.size(0) - 1)) / 2.0;
    const double scale = std::pow(10.0, i - 6);
    for (const torch::Tensor& t : {means * scale, means * -scale})
      expected.insert(expected.end(), t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  }
  expected.push_back(0.0f);
  expected.push_back(1.0f);
  std::sort(expected.begin(), expected.end());
  const auto& code = model::DynamicCodeValues();
  ASSERT_EQ(expected.size(), code.size());
  for (size_t i = 0; i < code.size(); ++i) EXPECT_EQ(code[i], expected[i]) << i;
}

}  // namespace
}  // namespace strata
