// Checkpoints: resume equals uninterrupted training bitwise; the last K folders and the
// `latest` pointer; a truncated or altered shard is refused with the file named; export
// round-trips through --init-from bitwise (fp32); --init-from names what does not match.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/engine_test_util.h"
#include "checkpoint/ckpt_test_util.h"
#include "src/checkpoint/checkpoint.h"
#include "src/hf/export.h"
#include "src/hf/hf_loader.h"
#include "src/checkpoint/manifest.h"
#include "src/checkpoint/safetensors.h"
#include "strata/cast.h"
#include "support/faulty_io_engine.h"
#include "support/settled.h"

namespace strata {
namespace {
namespace fs = std::filesystem;
using testing::CollectMaster;
using testing::ExpectResumeIsBitwise;
using testing::Train;
using testing::Params;
using testing::RunRanks;
using testing::TempDir;

// bf16 compute, parameters and optimizer states on NVMe, two optimizer sub-groups per
// block: every kind of state a checkpoint carries.
TrainConfig ResumeConfig(const std::string& dir) {
  TrainConfig c = testing::TinyConfig(dir);
  c.compute_dtype = DType::kBF16;
  c.offload_param.device = Tier::kNvme;
  c.offload_optimizer.device = Tier::kNvme;
  c.schedule.kind = LrScheduleKind::kWarmupCosineLR;
  c.schedule.warmup_num_steps = 2;
  c.schedule.total_num_steps = 6;
  return c;
}

// Tensors of rank 0's shard at step 3 (as ExpectResumeIsBitwise saves it) whose name contains
// `part` and whose dtype is `dtype`.
int CountShardTensors(const std::string& ck, const std::string& part, const std::string& dtype) {
  auto shard = ckpt::SafetensorsFile::Open(ck + "/step_00000003/rank0.safetensors");
  EXPECT_TRUE(shard.ok()) << shard.status().ToString();
  if (!shard.ok()) return 0;
  int count = 0;
  for (const auto& t : shard->tensors()) count += t.name.find(part) != std::string::npos && t.dtype == dtype;
  return count;
}

TEST(Checkpoint, ResumeAfterNStepsEqualsUninterruptedTrainingBitwise) {
  TempDir dir;
  const TrainConfig cfg = ResumeConfig(dir.path());
  const std::string ck = dir.path() + "/ckpt";
  const Params straight = ExpectResumeIsBitwise(cfg, ck);
  ASSERT_GT(straight.size(), 1u);
  // Without the restore the second half would differ: the comparison has teeth.
  Params fresh;
  ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) { return Train(cfg, r, c, 3, 6, "", "", &fresh); }), "");
  EXPECT_FALSE(torch::equal(straight[1][2].second, fresh[1][2].second));
}

// A checkpoint saved while the last step's update is still running (its NVMe writes slowed)
// waits for it: resuming from it is bitwise the uninterrupted run, in each overlapped mode,
// with clipping at 2.2 (of the gradient norms, ~3 to ~2, some steps clip and some do not).
TEST(Checkpoint, SavedWhileTheUpdateRunsResumesBitwise) {
  for (OptimizerOverlap mode : {OptimizerOverlap::kForward, OptimizerOverlap::kSpeculative}) {
    SCOPED_TRACE(OptimizerOverlapName(mode));
    TempDir dir;
    TrainConfig cfg = ResumeConfig(dir.path());
    cfg.optimizer_overlap = mode;
    cfg.gradient_clipping = 2.2;
    const std::string ck = dir.path() + "/ckpt";
    Params straight, resumed;
    ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) { return Train(cfg, r, c, 0, 6, "", "", &straight); }), "");
    std::atomic<int> saved_mid_update{0};
    ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) -> Status {
                EngineHooks hooks;
                hooks.wrap_io_engine = [](std::unique_ptr<IoEngine> inner) -> std::unique_ptr<IoEngine> {
                  return std::make_unique<testing::FaultyIoEngine>(
                      std::move(inner), std::vector<testing::Fault>{{.op = IoOp::kWrite, .nth = -1,
                                                                     .kind = testing::FaultKind::kSlow,
                                                                     .delay_us = 3000}});
                };
                STRATA_ASSIGN_OR_RETURN(auto data, data::TokenDataset::Open(cfg.data, cfg.model.vocab_size,
                                                                            cfg.model.seq_len));
                STRATA_ASSIGN_OR_RETURN(const RunConfig settled, testing::TrySettle(cfg, c.world_size()));
                STRATA_ASSIGN_OR_RETURN(auto engine, Engine::Create(settled, &c, nullptr, std::move(hooks)));
                for (int64_t s = 0; s < 3; ++s) STRATA_RETURN_IF_ERROR(engine->Step(s, *data).status());
                saved_mid_update += engine->UpdateInFlight();
                return ckpt::SaveCheckpoint(*engine, c, cfg, ck, 3);
              }),
              "");
    EXPECT_EQ(saved_mid_update.load(), 2) << "the save did not start while the update ran";
    ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) { return Train(cfg, r, c, 3, 6, ck, "", &resumed); }), "");
    testing::ExpectBitwiseEqual(straight, resumed);
  }
}

