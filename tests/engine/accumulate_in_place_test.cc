// Note [Accumulation in place] (src/engine/engine_accumulate.cc): alone on the host, each
// parameter's gradient is added into the accumulator straight from .grad. The fake device
// (no delays) takes the flattening path on the same arithmetic: flat buffer, copy out, the
// same kernel on the host. Bitwise the same, for fp32 and bf16 compute and accumulators,
// with LoRA's partial ranges and a planted overflow.
#include <gtest/gtest.h>

#include <functional>

#include "engine/engine_test_util.h"

namespace strata {
namespace {

struct InPlaceCase {
  const char* name;
  std::function<void(TrainConfig&)> configure;
};

TEST(AccumulationInPlace, IsBitwiseTheFlatteningPath) {
  const InPlaceCase cases[] = {
      {"fp32", [](TrainConfig&) {}},
      {"bf16_compute_bf16_accumulators", [](TrainConfig& c) {
         c.compute_dtype = DType::kBF16;
         c.grad_accum_dtype = DType::kBF16;
       }},
      {"bf16_compute_overflow", [](TrainConfig& c) {
         c.compute_dtype = DType::kBF16;
         c.debug_overflow_step = 1;
       }},
      {"lora", [](TrainConfig& c) {
         c.model.lora.r = 4;
         c.model.lora.alpha = 8;
         c.model.lora.target_modules = {"q_proj", "up_proj"};
         c.lr = 0.01;
       }},
  };
  for (const InPlaceCase& k : cases) {
    SCOPED_TRACE(k.name);
    testing::TempDir dir;
    TrainConfig c = testing::TinyConfig(dir.path());
    c.model.arch = model::Arch::kLlama;
    c.model.tie_embeddings = false;
    c.model.n_kv_head = 2;
    c.grad_accum = 3;
    c.offload_optimizer.device = Tier::kCpu;
    k.configure(c);
    const testing::RunResult host = testing::RunEngine(c, 1, 3);
    const FakeDeviceOptions fake{.seed = 1, .max_delay_us = 0};
    const testing::RunResult flattened = testing::RunEngine(c, 1, 3, &fake);
    testing::ExpectSameRun(host, flattened, 3);
  }
}

}  // namespace
}  // namespace strata
