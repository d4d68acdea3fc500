// Note [NF4] against bitsandbytes itself (hf_models.py nf4: quantize_4bit with quant_type
// "nf4", blocksize 64 and double quantisation, on the CPU): Strata's quantisation of the same
// tensors (fp32 and bf16, whole blocks, a tail block, an odd count, all-zero blocks) is the
// same bytes, its code tables are bitsandbytes' and its dequantisation is dequantize_4bit's,
// bitwise.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "src/checkpoint/safetensors.h"
#include "src/model/nf4.h"
#include "hf/hf_peers.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

torch::Tensor FromView(const ckpt::TensorView& t) {
  const auto dtype = t.dtype == "F32"    ? torch::kFloat32
                     : t.dtype == "BF16" ? torch::kBFloat16
                     : t.dtype == "U8"   ? torch::kUInt8
                                         : torch::kInt64;
  return torch::from_blob(const_cast<std::byte*>(t.bytes.data()), t.shape, dtype).clone();
}

TEST(Nf4VsBitsandbytes, TheSameBytesAndTheSameDequantisation) {
  testing::RequireHfPeers(" bitsandbytes", "torch + transformers + safetensors + bitsandbytes");
  testing::TempDir dir;
  const std::string file = dir.path() + "/bnb.safetensors";
  std::string out;
  ASSERT_EQ(testing::RunHfModels("nf4 " + file, &out), 0) << out;
  auto ref = ckpt::SafetensorsFile::Open(file);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  auto get = [&](const std::string& name) {
    const ckpt::TensorView* t = ref->Find(name);
    EXPECT_NE(t, nullptr) << name;
    return t ? FromView(*t) : torch::Tensor();
  };
  EXPECT_TRUE(torch::equal(model::Nf4Code(), get("nf4_code")));
  EXPECT_TRUE(torch::equal(model::DynamicCode(), get("dynamic_code")));
  for (const char* name : {"square", "tail", "odd", "bf16", "zeros"}) {
    SCOPED_TRACE(name);
    const std::string n = name;
    const torch::Tensor w = get(n + ".weight");
    const model::Nf4Tensor q = model::QuantizeNf4(w);
    EXPECT_TRUE(torch::equal(q.packed, get(n + ".packed")));
    EXPECT_TRUE(torch::equal(q.absmax_q, get(n + ".absmax_q")));
    EXPECT_TRUE(torch::equal(q.absmax2, get(n + ".absmax2")));
    EXPECT_EQ(q.offset, get(n + ".offset").item<float>());
    const torch::Tensor back = model::DequantizeNf4(q, w.scalar_type());  // bitsandbytes: in the weight's dtype
    EXPECT_TRUE(torch::equal(back.to(torch::kFloat32), get(n + ".dequant")));
    EXPECT_EQ(back.sizes(), w.sizes());
    // About 4.127 bits an element: the codes, a byte per 64, 4 bytes per 64 x 256, the offset.
    const int64_t blocks = (w.numel() + 63) / 64;
    EXPECT_EQ(q.bytes(), (w.numel() + 1) / 2 + blocks + 4 * ((blocks + 255) / 256) + 4);
  }
}

}  // namespace
}  // namespace strata