// Note [Delayed update]: a checkpoint waits for the update running beside the steps and
// writes the latest weights, which the next step then uses, as the resumed run's first step
// does: the run that saved and went on, and the run resumed from its checkpoint, are bitwise
// the same; and (the comparison has teeth) not the run that never saved.
TEST(Checkpoint, DelayedUpdateResumesAsTheRunThatSaved) {
  TempDir dir;
  TrainConfig cfg = ResumeConfig(dir.path());
  cfg.optimizer_overlap = OptimizerOverlap::kDelayed;
  const std::string ck = dir.path() + "/ckpt";
  Params saved_and_went_on, resumed, straight;
  ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) -> Status {
              STRATA_ASSIGN_OR_RETURN(auto data, data::TokenDataset::Open(cfg.data, cfg.model.vocab_size,
                                                                          cfg.model.seq_len));
              STRATA_ASSIGN_OR_RETURN(const RunConfig settled, testing::TrySettle(cfg, c.world_size()));
              STRATA_ASSIGN_OR_RETURN(auto engine, Engine::Create(settled, &c, nullptr, {}));
              for (int64_t s = 0; s < 6; ++s) {
                if (s == 3) STRATA_RETURN_IF_ERROR(ckpt::SaveCheckpoint(*engine, c, cfg, ck, 3));
                STRATA_RETURN_IF_ERROR(engine->Step(s, *data).status());
              }
              return CollectMaster(*engine, r, &saved_and_went_on);
            }),
            "");
  ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) { return Train(cfg, r, c, 3, 6, ck, "", &resumed); }), "");
  testing::ExpectBitwiseEqual(saved_and_went_on, resumed);
  ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) { return Train(cfg, r, c, 0, 6, "", "", &straight); }), "");
  EXPECT_FALSE(torch::equal(straight[1][2].second, resumed[1][2].second));
}

// Adam's moments kept in bf16 (strata.adam_states): saved as BF16 tensors, resumed bitwise;
// a run with fp32 moments is refused that checkpoint, naming the key.
TEST(Checkpoint, Bf16MomentsResumeBitwiseAndAMismatchIsRefused) {
  TempDir dir;
  TrainConfig cfg = ResumeConfig(dir.path());
  cfg.adam_states = DType::kBF16;
  const std::string ck = dir.path() + "/ckpt";
  ExpectResumeIsBitwise(cfg, ck);
  EXPECT_GT(CountShardTensors(ck, ".adam_", "BF16"), 0);
  TrainConfig fp32 = cfg;
  fp32.adam_states = DType::kF32;
  const std::string err = RunRanks(2, [&](int r, Communicator& c) { return Train(fp32, r, c, 3, 6, ck, "", nullptr); });
  EXPECT_NE(err.find("strata.adam_states"), std::string::npos) << err;
}

