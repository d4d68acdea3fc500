// QLoRA (strata.lora.base_dtype "nf4", Note [NF4 base]): the layers' projection weights are
// stored and moved as NF4 blobs and dequantised per block for compute. Such a run trains
// bitwise as a LoRA run whose base was given the dequantised weights, on every placement,
// rank count and the asynchronous device path; its base keeps its bytes; and it stores a
// quarter of the base's bytes or less.
#include <gtest/gtest.h>

#include "src/engine/shard_plan.h"
#include "src/model/model.h"
#include "src/model/nf4.h"
#include "tests/engine/engine_test_util.h"

namespace strata {
namespace {

using testing::RunEngine;
using testing::RunResult;
using testing::TempDir;

TrainConfig QloraConfig(const std::string& dir, DType compute) {
  TrainConfig c = testing::TinyConfig(dir);
  c.model.arch = model::Arch::kLlama;
  c.model.n_kv_head = 2;
  c.model.lora.r = 4;
  c.model.lora.alpha = 8;
  c.model.lora.target_modules = {"q_proj", "v_proj", "o_proj", "down_proj"};
  c.model.lora.base_dtype = "nf4";
  c.compute_dtype = compute;
  c.lr = 0.01;
  return c;
}

// The same model with its base in the compute dtype, holding the values NF4 gives back.
EngineHooks DequantisedBase(const model::ModelConfig& m) {
  EngineHooks hooks;
  hooks.init_weights = [m](int block, NamedTensors& params) {
    for (auto& [name, p] : params)
      if (model::StoredInNf4(m, block, name)) p.copy_(model::DequantizeNf4(model::QuantizeNf4(p)).view(p.sizes()));
    return Status();
  };
  return hooks;
}

uint64_t WorkingBytes(const MemoryLedger& l) { return l.Of(StateKind::kWorking); }

TEST(Qlora, TrainsBitwiseAsTheDequantisedBaseOnEveryPath) {
  TempDir dir;
  for (DType compute : {DType::kF32, DType::kBF16}) {
    const TrainConfig q = QloraConfig(dir.path(), compute);
    TrainConfig plain = q;
    plain.model.lora.base_dtype = "";
    const RunResult reference = RunEngine(plain, 2, 4, nullptr, DequantisedBase(q.model));
    ASSERT_EQ(reference.stats.size(), 4u);
    const FakeDeviceOptions delays{.seed = 5, .max_delay_us = 200, .copy_gbps = 0, .poison = true};
    for (Tier d : {Tier::kCpu, Tier::kNvme})
      for (bool fake : {false, true}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(compute) << ", " << OffloadDeviceName(d)
                                          << (fake ? " on the fake device" : ""));
        TrainConfig c = q;
        c.offload_param.device = c.offload_optimizer.device = d;
        const RunResult run = RunEngine(c, 2, 4, fake ? &delays : nullptr);
        ASSERT_EQ(run.stats.size(), 4u);
        for (int s = 0; s < 4; ++s) EXPECT_EQ(run.stats[s].loss, reference.stats[s].loss) << "step " << s;
        EXPECT_TRUE(testing::BitwiseEqual(run, reference)) << "max diff " << testing::MaxAbsDiff(run, reference);
        EXPECT_LT(run.stats.back().loss, run.stats.front().loss);
      }
    // Working weights on the device (offload none on the fake device), gathered at stage 3.
    const RunResult resident = RunEngine(q, 2, 4, &delays);
    EXPECT_TRUE(testing::BitwiseEqual(resident, reference));
  }
}

TEST(Qlora, TheBaseKeepsItsBytesAndTakesAQuarterOfThem) {
  TempDir dir;
  TrainConfig c = QloraConfig(dir.path(), DType::kBF16);
  c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
  const RunResult before = RunEngine(c, 1, 0), after = RunEngine(c, 1, 6);
  ASSERT_EQ(after.stats.size(), 6u);
  const model::ModelSpec spec(c.model);
  for (const auto& [name, bytes] : before.state) {
    const auto key = TensorKey::Parse(name);
    if (!key || key->role != TensorRole::kWorking) continue;
    EXPECT_EQ(bytes, after.state.at(name)) << name << ": the base on NVMe changed";  // the adapters are apart
  }
  // Per layer: the seven projections as blobs of about 4.13 bits an element instead of 16.
  for (int b = 1; b <= c.model.n_layer; ++b) {
    EXPECT_GT(spec.nf4_parameters(b), 0);
    EXPECT_LT(spec.nf4_bytes(b) * 100, spec.nf4_parameters(b) * 53) << "block " << b;
  }
  TrainConfig plain = c;
  plain.model.lora.base_dtype = "";
  const RunResult bf16 = RunEngine(plain, 1, 0);
  EXPECT_LT(WorkingBytes(after.ledger) * 2, WorkingBytes(bf16.ledger));
  // What the engine allocated is what the plan (and so `strata estimate`) says, the decode
  // buffer included.
  const RunConfig settled = testing::Settled(c, 1);
  EXPECT_TRUE(after.ledger == ShardPlan::Make(*settled, ModelShape::Of(c.model), 1, 0).ledger);
}

TEST(Qlora, RefusesABaseDtypeWithoutAdaptersOrOfAnUnknownName) {
  TempDir dir;
  model::ModelConfig m = QloraConfig(dir.path(), DType::kF32).model;
  m.lora.base_dtype = "int4";
  EXPECT_NE(model::Validate(m).message().find("strata.lora.base_dtype = \"int4\""), std::string::npos);
  m.lora.base_dtype = "nf4";
  m.lora.r = 0;
  EXPECT_NE(model::Validate(m).message().find("needs adapters"), std::string::npos);
}

}  // namespace
}  // namespace strata
