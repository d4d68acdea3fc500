// The estimator's per-rank bytes against what the engine allocates (Engine::ledger()), for
// the shipped configs (shrunk) and variations of stage, offload, precision and architecture.
#include "src/estimate/estimator.h"
#include "src/estimate/host_blocks_fit.h"
#include "src/estimate/step_time.h"
#include "src/settle/settle_autos.h"
#include "src/settle/settle_keys.h"
#include "src/settle/largest_fit.h"

#include <gtest/gtest.h>

#include "checkpoint/ckpt_test_util.h"
#include "support/temp_dir.h"
#include "support/settled.h"

namespace strata {
namespace {

// Every cell (state kind x residence) of rank 0's ledger, as the engine measured what it
// allocated, equals the estimator's, to the byte.
// `on_device`: the engine runs on the fake asynchronous device, the estimate is for a GPU
// (double buffers, residency, the device tier).
void ExpectEstimateMatchesLedger(const TrainConfig& cfg, int world, const std::string& what, bool on_device = false) {
  SCOPED_TRACE(fmt::format("{}, {} rank(s), stage {}, params {}, optimizer {}, {}, {}, resident {}", what, world,
                           cfg.zero_stage, OffloadDeviceName(cfg.offload_param.device),
                           OffloadDeviceName(cfg.offload_optimizer.device), DTypeName(cfg.compute_dtype),
                           on_device ? "device" : "host", cfg.resident_blocks));
  const RunConfig run = testing::Settled(cfg, world, !on_device);  // what the engine is given
  const MemoryEstimate e = EstimateMemory(*run, world, 0, {!on_device});
  MemoryLedger measured;
  auto device_comms = MakeLocalCommunicators(world);
  ASSERT_EQ(testing::RunRanks(world,
                              [&](int r, Communicator& c) -> Status {
                                std::unique_ptr<ComputeDevice> dev =
                                    on_device ? MakeFakeAsyncDevice(device_comms[r].get(), {}) : MakeHostDevice(&c);
                                STRATA_ASSIGN_OR_RETURN(auto eng, Engine::Create(run, &c, nullptr, {}, dev.get()));
                                if (r == 0) measured = eng->ledger();
                                return Status();
                              }),
            "");
  for (int k = 0; k < kNumStateKinds; ++k)
    for (int t = 0; t < 3; ++t) EXPECT_EQ(e.ledger.bytes[k][t], measured.bytes[k][t]) << "state kind " << k << ", tier " << t;
}

// A shipped config with its model shrunk to a few kB (same architecture, tie and every other
// setting), its swap folder in `dir`, and sub-groups small enough that blocks have several.
TrainConfig Shrunk(const std::string& file, const std::string& dir) {
  auto cfg = LoadTrainConfig(STRATA_SOURCE_DIR "/configs/" + file);
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  ResolvePrecision(&*cfg, /*on_gpu=*/false);
  model::ModelConfig& m = cfg->model;
  m.vocab_size = 256;
  m.seq_len = 32;
  m.n_layer = 2;
  m.d_model = 64;
  m.n_head = 4;
  m.n_kv_head = m.arch == model::Arch::kLlama ? 2 : 0;
  m.ffn_hidden = 0;
  m.head_dim = 0;
  if (m.moe.num_experts > 0) m.moe = {8, 2, 32, m.moe.norm_topk_prob, {}, m.moe.aux_loss_coef};
  cfg->sub_group_size = 5000;
  cfg->offload_param.nvme_path = cfg->offload_optimizer.nvme_path = dir;
  return *cfg;
}

TEST(Estimate, ShippedConfigsMatchTheEngineLedgerExactly) {
  testing::TempDir dir;
  for (const char* file : {"tiny_cpu.json", "gpt2_124m_cpu_offload.json", "llama_1b_nvme.json", "llama_7b_gpu.json",
                           "llama_4.9b_24g_host.json", "llama_70b_lora_gpu.json",
                           "llama_70b_qlora_gpu.json"}) {
    const TrainConfig base = Shrunk(file, dir.path());
    for (int world : {1, 2, 3}) ExpectEstimateMatchesLedger(base, world, file);
    for (int stage : {0, 1, 2}) {
      for (Tier opt : {Tier::kDevice, Tier::kCpu, Tier::kNvme}) {
        TrainConfig c = base;
        c.zero_stage = stage;
        c.offload_param.device = Tier::kDevice;
        c.offload_optimizer.device = opt;
        ExpectEstimateMatchesLedger(c, 2, file);
      }
    }
    for (Tier param : {Tier::kDevice, Tier::kCpu, Tier::kNvme}) {
      TrainConfig c = base;
      c.offload_param.device = param;
      c.offload_param.buffer_count = 4;
      c.offload_optimizer.pin_memory = false;
      ExpectEstimateMatchesLedger(c, 3, file);
    }
  }
}

TEST(Estimate, HalfPrecisionAndUntiedLlamaMatchTheEngineLedgerExactly) {
  testing::TempDir dir;
  TrainConfig llama = Shrunk("llama_1b_nvme.json", dir.path());
  llama.model.tie_embeddings = false;
  for (DType d : {DType::kF16, DType::kBF16, DType::kF32}) {
    llama.compute_dtype = d;
    ExpectEstimateMatchesLedger(llama, 2, "untied llama");
  }
  // bf16 Adam moments, and the speculation backups (all blocks, and a budget for some).
  llama.adam_states = DType::kBF16;
  ExpectEstimateMatchesLedger(llama, 2, "bf16 moments");
  llama.grad_accum_dtype = DType::kBF16;
  ExpectEstimateMatchesLedger(llama, 2, "bf16 gradient accumulators");
  llama.optimizer_overlap = OptimizerOverlap::kSpeculative;
  ExpectEstimateMatchesLedger(llama, 2, "speculative");
  llama.speculation_budget_mb = 1;
  ExpectEstimateMatchesLedger(llama, 2, "speculative within 1 MB");
  llama.optimizer_overlap = OptimizerOverlap::kForward;
  llama.host_blocks = 2;  // (the shipped config's states are on NVMe)
  ExpectEstimateMatchesLedger(llama, 2, "the first 2 blocks in host memory");
}

// Lion and Adagrad keep one state each (Note [Optimizer rules]): the estimate of each
// placement and overlap is the engine's ledger, a quarter of Adam's moments' bytes fewer.
TEST(Estimate, OneStateOptimizersMatchTheEngineLedgerExactly) {
  testing::TempDir dir;
  const TrainConfig adam = Shrunk("llama_1b_nvme.json", dir.path());
  const uint64_t adam_moments = EstimateMemory(*testing::Settled(adam, 2, true), 2, 0, {true}).ledger.Of(StateKind::kAdamM);
  for (OptimizerKind kind : {OptimizerKind::kLion, OptimizerKind::kAdagrad}) {
    TrainConfig c = adam;
    c.optimizer = kind;
    const char* what = kind == OptimizerKind::kLion ? "Lion" : "Adagrad";
    ExpectEstimateMatchesLedger(c, 2, what);
    const MemoryEstimate e = EstimateMemory(*testing::Settled(c, 2, true), 2, 0, {true});
    EXPECT_EQ(e.ledger.Of(kind == OptimizerKind::kLion ? StateKind::kAdamM : StateKind::kAdamV), adam_moments) << what;
    EXPECT_EQ(e.ledger.Of(kind == OptimizerKind::kLion ? StateKind::kAdamV : StateKind::kAdamM), 0u) << what;
    c.optimizer_overlap = OptimizerOverlap::kSpeculative;
    ExpectEstimateMatchesLedger(c, 2, what);
    c.optimizer_overlap = OptimizerOverlap::kForward;
    c.host_blocks = 2;
    c.compute_dtype = DType::kF32;  // the master in the working weights
    ExpectEstimateMatchesLedger(c, 3, what);
  }
}

// LAMB keeps Adam's two moments: the estimate of each placement is the ledger, Adam's bytes.
TEST(Estimate, LambMatchesTheEngineLedgerExactly) {
  testing::TempDir dir;
  TrainConfig c = Shrunk("llama_1b_nvme.json", dir.path());
  const MemoryLedger adam = EstimateMemory(*testing::Settled(c, 2, true), 2, 0, {true}).ledger;
  c.optimizer = OptimizerKind::kLamb;
  ExpectEstimateMatchesLedger(c, 2, "lamb");
  const MemoryLedger lamb = EstimateMemory(*testing::Settled(c, 2, true), 2, 0, {true}).ledger;
  EXPECT_EQ(lamb.Of(StateKind::kAdamM), adam.Of(StateKind::kAdamM));
  EXPECT_EQ(lamb.Of(StateKind::kAdamV), adam.Of(StateKind::kAdamV));
  c.host_blocks = 2;
  c.compute_dtype = DType::kF32;  // the master in the working weights
  ExpectEstimateMatchesLedger(c, 3, "lamb, fp32, 2 host blocks");
}

// Muon keeps Adam's two slots (its matrices' momentum, the AdamW half's m and v) and its o
// between the two passes (Note [Muon]): the estimate of each placement is the ledger.
TEST(Estimate, MuonMatchesTheEngineLedgerExactly) {
  testing::TempDir dir;
  TrainConfig c = Shrunk("llama_1b_nvme.json", dir.path());
  c.optimizer = OptimizerKind::kMuon;
  ExpectEstimateMatchesLedger(c, 2, "muon");
  const MemoryLedger muon = EstimateMemory(*testing::Settled(c, 2, true), 2, 0, {true}).ledger;
  EXPECT_GT(muon.Of(StateKind::kMuonUpdates), 0u);
  // Its Newton-Schulz is counted in the step's FLOPs (on the compute device).
  EXPECT_GT(MuonNewtonSchulzFlops(c), 0.0);
  TrainConfig adam = c;
  adam.optimizer = OptimizerKind::kAdam;
  EXPECT_EQ(MuonNewtonSchulzFlops(adam), 0.0);
  c.host_blocks = 2;
  c.compute_dtype = DType::kF32;
  ExpectEstimateMatchesLedger(c, 3, "muon, fp32, 2 host blocks");
}

// LoRA: master weights, m, v and gradient accumulators for the adapters only; on a device
// with resident blocks and on NVMe (where the layers' trainable ends are host tensors).
TEST(Estimate, LoraMatchesTheEngineLedgerExactly) {
  testing::TempDir dir;
  TrainConfig c = Shrunk("llama_70b_lora_gpu.json", dir.path());
  for (int world : {1, 2}) {
    c.resident_blocks = 2;
    ExpectEstimateMatchesLedger(c, world, "lora, 2 resident", /*on_device=*/true);
    c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
    ExpectEstimateMatchesLedger(c, world, "lora on nvme", /*on_device=*/true);
    ExpectEstimateMatchesLedger(c, world, "lora on nvme");
  }
  const MemoryEstimate e = EstimateMemory(SettledConfig(c), 1, 0, {true});
  const model::ModelSpec spec(c.model);
  int64_t trainable = 0;
  for (int b = 0; b < spec.num_blocks(); ++b) trainable += spec.trainable_parameters(b);
  EXPECT_GE(e.ledger.Of(StateKind::kMaster), static_cast<uint64_t>(trainable) * 4);
  EXPECT_LT(e.ledger.Of(StateKind::kMaster), static_cast<uint64_t>(trainable + 2 * kShardAlign) * 4);  // + padding
}

// Mixtures of experts (the shipped Qwen3-30B-A3B configs with 8 experts a layer): full
// fine-tuning in its smallest formats, LoRA on the attention, and on the experts as well
// (Note [Expert adapters]), on the host and on a device.
TEST(Estimate, MixturesOfExpertsMatchTheEngineLedgerExactly) {
  testing::TempDir dir;
  for (const char* file : {"qwen3_30b_a3b_full_gpu.json", "qwen3_30b_a3b_lora_gpu.json"}) {
    TrainConfig c = Shrunk(file, dir.path());
    ASSERT_EQ(c.model.moe.num_experts, 8) << file;
    c.bf16_auto = false;  // bf16, as on the GPU ("auto" would follow this CPU; the split master needs bf16)
    c.compute_dtype = DType::kBF16;
    for (bool experts : {false, true}) {
      if (experts && !c.model.lora.enabled()) continue;
      if (experts) c.model.lora.target_parameters = {"experts.gate_up_proj", "experts.down_proj"};
      for (int world : {1, 2}) {
        ExpectEstimateMatchesLedger(c, world, fmt::format("{}{}", file, experts ? ", expert adapters" : ""));
        ExpectEstimateMatchesLedger(c, world, fmt::format("{}{}", file, experts ? ", expert adapters" : ""),
                                    /*on_device=*/true);
      }
    }
  }
}

// QLoRA (NF4 base): the blobs' bytes in every tier, the decode buffers on the device.
TEST(Estimate, QloraMatchesTheEngineLedgerExactly) {
  testing::TempDir dir;
  TrainConfig c = Shrunk("llama_70b_qlora_gpu.json", dir.path());
  ASSERT_TRUE(c.model.lora.nf4_base());
  for (DType d : {DType::kBF16, DType::kF32}) {
    c.compute_dtype = d;
    for (int world : {1, 2}) {
      c.offload_param.device = c.offload_optimizer.device = Tier::kDevice;
      ExpectEstimateMatchesLedger(c, world, "qlora, all resident", /*on_device=*/true);
      c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
      ExpectEstimateMatchesLedger(c, world, "qlora on nvme", /*on_device=*/true);
      ExpectEstimateMatchesLedger(c, world, "qlora on nvme");
    }
  }
}

// The shipped 70 B QLoRA config at full size on the GPU machine (one H100, 80 GB): the whole
// NF4 base resident on the GPU, with room to spare, where the bf16 base (138 GB) is not.
// Ulysses (Note [Ulysses]): a rank holds T / S positions of each row, so sequence 2 with a
// micro-batch of 4 rows costs each rank what data parallelism's micro-batch of 2 does (the
// same global batch on the same 2 ranks): activations, tiles and FLOPs; the weights and states
// are ZeRO's over the same world. The batch rule counts the data ranks.
// The GPT-2 config with sequence 2 at a micro-batch of 4 rows, and as data parallelism at 2.
std::pair<TrainConfig, TrainConfig> SequenceTwoAndDataTwo(const std::string& dir) {
  TrainConfig split = Shrunk("gpt2_124m_cpu_offload.json", dir);
  split.micro_batch_set = split.micro_batch = 4;
  split.grad_accum_set = split.grad_accum = 1;
  split.sequence_parallel = 2;
  TrainConfig data = split;
  data.micro_batch_set = data.micro_batch = 2;
  data.sequence_parallel = 1;
  return {split, data};
}

TEST(Estimate, SequenceParallelCountsEachRanksPositions) {
  testing::TempDir dir;
  const auto [split, data] = SequenceTwoAndDataTwo(dir.path());
  const RunConfig a = testing::Settled(split, 2), b = testing::Settled(data, 2);
  EXPECT_EQ(a->train_batch, 4);
  EXPECT_EQ(b->train_batch, 4);
  const MemoryEstimate ea = EstimateMemory(*a, 2, 0, {true}), eb = EstimateMemory(*b, 2, 0, {true});
  EXPECT_EQ(ea.activations, eb.activations);
  EXPECT_EQ(ea.boundary_activations, eb.boundary_activations);
  EXPECT_EQ(ea.host_peak(), eb.host_peak());
  EXPECT_EQ(StepFlops(*a), StepFlops(*b));
  EXPECT_EQ(LossTileTokens(*a), LossTileTokens(*b));
}

// Tensor parallel (Note [Tensor parallel]): the same ZeRO-3 state (whole tensors over the
// world), each rank its share of the layers' activations and compute, the embedding and head
// whole; a step reads the data ranks' sequences, while train_batch_size counts the tensor
// ranks, as DeepSpeed's parser does.
TEST(Estimate, TensorParallelSplitsTheLayersActivationsAndCompute) {
  testing::TempDir dir;
  TrainConfig split = Shrunk("gpt2_124m_cpu_offload.json", dir.path());
  split.micro_batch_set = split.micro_batch = 4;
  split.grad_accum_set = split.grad_accum = 1;
  split.tensor_parallel = 2;
  TrainConfig whole = split;
  whole.tensor_parallel = 1;
  const RunConfig a = testing::Settled(split, 2), b = testing::Settled(whole, 2);
  EXPECT_EQ(a->train_batch, 4);  // one data rank of 4 sequences
  EXPECT_EQ(b->train_batch, 8);
  EXPECT_TRUE(std::any_of(a->notes.begin(), a->notes.end(), [](const std::string& n) {
    return n.find("train_batch_size 8 counts the tensor ranks") != std::string::npos;
  }));
  const MemoryEstimate ea = EstimateMemory(*a, 2, 0, {true}), eb = EstimateMemory(*b, 2, 0, {true});
  auto moments = [](const MemoryEstimate& e) {  // (Adam's: whatever the compute dtype, unlike a master copy)
    return e.ledger.At(StateKind::kAdamM, Tier::kCpu) + e.ledger.At(StateKind::kAdamM, Tier::kNvme);
  };
  EXPECT_GT(moments(ea), 0u);
  EXPECT_EQ(moments(ea), moments(eb));
  EXPECT_EQ(ea.boundary_activations, eb.boundary_activations);  // the residual stream stays whole
  EXPECT_LT(ea.activations, eb.activations);
  const double layers_share = StepFlops(*a) / StepFlops(*b);
  EXPECT_GT(layers_share, 0.5);  // the head's products run whole on each rank
  EXPECT_LT(layers_share, 0.8);
}

// Blocks on GPUs split their rows and layers too (their groups are NCCL's, ComputeDevice::
// BlockGroup): settling takes both axes there, and a rank's device activations with sequence 2
// at a micro-batch of 4 rows are data parallelism's at 2.
TEST(Estimate, ModelParallelGroupsSettleWithBlocksOnAGpu) {
  testing::TempDir dir;
  auto [split, data] = SequenceTwoAndDataTwo(dir.path());
  for (TrainConfig* c : {&split, &data}) {
    c->bf16_auto = false;
    c->compute_dtype = DType::kBF16;
  }
  TrainConfig both = split;
  both.tensor_parallel = 2;
  auto on_gpu = [](const TrainConfig& c, int world) {
    auto s = SettleRunConfig(c, {world, world, /*on_gpu=*/true, {/*host=*/false}});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? s->config : testing::Settled(c, world, false);
  };
  const RunConfig a = on_gpu(split, 2), b = on_gpu(data, 2);
  on_gpu(both, 4);
  const MemoryEstimate ea = EstimateMemory(*a, 2, 0, {false}), eb = EstimateMemory(*b, 2, 0, {false});
  EXPECT_GT(ea.activations, 0u);
  EXPECT_EQ(ea.activations, eb.activations);
  EXPECT_EQ(ea.device_peak(), eb.device_peak());
}

TEST(Estimate, The70bQloraBaseFitsOneH100) {
  auto cfg = LoadTrainConfig(STRATA_SOURCE_DIR "/configs/llama_70b_qlora_gpu.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  cfg->bf16_auto = false;  // bf16, as on the GPU (settled here without one, "auto" would follow this CPU)
  cfg->compute_dtype = DType::kBF16;
  const RunConfig run = testing::Settled(*cfg, 1, /*host_device=*/false);
  const MemoryEstimate e = EstimateMemory(*run, 1, 0, {false});
  const uint64_t on_gpu = e.ledger.At(StateKind::kWorking, Tier::kDevice);
  EXPECT_GT(on_gpu, 34'000'000'000ull);  // 69 B parameters at about 4.13 bits (the embeddings and head in bf16)
  EXPECT_LT(on_gpu, 38'000'000'000ull);
  EXPECT_EQ(e.ledger.At(StateKind::kWorking, Tier::kCpu) + e.ledger.At(StateKind::kWorking, Tier::kNvme), 0u);
  EXPECT_LT(e.device_peak(), 80'000'000'000ull) << "device peak " << e.device_peak();
  SettledConfig bf16(*cfg);
  bf16.model.lora.base_dtype = "";
  const MemoryEstimate b = EstimateMemory(*testing::Settled(bf16, 1, false), 1, 0, {false});
  EXPECT_GT(b.device_peak(), 80'000'000'000ull);
}

// On a device: resident blocks (all, some, none), double-buffered gathers and gradient
// reductions, pinned gradient copies; for every stage.
TEST(Estimate, TheDeviceTierMatchesTheEngineOnADeviceExactly) {
  testing::TempDir dir;
  for (const char* file : {"tiny_cpu.json", "llama_7b_gpu.json"}) {
    const TrainConfig base = Shrunk(file, dir.path());
    for (int stage : {0, 1, 2, 3})
      for (int64_t resident : {-1, 0, 2}) {
        TrainConfig c = base;
        c.zero_stage = stage;
        if (stage < 3) c.offload_param.device = Tier::kDevice;
        c.resident_blocks = resident;
        ExpectEstimateMatchesLedger(c, 2, file, /*on_device=*/true);
        c.grad_accum = 2;  // and the gradient sums on the device (Note [Device accumulation])
        c.device_accumulation = 1;
        ExpectEstimateMatchesLedger(c, 2, file, /*on_device=*/true);
      }
  }
}

// strata.device_accumulation "auto": the fp32 sums go on the device where it has room for
// them, and stay on the host where it has not; never with one micro-batch or on the host.
TEST(Estimate, DeviceAccumulationWhereTheDeviceHasRoom) {
  auto cfg = LoadTrainConfig(STRATA_SOURCE_DIR "/configs/llama_7b_gpu.json");
  ASSERT_TRUE(cfg.ok());
  ASSERT_GT(cfg->grad_accum, 1);
  ASSERT_EQ(cfg->device_accumulation, -1);
  SettledConfig want(*cfg);  // what it takes: the sums, each block recomputed
  want.accumulate_on_device = true;
  want.keep_activations = false;
  MachineCapacity m{1ull << 50, 1ull << 50, "/x", EstimateMemory(want, 1, 0, {.host = false}).device_peak()};
  SettledConfig roomy(*cfg);
  const MemoryEstimate e = EstimateResolvingAutos(&roomy, 1, 0, {.host = false}, m, 1);
  EXPECT_TRUE(roomy.accumulate_on_device);
  EXPECT_FALSE(roomy.keep_activations);  // the sums came first
  EXPECT_EQ(e.ledger.At(StateKind::kGradAccum, Tier::kDevice), 4 * static_cast<uint64_t>(e.parameters));
  m.device_memory -= 1;  // one byte short
  SettledConfig tight(*cfg);
  EstimateResolvingAutos(&tight, 1, 0, {.host = false}, m, 1);
  EXPECT_FALSE(tight.accumulate_on_device);
  SettledConfig host(*cfg);
  EstimateResolvingAutos(&host, 1, 0, {.host = true}, m, 1);
  EXPECT_FALSE(host.accumulate_on_device);
  SettledConfig single(*cfg);
  single.grad_accum = 1;
  EstimateResolvingAutos(&single, 1, 0, {.host = false}, MachineCapacity{1ull << 50, 1ull << 50, "/x", 80ull << 30}, 1);
  EXPECT_FALSE(single.accumulate_on_device);
  SettledConfig off(*cfg);  // as written wins
  off.device_accumulation = 0;
  EstimateResolvingAutos(&off, 1, 0, {.host = false}, MachineCapacity{1ull << 50, 1ull << 50, "/x", 80ull << 30}, 1);
  EXPECT_FALSE(off.accumulate_on_device);
}

// The fit check compares the device tier with one GPU's memory (strata.device_memory).
TEST(Estimate, ADeviceTierLargerThanTheGpuIsRefused) {
  auto cfg = LoadTrainConfig(STRATA_SOURCE_DIR "/configs/llama_7b_gpu.json");
  ASSERT_TRUE(cfg.ok());
  cfg->resident_blocks = 34;  // every block's working weights on the GPU
  const MemoryEstimate e = EstimateMemory(SettledConfig(*cfg), 1, 0, {.host = false});
  MachineCapacity m{1ull << 50, 1ull << 50, "/x", /*device_memory=*/16ull << 30};
  const Status s = CheckFits(e, m, 1);
  ASSERT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("device memory"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("host memory"), std::string::npos) << s.message();
  m.device_memory = 80ull << 30;
  EXPECT_TRUE(CheckFits(e, m, 1).ok());
  cfg->resident_blocks = 0;  // the parameters offloaded: the GPU holds only buffers and activations
  EXPECT_LT(EstimateMemory(SettledConfig(*cfg), 1, 0, {.host = false}).device_peak(), e.device_peak() / 2);
}

TEST(Estimate, RefusesWhatDoesNotFitWithTheNumbers) {
  auto cfg = LoadTrainConfig(STRATA_SOURCE_DIR "/configs/llama_1b_nvme.json");
  ASSERT_TRUE(cfg.ok());
  const MemoryEstimate e = EstimateMemory(SettledConfig(*cfg), 1);
  MachineCapacity small;
  small.host_available = 1'000'000'000;
  small.nvme_free = 2'000'000'000;
  small.nvme_dir = "/x";
  const Status s = CheckFits(e, small, 1);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("NVMe"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("host memory"), std::string::npos) << s.message();
  MachineCapacity big{1ull << 50, 1ull << 50, "/x", 0};
  EXPECT_TRUE(CheckFits(e, big, 1).ok());
}

// estimate --max on a made-up machine: the answer fits, 5% more does not with its placement,
// NVMe holds what the host cannot, and with no NVMe known only CPU placements count.
TEST(Estimate, LargestFitIsTheEdgeOfTheMachine) {
  auto loaded = LoadTrainConfig(STRATA_SOURCE_DIR "/configs/llama_1b_nvme.json");
  ASSERT_TRUE(loaded.ok());
  SettledConfig cfg(*loaded);  // (the schedule and the autos as their defaults: micro-batch, recompute)
  ResolvePrecision(&cfg, false);
  ASSERT_TRUE(ResolveBatch(&cfg, 1).ok());
  MachineCapacity m;
  m.host_available = 24ull << 30;
  m.nvme_free = 80ull << 30;
  m.nvme_dir = "/var/tmp/strata";
  const LargestFit f = FindLargestFit(cfg, 1, {true}, m);
  ASSERT_GT(f.parameters, 1'000'000'000);
  EXPECT_EQ(f.optimizer_on, Tier::kNvme);
  EXPECT_TRUE(CheckFits(f.estimate, m, 1).ok());
  auto fits_placed = [&](const LargestFit& f, int64_t params) {  // as --max places it, host blocks "auto"
    SettledConfig placed(cfg);
    placed.offload_param.device = f.params_on;
    placed.offload_optimizer.device = f.optimizer_on;
    placed.grad_accum_dtype = f.accumulator;
    placed.host_blocks = -1;
    return CheckFits(EstimateSettlingAutos(&placed, 1, params, {true}, m, 1), m, 1).ok();
  };
  EXPECT_FALSE(fits_placed(f, f.parameters * 105 / 100));
  EXPECT_LT(f.parameters, (m.host_available + m.nvme_free) / kStateBytesPerParameter);
  // A disk smaller than the optimizer states beside ample host memory: host memory keeps some
  // blocks' states (strata.host_blocks auto), and the model outgrows what the disk alone holds.
  MachineCapacity small_disk = m;
  small_disk.host_available = 64ull << 30;
  small_disk.nvme_free = 20ull << 30;
  const LargestFit mixed = FindLargestFit(cfg, 1, {true}, small_disk);
  EXPECT_EQ(mixed.optimizer_on, Tier::kNvme);
  EXPECT_GT(mixed.host_blocks, 0);
  EXPECT_GT(mixed.parameters * 12.0, static_cast<double>(small_disk.nvme_free));  // (master, m, v: 12 B/param)
  EXPECT_TRUE(CheckFits(mixed.estimate, small_disk, 1).ok());
  m.nvme_free = 0;  // unknown: NVMe placements cannot be judged
  const LargestFit cpu_only = FindLargestFit(cfg, 1, {true}, m);
  EXPECT_EQ(cpu_only.optimizer_on, Tier::kCpu);
  EXPECT_LT(cpu_only.parameters, f.parameters);
}

// strata.host_blocks: the most blocks host memory keeps within 90% of a made-up machine's;
// one more does not; each moves its state's bytes (optimizer states, working weights) from
// NVMe to the host.
TEST(Estimate, HostBlocksFillHostMemoryToTheMargin) {
  auto loaded = LoadTrainConfig(STRATA_SOURCE_DIR "/configs/llama_1b_nvme.json");
  ASSERT_TRUE(loaded.ok());
  TrainConfig cfg = *loaded;
  ResolvePrecision(&cfg, false);
  ASSERT_TRUE(ResolveBatch(&cfg, 1).ok());
  const MemoryEstimate none = EstimateMemory(SettledConfig(cfg), 1);
  MachineCapacity m{none.node_host_bytes(1) + (4ull << 30), 80ull << 30, "/x", 0};
  const HostBlocksFit f = MostHostBlocks(SettledConfig(cfg), 1, 0, {true}, m, 1);
  ASSERT_GT(f.blocks, 0);
  ASSERT_LT(f.blocks, kAllBlocks);
  EXPECT_LE(static_cast<double>(f.estimate.node_host_bytes(1)), kHostBlocksFill * m.host_available);
  TrainConfig more = cfg;
  more.host_blocks = f.blocks + 1;
  EXPECT_GT(static_cast<double>(EstimateMemory(SettledConfig(more), 1).node_host_bytes(1)), kHostBlocksFill * m.host_available);
  uint64_t states_in_host = 0;
  for (StateKind k : {StateKind::kWorking, StateKind::kMaster, StateKind::kAdamM, StateKind::kAdamV})
    states_in_host += f.estimate.ledger.At(k, Tier::kCpu);
  EXPECT_EQ(f.estimate.node_host_bytes(1) - none.node_host_bytes(1), states_in_host);
  // The disk gives up as much (its extents are rounded up to pages).
  EXPECT_GE(none.nvme_on_disk - f.estimate.nvme_on_disk, states_in_host);
  EXPECT_LT(none.nvme_on_disk - f.estimate.nvme_on_disk, states_in_host + states_in_host / 1000);
  // A machine with room for everything: every block's.
  const MachineCapacity huge{1ull << 50, 1ull << 50, "/x", 0};
  EXPECT_EQ(MostHostBlocks(SettledConfig(cfg), 1, 0, {true}, huge, 1).blocks, kAllBlocks);

  // "auto" (-1) settles on that count and its estimate; a set count stays; without NVMe states none.
  SettledConfig automatic(cfg);
  automatic.host_blocks = -1;
  MemoryEstimate e = none;
  EXPECT_TRUE(ResolveHostBlocks(&automatic, 1, 0, {true}, m, 1, &e));
  EXPECT_EQ(automatic.host_blocks, f.blocks);
  EXPECT_EQ(e.node_host_bytes(1), f.estimate.node_host_bytes(1));
  EXPECT_FALSE(ResolveHostBlocks(&automatic, 1, 0, {true}, m, 1, &e));
  EXPECT_EQ(automatic.host_blocks, f.blocks);
  SettledConfig on_cpu(cfg);
  on_cpu.offload_optimizer.device = Tier::kCpu;
  on_cpu.host_blocks = -1;
  EXPECT_TRUE(ResolveHostBlocks(&on_cpu, 1, 0, {true}, m, 1, &e));
  EXPECT_EQ(on_cpu.host_blocks, 0);
}

}  // namespace
}  // namespace strata