// 8-bit moments (strata.adam_states "8bit") are saved as the fp32 values they hold and resumed
// bitwise (to the same codes); a bf16-moment checkpoint is refused, the message naming "8bit".
TEST(Checkpoint, EightBitMomentsSaveFp32AndResumeBitwise) {
  TempDir dir;
  TrainConfig cfg = ResumeConfig(dir.path());
  cfg.moments_8bit = true;
  const std::string ck = dir.path() + "/ckpt";
  ExpectResumeIsBitwise(cfg, ck);
  EXPECT_GT(CountShardTensors(ck, ".adam_", "F32"), 0);
  TrainConfig bf16 = ResumeConfig(dir.path());
  bf16.adam_states = DType::kBF16;
  const std::string ck16 = dir.path() + "/ckpt16";
  ExpectResumeIsBitwise(bf16, ck16);
  const std::string err = RunRanks(2, [&](int r, Communicator& c) { return Train(cfg, r, c, 3, 6, ck16, "", nullptr); });
  EXPECT_NE(err.find("strata.adam_states \"8bit\""), std::string::npos) << err;
  // An fp32-state run may go on from the 8-bit run's checkpoint: the log says the moments change.
  TrainConfig fp32 = ResumeConfig(dir.path());
  ::testing::internal::CaptureStderr();
  const std::string resumed = RunRanks(2, [&](int r, Communicator& c) { return Train(fp32, r, c, 3, 4, ck, "", nullptr); });
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(resumed, "");
  EXPECT_NE(log.find("Adam m and v were 8-bit (it holds their fp32 values); this run keeps them in fp32"),
            std::string::npos) << log;
}

// A split master (strata.master_weights "split") is saved as the fp32 master it stands for:
// resumed bitwise, and a checkpoint of either setting resumes with the other (the split one
// then rebuilds the same master from the checkpoint's fp32 one).
TEST(Checkpoint, SplitMasterSavesFp32AndResumesEitherWay) {
  TempDir dir;
  TrainConfig split = ResumeConfig(dir.path());
  split.split_master = true;
  const std::string ck = dir.path() + "/ckpt";
  const Params straight = ExpectResumeIsBitwise(split, ck);
  EXPECT_GT(CountShardTensors(ck, ".master", "F32"), 0);
  TrainConfig fp32 = split;
  fp32.split_master = false;
  Params from_split;  // the fp32-master run goes on from the split run's checkpoint
  ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) { return Train(fp32, r, c, 3, 6, ck, "", &from_split); }), "");
  double worst = 0;
  for (size_t b = 0; b < straight.size(); ++b)
    for (size_t i = 0; i < straight[b].size(); ++i)
      worst = std::max(worst, (straight[b][i].second - from_split[b][i].second).abs().max().item<double>());
  EXPECT_LT(worst, 1e-5);  // within the ties' one-ulp steps
  const std::string ck32 = dir.path() + "/ckpt32";
  ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) { return Train(fp32, r, c, 0, 3, "", ck32, nullptr); }), "");
  Params resumed_split;  // and the split run from the fp32 master's
  ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) { return Train(split, r, c, 3, 6, ck32, "", &resumed_split); }), "");
  ASSERT_EQ(resumed_split.size(), straight.size());
}

TEST(Checkpoint, KeepsTheLastKAndPointsLatestAtTheNewest) {
  TempDir dir;
  const TrainConfig cfg = ResumeConfig(dir.path());
  const std::string ck = dir.path() + "/ckpt";
  ASSERT_EQ(RunRanks(1, [&](int r, Communicator& c) -> Status {
              STRATA_ASSIGN_OR_RETURN(const RunConfig settled, testing::TrySettle(cfg, c.world_size()));
              STRATA_ASSIGN_OR_RETURN(auto e, Engine::Create(settled, &c, nullptr));
              ckpt::SaveOptions o;
              o.keep = 2;
              for (int64_t s : {1, 2, 3}) STRATA_RETURN_IF_ERROR(ckpt::SaveCheckpoint(*e, c, cfg, ck, s, o));
              return Status();
            }),
            "");
  auto steps = ckpt::ListSteps(ck);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].first, 2);
  EXPECT_EQ(steps[1].first, 3);
  auto latest = ckpt::ResolveStepDir(ck);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(fs::path(*latest).filename(), "step_00000003");
  auto m = ckpt::ReadManifest(*latest);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)["files"][0]["name"], "rank0.safetensors");
  EXPECT_EQ((*m)["files"][0]["xxh3"].get<std::string>().size(), 16u);
}

// Saves one checkpoint of 2 ranks, damages rank 1's shard with `damage`, and expects the
// resume to fail on every rank with an error naming that file.
void ExpectDamageRefused(const std::function<void(const std::string& file)>& damage, const std::string& what) {
  TempDir dir;
  const TrainConfig cfg = ResumeConfig(dir.path());
  const std::string ck = dir.path() + "/ckpt";
  ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) { return Train(cfg, r, c, 0, 1, "", ck, nullptr); }), "");
  const std::string file = ck + "/step_00000001/rank1.safetensors";
  damage(file);
  const std::string err =
      RunRanks(2, [&](int r, Communicator& c) { return Train(cfg, r, c, 1, 1, ck, "", nullptr); });
  EXPECT_NE(err.find(file), std::string::npos) << err;
  EXPECT_NE(err.find(what), std::string::npos) << err;
  // Export verifies the same way.
  auto ex = ckpt::ExportCheckpoint(ck, dir.path() + "/out.safetensors", ckpt::ExportDType::kF32);
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find(file), std::string::npos) << ex.status().ToString();
}

TEST(Checkpoint, TruncatedShardIsRefusedWithTheFileNamed) {
  ExpectDamageRefused([](const std::string& f) { fs::resize_file(f, fs::file_size(f) - 100); }, "truncated");
}

TEST(Checkpoint, FlippedByteIsRefusedWithTheFileNamed) {
  ExpectDamageRefused(
      [](const std::string& f) {
        std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
        io.seekg(static_cast<std::streamoff>(fs::file_size(f) - 7));
        char c;
        io.read(&c, 1);
        c ^= 0x10;
        io.seekp(static_cast<std::streamoff>(fs::file_size(f) - 7));
        io.write(&c, 1);
      },
      "corrupt");
}

TEST(Checkpoint, ExportRoundTripsThroughInitFromBitwise) {
  TempDir dir;
  TrainConfig cfg = ResumeConfig(dir.path());
  cfg.compute_dtype = DType::kF32;
  const std::string ck = dir.path() + "/ckpt", out = dir.path() + "/model.safetensors";
  Params trained, loaded;
  ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) { return Train(cfg, r, c, 0, 2, "", ck, &trained); }), "");
  auto ex = ckpt::ExportCheckpoint(ck, out, ckpt::ExportDType::kF32);
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  EXPECT_EQ(ex->parameters, model::ModelSpec(cfg.model).num_parameters());
  auto w = ckpt::HfWeights::Open(out, cfg.model);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const int blocks = model::ModelSpec(cfg.model).num_blocks();
  // One rank this time: the export is independent of the rank count that wrote it.
  ASSERT_EQ(RunRanks(1, [&](int r, Communicator& c) {
              return Train(cfg, r, c, 0, 0, "", "", &loaded, ckpt::MakeInitFromHooks(*w, blocks));
            }),
            "");
  testing::ExpectBitwiseEqual(trained, loaded);
  // bf16 export: half the bytes, same names.
  auto ex16 = ckpt::ExportCheckpoint(ck, dir.path() + "/bf16.safetensors", ckpt::ExportDType::kBF16);
  ASSERT_TRUE(ex16.ok());
  EXPECT_EQ(ex16->tensors, ex->tensors);
  // fp16 export: the same tensors, each within fp16's rounding of the fp32 export.
  const std::string f16 = dir.path() + "/fp16.safetensors";
  auto exh = ckpt::ExportCheckpoint(ck, f16, ckpt::ExportDType::kF16);
  ASSERT_TRUE(exh.ok()) << exh.status().ToString();
  EXPECT_EQ(exh->tensors, ex->tensors);
  auto a32 = ckpt::SafetensorsFile::Open(out);
  auto a16 = ckpt::SafetensorsFile::Open(f16);
  ASSERT_TRUE(a32.ok() && a16.ok());
  for (const auto& t : a32->tensors()) {
    const ckpt::TensorView* h = a16->Find(t.name);
    ASSERT_NE(h, nullptr) << t.name;
    EXPECT_EQ(h->dtype, "F16");
    ASSERT_EQ(h->bytes.size() * 2, t.bytes.size()) << t.name;
    for (size_t i = 0; i < h->bytes.size() / 2; ++i) {
      float x;
      uint16_t y;
      std::memcpy(&x, t.bytes.data() + 4 * i, 4);
      std::memcpy(&y, h->bytes.data() + 2 * i, 2);
      ASSERT_EQ(y, Fp32ToFp16(x)) << t.name << " element " << i;
    }
  }
}

TEST(Checkpoint, InitFromNamesWhatDoesNotMatch) {
  TempDir dir;
  TrainConfig cfg = ResumeConfig(dir.path());
  const std::string ck = dir.path() + "/ckpt", out = dir.path() + "/model.safetensors";
  ASSERT_EQ(RunRanks(1, [&](int r, Communicator& c) { return Train(cfg, r, c, 0, 0, "", ck, nullptr); }), "");
  ASSERT_TRUE(ckpt::ExportCheckpoint(ck, out, ckpt::ExportDType::kF32).ok());
  auto try_load = [&](const model::ModelConfig& m) {
    TrainConfig c2 = cfg;
    c2.model = m;
    auto w = ckpt::HfWeights::Open(out, m);
    EXPECT_TRUE(w.ok());
    return RunRanks(1, [&](int r, Communicator& c) {
      return Train(c2, r, c, 0, 0, "", "", nullptr, ckpt::MakeInitFromHooks(*w, model::ModelSpec(m).num_blocks()));
    });
  };
  model::ModelConfig wider = cfg.model;
  wider.d_model = 128;
  std::string err = try_load(wider);
  EXPECT_NE(err.find("transformer.wte.weight' has shape [256, 64], the model config needs [256, 128]"), std::string::npos)
      << err;
  EXPECT_NE(err.find(out), std::string::npos) << err;
  model::ModelConfig deeper = cfg.model;
  deeper.n_layer = 3;
  err = try_load(deeper);
  EXPECT_NE(err.find("missing tensor 'transformer.h.2.ln_1.weight'"), std::string::npos) << err;
  model::ModelConfig shallower = cfg.model;
  shallower.n_layer = 1;
  err = try_load(shallower);
  EXPECT_NE(err.find("'transformer.h.1.attn.c_attn.weight' [64, 192]"), std::string::npos) << err;
}

// A NaN in the initial weights: --init-from refuses the file naming the tensor; weights
// that are not finite anyway (here planted by a hook) end an fp32 run after
// strata.max_skipped_steps skipped steps instead of "training" to the end.
TEST(Checkpoint, NonFiniteInitialWeightsAreRefused) {
  TempDir dir;
  TrainConfig cfg = ResumeConfig(dir.path());
  cfg.compute_dtype = DType::kF32;
  const std::string ck = dir.path() + "/ckpt", out = dir.path() + "/model.safetensors";
  ASSERT_EQ(RunRanks(1, [&](int r, Communicator& c) { return Train(cfg, r, c, 0, 0, "", ck, nullptr); }), "");
  ASSERT_TRUE(ckpt::ExportCheckpoint(ck, out, ckpt::ExportDType::kF32).ok());
  uint64_t at = 0;
  {
    auto f = ckpt::SafetensorsFile::Open(out);
    ASSERT_TRUE(f.ok());
    const ckpt::TensorView* t = f->Find("transformer.h.1.ln_2.weight");
    ASSERT_NE(t, nullptr);
    uint64_t header = 0;
    std::ifstream(out, std::ios::binary).read(reinterpret_cast<char*>(&header), 8);
    at = 8 + header + (t->bytes.data() - f->tensors()[0].bytes.data()) + 4 * 3;
  }
  {
    std::fstream io(out, std::ios::in | std::ios::out | std::ios::binary);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    io.seekp(static_cast<std::streamoff>(at));
    io.write(reinterpret_cast<const char*>(&nan), 4);
  }
  auto w = ckpt::HfWeights::Open(out, cfg.model);
  ASSERT_TRUE(w.ok());
  const int blocks = model::ModelSpec(cfg.model).num_blocks();
  std::string err = RunRanks(1, [&](int r, Communicator& c) {
    return Train(cfg, r, c, 0, 1, "", "", nullptr, ckpt::MakeInitFromHooks(*w, blocks));
  });
  EXPECT_NE(err.find("'transformer.h.1.ln_2.weight' holds 1 NaN or Inf value(s) of 64"), std::string::npos) << err;

  EngineHooks poison;
  poison.init_weights = [](int block, NamedTensors& params) {
    if (block == 1) params[0].second.fill_(std::numeric_limits<float>::quiet_NaN());
    return Status();
  };
  err = RunRanks(2, [&](int r, Communicator& c) { return Train(cfg, r, c, 0, 10, "", "", nullptr, poison); });
  EXPECT_NE(err.find("step 2: the gradients were not finite in 3 steps in a row"), std::string::npos) << err;
}

// Resharding is exact: 2 ranks -> 1, 3, or another sub_group_size -> back to 2 ranks, no
// step in between, then training on: bitwise the uninterrupted 2-rank run (weights, m, v,
// working weights and counters all came back), and the master weights right after each
// resharded restore equal the saved ones.
TEST(Checkpoint, ReshardingARoundTripIsExact) {
  TempDir dir;
  const TrainConfig cfg = ResumeConfig(dir.path());
  const std::string ck = dir.path() + "/ckpt";
  Params straight, at3;
  ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) { return Train(cfg, r, c, 0, 6, "", "", &straight); }), "");
  ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) { return Train(cfg, r, c, 0, 3, "", ck, &at3); }), "");
  struct Via {
    int world;
    int64_t sub_group_size;
    int stage;
    Tier offload = Tier::kNvme;
  };
  int n = 0;
  for (const Via via : {Via{1, cfg.sub_group_size, 3}, Via{3, cfg.sub_group_size, 3}, Via{2, 3000, 3},
                        Via{1, 3000, 2}, Via{2, cfg.sub_group_size, 3, Tier::kCpu}}) {
    SCOPED_TRACE(::testing::Message() << via.world << " rank(s), sub_group_size " << via.sub_group_size << ", stage "
                                      << via.stage << ", offload " << OffloadDeviceName(via.offload));
    TrainConfig other = cfg;
    other.sub_group_size = via.sub_group_size;
    other.zero_stage = via.stage;
    other.offload_param.device = other.offload_optimizer.device = via.offload;
    const std::string mid = dir.path() + "/mid" + std::to_string(n++);
    Params restored, resumed;
    ASSERT_EQ(RunRanks(via.world, [&](int r, Communicator& c) { return Train(other, r, c, 3, 3, ck, mid, &restored); }),
              "");
    testing::ExpectBitwiseEqual(at3, restored);
    ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) { return Train(cfg, r, c, 3, 6, mid, "", &resumed); }), "");
    testing::ExpectBitwiseEqual(straight, resumed);
  }
}

// LoRA (2 ranks, base on NVMe: rank 1's layer ranges are split into a frozen "working" and
// a host "adapter" tensor, rank 0 holds no optimizer state): a resume is bitwise, and so is a
// restore on 1 rank or with the base in host memory (where nothing is split) and back; with
// the base in the compute dtype and in NF4 (QLoRA: the groups hold the blobs' bytes).
TEST(Checkpoint, LoraResumesAndReshardsBitwise) {
  TempDir dir;
  for (const char* base : {"", "nf4"}) {
    SCOPED_TRACE(::testing::Message() << "base_dtype \"" << base << "\"");
    TrainConfig cfg = ResumeConfig(dir.path());
    cfg.model.arch = model::Arch::kLlama;
    cfg.model.lora.r = 4;
    cfg.model.lora.target_modules = {"q_proj", "v_proj", "down_proj"};
    cfg.model.lora.base_dtype = base;
    const std::string ck = dir.path() + "/ckpt" + base;
    const Params straight = ExpectResumeIsBitwise(cfg, ck);
    Params at3;
    ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) { return Train(cfg, r, c, 0, 3, "", ck, &at3); }), "");
    for (const auto& [world, offload] : {std::pair{1, Tier::kNvme}, std::pair{2, Tier::kCpu}}) {
      SCOPED_TRACE(::testing::Message() << world << " rank(s), offload " << OffloadDeviceName(offload));
      TrainConfig other = cfg;
      other.offload_param.device = other.offload_optimizer.device = offload;
      const std::string mid = dir.path() + "/lora-mid" + base + std::to_string(world);
      Params restored, resumed;
      ASSERT_EQ(RunRanks(world, [&](int r, Communicator& c) { return Train(other, r, c, 3, 3, ck, mid, &restored); }),
                "");
      testing::ExpectBitwiseEqual(at3, restored);
      ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) { return Train(cfg, r, c, 3, 6, mid, "", &resumed); }), "");
      testing::ExpectBitwiseEqual(straight, resumed);
    }
  }
}

// Saved by 2 ranks, continued by 1 (the same global batch: 2 micro-batches accumulated) and
// the other way: the run goes on as if uninterrupted, within the rounding that a different
// summation order of the gradients makes.
TEST(Checkpoint, ResumeOnAnotherRankCountContinuesTheRun) {
  TempDir dir;
  const TrainConfig two = ResumeConfig(dir.path());
  TrainConfig one = two;
  one.grad_accum = 2 * two.grad_accum;  // the same samples per step as 2 ranks
  for (const bool shrink : {true, false}) {
    SCOPED_TRACE(shrink ? "2 -> 1" : "1 -> 2");
    const TrainConfig& first = shrink ? two : one;
    const TrainConfig& then = shrink ? one : two;
    const int w0 = shrink ? 2 : 1, w1 = shrink ? 1 : 2;
    const std::string ck = dir.path() + (shrink ? "/ck21" : "/ck12");
    Params straight, resumed;
    ASSERT_EQ(RunRanks(w0, [&](int r, Communicator& c) { return Train(first, r, c, 0, 6, "", "", &straight); }), "");
    ASSERT_EQ(RunRanks(w0, [&](int r, Communicator& c) { return Train(first, r, c, 0, 3, "", ck, nullptr); }), "");
    ASSERT_EQ(RunRanks(w1, [&](int r, Communicator& c) { return Train(then, r, c, 3, 6, ck, "", &resumed); }), "");
    double worst = 0;
    for (size_t b = 0; b < straight.size(); ++b)
      for (size_t i = 0; i < straight[b].size(); ++i)
        worst = std::max(worst, (straight[b][i].second - resumed[b][i].second).abs().max().item<double>());
    EXPECT_LE(worst, 1e-5) << "largest weight difference after 3 steps";
    std::printf("[ resharded %s ] largest master-weight difference after 3 more steps: %.3g\n",
                shrink ? "2 -> 1" : "1 -> 2", worst);
  }
}

// An I/O error in the middle of the optimizer's NVMe pipeline (a write of step 3's states)
// ends the run with an error naming the swap file and the tensor; the checkpoint taken
// before resumes, and the run goes on bitwise as if nothing had happened.
TEST(Checkpoint, AnIoErrorInTheOptimizerPipelineEndsTheRunAndTheCheckpointResumes) {
  TempDir dir;
  const TrainConfig cfg = ResumeConfig(dir.path());
  const std::string ck = dir.path() + "/ckpt";
  auto data = data::TokenDataset::Open(cfg.data, cfg.model.vocab_size, cfg.model.seq_len);
  ASSERT_TRUE(data.ok());
  // Where step 3's writes are: count them on a clean run.
  long before = 0, after = 0;
  {
    testing::FaultyIoEngine* counter = nullptr;
    EngineHooks h;
    h.wrap_io_engine = [&](std::unique_ptr<IoEngine> inner) -> std::unique_ptr<IoEngine> {
      auto e = std::make_unique<testing::FaultyIoEngine>(std::move(inner), std::vector<testing::Fault>{});
      counter = e.get();
      return e;
    };
    auto comm = MakeSingleRankCommunicator();
    auto e = Engine::Create(testing::Settled(cfg, comm->world_size()), comm.get(), nullptr, std::move(h));
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    for (int64_t s = 0; s < 3; ++s) ASSERT_TRUE((*e)->Step(s, **data).ok());
    ASSERT_TRUE((*e)->Finish().ok());
    before = counter->requests(IoOp::kWrite);
    ASSERT_TRUE((*e)->Step(3, **data).ok());
    ASSERT_TRUE((*e)->Finish().ok());
    after = counter->requests(IoOp::kWrite);
  }
  ASSERT_GT(after, before + 2);
  Params straight, resumed;
  ASSERT_EQ(RunRanks(1, [&](int r, Communicator& c) { return Train(cfg, r, c, 0, 6, "", "", &straight); }), "");
  std::string swap_file;
  const std::string err = RunRanks(1, [&](int r, Communicator& c) -> Status {
    EngineHooks h;
    h.wrap_io_engine = [&](std::unique_ptr<IoEngine> inner) -> std::unique_ptr<IoEngine> {
      return std::make_unique<testing::FaultyIoEngine>(
          std::move(inner), std::vector<testing::Fault>{{IoOp::kWrite, (before + after) / 2, testing::FaultKind::kError, EIO}});
    };
    STRATA_ASSIGN_OR_RETURN(const RunConfig settled, testing::TrySettle(cfg, c.world_size()));
    STRATA_ASSIGN_OR_RETURN(auto e, Engine::Create(settled, &c, nullptr, std::move(h)));
    for (int64_t s = 0; s < 3; ++s) STRATA_RETURN_IF_ERROR(e->Step(s, **data).status());
    STRATA_RETURN_IF_ERROR(ckpt::SaveCheckpoint(*e, c, cfg, ck, 3));
    STRATA_RETURN_IF_ERROR(e->Step(3, **data).status());
    STRATA_RETURN_IF_ERROR(e->Finish());
    return Error(StatusCode::kInternal, "step 3 succeeded despite the injected error");
  });
  EXPECT_NE(err.find("strata-swap-r0-"), std::string::npos) << err;  // the swap file
  EXPECT_NE(err.find("errno 5"), std::string::npos) << err;          // EIO
  EXPECT_TRUE(err.find(".master") != std::string::npos || err.find(".adam_m") != std::string::npos ||
              err.find(".adam_v") != std::string::npos || err.find(".working") != std::string::npos)
      << err;
  ASSERT_EQ(RunRanks(1, [&](int r, Communicator& c) { return Train(cfg, r, c, 3, 6, ck, "", &resumed); }), "");
  testing::ExpectBitwiseEqual(straight, resumed);
}

// The swap file under a running engine: truncated, the next read of a state it lost ends the
// run with an error naming the file (and the checkpoint before resumes bitwise); deleted,
// nothing is lost (the store keeps it open) and training goes on bitwise.
TEST(Checkpoint, ASwapFileTruncatedOrDeletedUnderTraining) {
  TempDir dir;
  const TrainConfig cfg = ResumeConfig(dir.path());
  auto data = data::TokenDataset::Open(cfg.data, cfg.model.vocab_size, cfg.model.seq_len);
  ASSERT_TRUE(data.ok());
  Params straight;
  ASSERT_EQ(RunRanks(1, [&](int r, Communicator& c) { return Train(cfg, r, c, 0, 6, "", "", &straight); }), "");
  auto swap_file = [&]() -> std::string {
    for (const auto& e : fs::directory_iterator(dir.path()))
      if (e.path().filename().string().rfind("strata-swap-r0-", 0) == 0) return (e.path() / "swap.bin").string();
    return "";
  };
  for (const bool truncate : {true, false}) {
    SCOPED_TRACE(truncate ? "truncated" : "deleted");
    const std::string ck = dir.path() + (truncate ? "/ck_t" : "/ck_d");
    Params after;
    const std::string err = RunRanks(1, [&](int r, Communicator& c) -> Status {
      STRATA_ASSIGN_OR_RETURN(const RunConfig settled, testing::TrySettle(cfg, c.world_size()));
      STRATA_ASSIGN_OR_RETURN(auto e, Engine::Create(settled, &c, nullptr));
      for (int64_t s = 0; s < 3; ++s) STRATA_RETURN_IF_ERROR(e->Step(s, **data).status());
      STRATA_RETURN_IF_ERROR(ckpt::SaveCheckpoint(*e, c, cfg, ck, 3));
      STRATA_RETURN_IF_ERROR(e->Finish());
      const std::string file = swap_file();
      if (file.empty()) return Error(StatusCode::kInternal, "no swap file under {}", dir.path());
      if (truncate) fs::resize_file(file, 0);
      else fs::remove(file);
      for (int64_t s = 3; s < 6; ++s) STRATA_RETURN_IF_ERROR(e->Step(s, **data).status());
      STRATA_RETURN_IF_ERROR(e->Finish());
      return CollectMaster(*e, r, &after);
    });
    if (truncate) {
      EXPECT_NE(err.find("swap.bin"), std::string::npos) << err;
      EXPECT_NE(err.find("truncated"), std::string::npos) << err;
      Params resumed;
      ASSERT_EQ(RunRanks(1, [&](int r, Communicator& c) { return Train(cfg, r, c, 3, 6, ck, "", &resumed); }), "");
      testing::ExpectBitwiseEqual(straight, resumed);
    } else {
      ASSERT_EQ(err, "");
      testing::ExpectBitwiseEqual(straight, after);
    }
  }
}

TEST(Checkpoint, ResumeRefusesAnotherModel) {
  TempDir dir;
  TrainConfig cfg = ResumeConfig(dir.path());
  const std::string ck = dir.path() + "/ckpt";
  ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) { return Train(cfg, r, c, 0, 1, "", ck, nullptr); }), "");
  TrainConfig other = cfg;
  other.model.n_head = 8;
  std::string err = RunRanks(2, [&](int r, Communicator& c) { return Train(other, r, c, 1, 1, ck, "", nullptr); });
  EXPECT_NE(err.find("strata.model.n_head is 4 there, 8 in this run"), std::string::npos) << err;
}

}  // namespace
}  // namespace strata
