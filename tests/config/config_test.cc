// ds_config parsing: the shipped configs, errors naming keys and ranges, warnings for keys
// Strata does not use, --set overrides (the learning-rate schedules: lr_schedule_test.cc).
#include <gtest/gtest.h>

#include <optional>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "src/config/train_config.h"
#include "src/settle/settle_keys.h"
#include "src/config/decay_groups.h"
#include "strata/isa.h"

namespace strata {
namespace {

// A parsed config that a test settles one key of itself (SettledConfig: nothing settled yet).
std::optional<SettledConfig> Unsettled(const StatusOr<TrainConfig>& parsed) {
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  return parsed.ok() ? std::optional<SettledConfig>(SettledConfig(*parsed)) : std::nullopt;
}

TEST(Config, EveryShippedConfigParses) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(STRATA_SOURCE_DIR "/configs")) {
    if (e.path().extension() != ".json") continue;
    auto c = LoadTrainConfig(e.path().string());
    EXPECT_TRUE(c.ok()) << e.path() << ": " << c.status().ToString();
    if (c.ok()) {
      EXPECT_TRUE(c->warnings.empty()) << e.path() << ": unused key " << c->warnings[0];
    }
    ++n;
  }
  EXPECT_GE(n, 2);
}

TEST(Config, TheDefaultConfigIsTheTinyNvmeRun) {
  auto c = LoadTrainConfig(STRATA_SOURCE_DIR "/configs/tiny_cpu.json");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->zero_stage, 3);
  EXPECT_EQ(c->offload_param.device, Tier::kNvme);
  EXPECT_EQ(c->offload_optimizer.device, Tier::kNvme);
  EXPECT_TRUE(c->bf16_auto);  // bf16 where it is native, fp32 elsewhere (ResolvePrecision)
}

// bf16.enabled "auto": bf16 on a GPU, and on a CPU only where bf16 is native; forcing bf16
// on a CPU without it warns. STRATA_FORCE_ISA-style forcing below avx512 stands for a CPU
// without native bf16, so every branch runs on every machine.
TEST(Config, AutoPrecisionFollowsTheDevice) {
  auto parse = [](const char* text) {
    auto c = ParseTrainConfig(text, "p.json");
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return *c;
  };
  const char* kAuto = R"({"bf16": {"enabled": "auto"}})";
  TrainConfig gpu = parse(kAuto);
  ResolvePrecision(&gpu, /*on_gpu=*/true);
  EXPECT_EQ(gpu.compute_dtype, DType::kBF16);
  EXPECT_TRUE(gpu.precision_warning.empty());

  SetForcedIsa(IsaLevel::kAvx2);
  TrainConfig cpu = parse(kAuto);
  ResolvePrecision(&cpu, /*on_gpu=*/false);
  EXPECT_EQ(cpu.compute_dtype, DType::kF32);
  EXPECT_NE(cpu.precision_reason.find("bf16.enabled \"auto\""), std::string::npos) << cpu.precision_reason;
  EXPECT_TRUE(cpu.precision_warning.empty());
  bool explained = false;
  for (const AutoValue& a : cpu.autos) explained |= a.path == "bf16.enabled" && a.value == "false";
  EXPECT_TRUE(explained);
  ResolvePrecision(&cpu, /*on_gpu=*/false);  // idempotent: one entry
  EXPECT_EQ(std::count_if(cpu.autos.begin(), cpu.autos.end(), [](auto& a) { return a.path == "bf16.enabled"; }), 1);

  TrainConfig forced = parse(R"({"bf16": {"enabled": true}})");
  ResolvePrecision(&forced, /*on_gpu=*/false);
  EXPECT_EQ(forced.compute_dtype, DType::kBF16);
  EXPECT_NE(forced.precision_warning.find("10x slower"), std::string::npos) << forced.precision_warning;
  TrainConfig fp16 = parse(R"({"bf16": {"enabled": "auto"}, "fp16": {"enabled": true}})");
  ResolvePrecision(&fp16, /*on_gpu=*/false);
  EXPECT_EQ(fp16.compute_dtype, DType::kF16);
  ClearForcedIsa();

  if (CpuHasNativeBf16()) {  // the other CPU branch, where this machine has it
    TrainConfig native = parse(kAuto);
    ResolvePrecision(&native, /*on_gpu=*/false);
    EXPECT_EQ(native.compute_dtype, DType::kBF16);
  }
  auto bad = ParseTrainConfig(R"({"bf16": {"enabled": "yes"}})", "p.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bf16.enabled: expected true, false or \"auto\""), std::string::npos)
      << bad.status().message();
}

// DeepSpeed's deprecated flat offload keys keep DeepSpeed's meaning; mixing one with the
// section that replaced it is an error naming both.
TEST(Config, LegacyCpuOffloadKeysMapToTheOffloadSections) {
  auto c = ParseTrainConfig(R"({"gradient_clipping": 1.0,
                               "zero_optimization": {"stage": 3, "cpu_offload": true, "cpu_offload_params": true,
                                                     "cpu_offload_use_pin_memory": false}})", "l.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->offload_optimizer.device, Tier::kCpu);
  EXPECT_EQ(c->offload_param.device, Tier::kCpu);
  EXPECT_FALSE(c->offload_optimizer.pin_memory);
  EXPECT_TRUE(c->warnings.empty());
  EXPECT_EQ(c->notes.size(), 3u);
  auto off = ParseTrainConfig(R"({"zero_optimization": {"cpu_offload": false}})", "l.json");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->offload_optimizer.device, Tier::kDevice);
  auto both = ParseTrainConfig(R"({"zero_optimization": {"cpu_offload": true, "offload_optimizer": {"device": "nvme"}}})",
                               "l.json");
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("zero_optimization.cpu_offload and zero_optimization.offload_optimizer"),
            std::string::npos) << both.status().message();
}

// strata.recompute: "auto" keeps the activations when they fit; DeepSpeed's
// activation_checkpointing section means recompute; strata.recompute overrides either.
TEST(Config, RecomputeFollowsTheFitAndActivationCheckpointing) {
  auto c = Unsettled(ParseTrainConfig("{}", "r.json"));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->recompute, Recompute::kAuto);
  EXPECT_FALSE(c->keep_activations);  // unresolved: the safe path
  ResolveRecompute(&*c, /*fits=*/true);
  EXPECT_TRUE(c->keep_activations);
  ResolveRecompute(&*c, /*fits=*/false);
  EXPECT_FALSE(c->keep_activations);
  ASSERT_EQ(std::count_if(c->autos.begin(), c->autos.end(), [](const AutoValue& a) { return a.path == "strata.recompute"; }), 1);

  auto ac = Unsettled(ParseTrainConfig(R"({"activation_checkpointing": {"partition_activations": true,
      "cpu_checkpointing": true, "number_checkpoints": 4, "typo": 1}})", "r.json"));
  ASSERT_TRUE(ac);
  EXPECT_EQ(ac->recompute, Recompute::kAlways);
  ResolveRecompute(&*ac, /*fits=*/true);
  EXPECT_FALSE(ac->keep_activations);
  auto has = [](const std::vector<std::string>& v, const std::string& s) {
    return std::any_of(v.begin(), v.end(), [&](const std::string& x) { return x.find(s) != std::string::npos; });
  };
  EXPECT_TRUE(has(ac->notes, "cpu_checkpointing: the saved block inputs wait in host memory"));
  EXPECT_EQ(ac->block_inputs, BlockInputsAt::kHost);
  EXPECT_TRUE(has(ac->warnings, "activation_checkpointing.typo"));
  EXPECT_FALSE(has(ac->warnings, "partition_activations"));

  auto never = Unsettled(ParseTrainConfig(R"({"activation_checkpointing": {}, "strata": {"recompute": "never"}})", "r.json"));
  ASSERT_TRUE(never);
  ResolveRecompute(&*never, /*fits=*/false);
  EXPECT_TRUE(never->keep_activations);  // asked for, even where the estimate says it won't fit
  auto bad = ParseTrainConfig(R"({"strata": {"recompute": "sometimes"}})", "r.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("strata.recompute"), std::string::npos) << bad.status().message();
}

// A config no one should write is an error naming where, never a crash: 100,000 nested
// arrays (a recursive parser's stack), a number beyond double's range (an uncaught throw).
TEST(Config, HostileJsonIsAnErrorNamingWhere) {
  auto deep = ParseTrainConfig("{\"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}", "d.json");
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("d.json: nested deeper than 64 levels at byte 69"), std::string::npos)
      << deep.status().message();
  auto huge = ParseTrainConfig(R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e999}}})", "h.json");
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("h.json: optimizer.params.lr: "), std::string::npos) << huge.status().message();
  EXPECT_NE(huge.status().message().find("number overflow"), std::string::npos) << huge.status().message();
  auto set = ApplyOverrides("{}", {"optimizer.params.lr=1e999"});  // kept as text: the key's reader names it
  ASSERT_TRUE(set.ok());
  auto c = ParseTrainConfig(*set, "s.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("optimizer.params.lr"), std::string::npos) << c.status().message();
  EXPECT_FALSE(ApplyOverrides("{}", {"x=" + std::string(1000, '[')}).ok());
  // Found by fuzz_config: --set into a config that is not an object threw; a value that is
  // not UTF-8 threw when the config was written back out.
  EXPECT_FALSE(ApplyOverrides("5", {"a=1"}).ok());
  auto bytes = ApplyOverrides("{}", {"strata.x=\xff\xfe"});
  ASSERT_TRUE(bytes.ok());
  EXPECT_NE(bytes->find("\xef\xbf\xbd"), std::string::npos) << *bytes;  // U+FFFD
}

TEST(Config, WrongTypeNamesTheKey) {
  auto c = ParseTrainConfig(R"({"zero_optimization": {"stage": "three"}})", "x.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("zero_optimization.stage"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("x.json"), std::string::npos);
}

TEST(Config, OutOfRangeNamesTheRange) {
  auto c = ParseTrainConfig(R"({"zero_optimization": {"stage": 4}})", "x.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("[0, 3]"), std::string::npos) << c.status().message();
  auto d = ParseTrainConfig(R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1.5]}}})", "x.json");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("optimizer.params.betas"), std::string::npos);
  auto e = ParseTrainConfig(R"({"zero_optimization": {"offload_optimizer": {"device": "gpu"}}})", "x.json");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("\"none\", \"cpu\", \"nvme\""), std::string::npos) << e.status().message();
}

TEST(Config, UnknownKeysAreWarnedByPath) {
  auto c = ParseTrainConfig(R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stgae": 3},
                                "strata": {"model": {"n_layers": 2}}, "fancy_feature": true})", "x.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::vector<std::string> want = {"zero_optimization.stgae", "strata.model.n_layers", "fancy_feature"};
  for (const auto& w : want)
    EXPECT_NE(std::find(c->warnings.begin(), c->warnings.end(), w), c->warnings.end()) << w;
}

TEST(Config, DeepSpeedStyleConfigIsAccepted) {
  // In the style of DeepSpeed's ZeRO-Infinity documentation.
  auto c = ParseTrainConfig(R"({
    "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
    "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
             "hysteresis": 2, "min_loss_scale": 1},
    "optimizer": {"type": "Adam", "params": {"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-4, "warmup_num_steps": 100}},
    "zero_optimization": {"stage": 3, "contiguous_gradients": true, "overlap_comm": true,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true, "buffer_count": 4,
                            "ratio": 0.3, "pipeline_read": false, "pipeline_write": false, "fast_init": false},
      "offload_param": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true, "buffer_count": 5,
                        "buffer_size": 1e8, "max_in_cpu": 1e9},
      "stage3_max_live_parameters": 1e9, "stage3_prefetch_bucket_size": 5e8, "sub_group_size": 1e9},
    "aio": {"block_size": 1048576, "queue_depth": 8, "thread_count": 1, "single_submit": false, "overlap_events": true},
    "steps_per_print": 100, "wall_clock_breakdown": false})", "ds.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->warnings.empty()) << c->warnings[0];
  EXPECT_EQ(c->compute_dtype, DType::kF16);
  // Keys with no effect here are accepted, each with a note saying why.
  for (const char* key : {"zero_optimization.offload_param.buffer_size", "zero_optimization.offload_param.max_in_cpu",
                          "zero_optimization.offload_optimizer.buffer_count", "zero_optimization.offload_optimizer.ratio",
                          "zero_optimization.stage3_max_live_parameters", "aio.thread_count", "aio.single_submit",
                          "aio.overlap_events"}) {
    bool noted = false;
    for (const std::string& n : c->notes) noted |= n.rfind(std::string(key) + ": accepted, not used: ", 0) == 0;
    EXPECT_TRUE(noted) << key;
  }
  EXPECT_EQ(c->prefetch_bucket_size, 500000000);
  EXPECT_EQ(c->grad_accum, 2);
}

TEST(Config, OverridesApplyByPath) {
  auto text = ApplyOverrides(R"({"zero_optimization": {"stage": 3}})",
                             {"zero_optimization.stage=1", "strata.model.arch=llama", "bf16.enabled=true"});
  ASSERT_TRUE(text.ok());
  auto c = ParseTrainConfig(*text, "x");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->zero_stage, 1);
  EXPECT_EQ(c->model.arch, model::Arch::kLlama);
  EXPECT_EQ(c->compute_dtype, DType::kBF16);
  EXPECT_FALSE(ApplyOverrides("{}", {"novalue"}).ok());
}

// DeepSpeed documentation examples (written in their style: tests/config/ds_configs/)
// are accepted unchanged; the only warnings are keys Strata does not use, by name.
TEST(Config, DeepSpeedDocumentationExamplesAreAcceptedUnchanged) {
  const std::string dir = STRATA_SOURCE_DIR "/tests/config/ds_configs/";
  struct Case {
    const char* file;
    int world;
    int64_t micro, accum;
  };
  for (const Case& k : {Case{"config_json_basic.json", 1, 8, 1}, Case{"zero3_offload_cpu.json", 2, 4, 2},
                        Case{"zero_infinity_nvme.json", 4, 8, 2}, Case{"schedulers_warmup_decay.json", 2, 8, 1},
                        Case{"schedulers_warmup_cosine.json", 1, 2, 4}, Case{"hf_trainer_zero3_auto.json", 2, 8, 1},
                        Case{"with_strata_file.json", 1, 2, 1}}) {
    auto c = LoadTrainConfig(dir + k.file);
    ASSERT_TRUE(c.ok()) << k.file << ": " << c.status().ToString();
    EXPECT_TRUE(c->warnings.empty()) << k.file << ": " << c->warnings[0];
    ASSERT_TRUE(ResolveBatch(&*c, k.world).ok()) << k.file;
    EXPECT_EQ(c->micro_batch, k.micro) << k.file;
    EXPECT_EQ(c->grad_accum, k.accum) << k.file;
    EXPECT_EQ(c->train_batch, k.micro * k.accum * k.world) << k.file;
  }
  auto basic = LoadTrainConfig(dir + "config_json_basic.json");
  EXPECT_EQ(basic->zero_stage, 1);  // legacy "zero_optimization": true
  EXPECT_EQ(basic->compute_dtype, DType::kF16);
  EXPECT_EQ(basic->weight_decay, 0);  // Adam's default
  EXPECT_EQ(basic->gradient_clipping, 1.0);  // DeepSpeed 0.19.8's default: the key is absent
  auto nvme = LoadTrainConfig(dir + "zero_infinity_nvme.json");
  EXPECT_EQ(nvme->offload_param.device, Tier::kNvme);
  EXPECT_EQ(nvme->aio.block_size, 262144);
  EXPECT_TRUE(nvme->wall_clock_breakdown);
  auto decay = LoadTrainConfig(dir + "schedulers_warmup_decay.json");
  EXPECT_EQ(decay->schedule.kind, LrScheduleKind::kWarmupDecayLR);
  EXPECT_EQ(decay->schedule.total_num_steps, 10000);
  auto second = LoadTrainConfig(dir + "with_strata_file.json");
  EXPECT_EQ(second->steps, 7);
  EXPECT_EQ(second->save_interval, 3);
  EXPECT_EQ(second->model.arch, model::Arch::kLlama);
}

// What DeepSpeed 0.19.8 makes of a key left out (tests/config/ds_meaning_test.py compares
// the corpus with DeepSpeed's own parser and optimizer classes).
TEST(Config, AbsentKeysMeanDeepSpeedsDefaults) {
  auto parse = [](const std::string& optimizer, const std::string& clip) {
    auto c = ParseTrainConfig("{" + clip + R"("optimizer": )" + optimizer + "}", "test");
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return *c;
  };
  const TrainConfig adamw = parse(R"({"type": "AdamW", "params": {"lr": 3e-4}})", "");
  EXPECT_EQ(adamw.gradient_clipping, 1.0);
  EXPECT_EQ(adamw.weight_decay, 0.0);  // DeepSpeedCPUAdam / FusedAdam
  bool noted = false;
  for (const auto& n : adamw.notes) noted = noted || n.find("gradient_clipping: not set, so 1.0") != std::string::npos;
  EXPECT_TRUE(noted);
  EXPECT_EQ(parse(R"({"type": "AdamW", "params": {"torch_adam": true}})", "").weight_decay, 0.01);  // torch.optim.AdamW
  EXPECT_EQ(parse(R"({"type": "Adam", "params": {"torch_adam": true}})", "").weight_decay, 0.01);  // AdamW: adam_w_mode
  EXPECT_EQ(parse(R"({"type": "Adam", "params": {"torch_adam": true, "adam_w_mode": false}})", "").weight_decay,
            0.0);  // torch.optim.Adam
  EXPECT_EQ(parse(R"({"type": "AdamW", "params": {"weight_decay": 0.1}})", "").weight_decay, 0.1);
  EXPECT_EQ(parse(R"({"type": "AdamW"})", R"("gradient_clipping": 0, )").gradient_clipping, 0.0);  // off, as written
  // Kept on purpose, and said: a decaying schedule without total_num_steps (DeepSpeed refuses it).
  auto cosine = ParseTrainConfig(R"({"scheduler": {"type": "WarmupCosineLR"}, "strata": {"steps": 40}})", "test");
  ASSERT_TRUE(cosine.ok()) << cosine.status().ToString();
  EXPECT_EQ(cosine->schedule.total_num_steps, 40);
  bool said = false;
  for (const auto& n : cosine->notes) said = said || n.find("total_num_steps: not set, so the run's steps") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(Config, AutoValuesAreResolvedAndExplained) {
  auto c = LoadTrainConfig(STRATA_SOURCE_DIR "/tests/config/ds_configs/hf_trainer_zero3_auto.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(ResolveBatch(&*c, 2).ok());
  auto find = [&](const std::string& path) -> const AutoValue* {
    for (const auto& a : c->autos)
      if (a.path == path) return &a;
    return nullptr;
  };
  for (const char* k : {"fp16.enabled", "optimizer.params.lr", "optimizer.params.betas", "optimizer.params.eps",
                        "optimizer.params.weight_decay", "scheduler.params.warmup_max_lr", "gradient_clipping",
                        "zero_optimization.stage3_prefetch_bucket_size", "train_batch_size",
                        "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"})
    EXPECT_NE(find(k), nullptr) << k;
  EXPECT_EQ(find("scheduler.params.warmup_max_lr")->reason, "the optimizer's lr");
  EXPECT_EQ(find("train_batch_size")->value, "16");  // 8 x 1 x 2 ranks
  EXPECT_EQ(c->compute_dtype, DType::kF32);
}

TEST(Config, BatchSizeConsistencyRule) {
  auto parse = [](const std::string& text, int world) -> StatusOr<TrainConfig> {
    STRATA_ASSIGN_OR_RETURN(TrainConfig c, ParseTrainConfig(text, "b.json"));
    STRATA_RETURN_IF_ERROR(ResolveBatch(&c, world));
    return c;
  };
  auto c = parse(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})", 2);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->grad_accum, 4);
  c = parse(R"({"train_batch_size": 32, "gradient_accumulation_steps": 2})", 4);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->micro_batch, 4);
  c = parse(R"({"train_batch_size": 24})", 3);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->micro_batch, 8);
  EXPECT_EQ(c->grad_accum, 1);
  c = parse(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1})", 2);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("train_batch_size 30 != train_micro_batch_size_per_gpu 4 * "
                                      "gradient_accumulation_steps 1 * 2 rank(s) = 8"),
            std::string::npos)
      << c.status().message();
  c = parse(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4})", 2);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("not divisible"), std::string::npos) << c.status().message();
  c = parse(R"({"train_batch_size": "eight"})", 1);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("train_batch_size: expected an integer"), std::string::npos);
}

TEST(Config, MisspeltKeysAreWarnedAndWrongValuesNameTheRange) {
  auto c = ParseTrainConfig(R"({"gradient_clipings": 1.0, "zero_optimization": {"stage": 3,
      "offload_param": {"devcie": "cpu"}}, "optimizer": {"type": "AdamW", "params": {"learning_rate": 1e-3}}})",
                            "m.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (const char* w : {"gradient_clipings", "zero_optimization.offload_param.devcie", "optimizer.params.learning_rate"})
    EXPECT_NE(std::find(c->warnings.begin(), c->warnings.end(), w), c->warnings.end()) << w;
  auto bad = ParseTrainConfig(R"({"fp16": {"enabled": true, "initial_scale_power": 99}})", "m.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("fp16.initial_scale_power: 99 is out of range [0, 64]"), std::string::npos)
      << bad.status().message();
  bad = ParseTrainConfig(R"({"aio": {"queue_depth": "deep"}})", "m.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("aio.queue_depth: expected an integer in [1, 4096]"), std::string::npos)
      << bad.status().message();
  bad = ParseTrainConfig(R"({"scheduler": {"type": "CyclicLR"}})", "m.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"CyclicLR\" is not one of"), std::string::npos);
  bad = ParseTrainConfig(R"({"scheduler": {"type": "OneCycle", "params": {"cycle_max_lr": 0.1}}})", "m.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("scheduler.params.cycle_min_lr: required by OneCycle"), std::string::npos)
      << bad.status().message();
}

TEST(Config, SecondFileAndSetOverridesCompose) {
  std::string origin = "default";
  auto text = ComposeConfigText(STRATA_SOURCE_DIR "/tests/config/ds_configs/with_strata_file.json", "", "",
                                {"strata.model.n_layer=3", "zero_optimization.stage=2"}, &origin);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_NE(origin.find("with_strata_file.strata.json"), std::string::npos) << origin;
  auto c = ParseTrainConfig(*text, origin);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model.n_layer, 3);
  EXPECT_EQ(c->zero_stage, 2);
  EXPECT_EQ(c->steps, 7);
  auto missing = ComposeConfigText("/nonexistent/ds.json", "", "", {}, &origin);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/ds.json"), std::string::npos);
}

// Note [Delayed update]: only with the working weights on NVMe, none resident, no LoRA; the
// error names the key to change.
TEST(Config, DelayedUpdateNeedsWorkingWeightsOnNvme) {
  const std::string nvme = R"("zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/x"}})";
  auto ok = ParseTrainConfig("{" + nvme + R"(, "strata": {"optimizer_overlap": "delayed"}})", "d.json");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->optimizer_overlap, OptimizerOverlap::kDelayed);
  auto cpu = ParseTrainConfig(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}},
                                  "strata": {"optimizer_overlap": "delayed"}})", "d.json");
  ASSERT_FALSE(cpu.ok());
  EXPECT_NE(cpu.status().message().find("zero_optimization.offload_param.device"), std::string::npos)
      << cpu.status().message();
  EXPECT_NE(cpu.status().message().find("d.json"), std::string::npos);
  auto resident = ParseTrainConfig("{" + nvme + R"(, "strata": {"optimizer_overlap": "delayed", "resident_blocks": 2}})",
                                   "d.json");
  ASSERT_FALSE(resident.ok());
  EXPECT_NE(resident.status().message().find("strata.resident_blocks"), std::string::npos);
  auto lora = ParseTrainConfig("{" + nvme + R"(, "strata": {"optimizer_overlap": "delayed", "lora": {"r": 4}}})",
                               "d.json");
  ASSERT_FALSE(lora.ok());
  EXPECT_NE(lora.status().message().find("strata.lora"), std::string::npos) << lora.status().message();
}

// strata.host_blocks only with the optimizer states on NVMe; the error names both keys.
TEST(Config, HostBlocksNeedOptimizerStatesOnNvme) {
  auto ok = ParseTrainConfig(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path":
                                 "/x"}}, "strata": {"host_blocks": 5}})", "h.json");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->host_blocks, 5);
  auto cpu = ParseTrainConfig(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}},
                                  "strata": {"host_blocks": 5}})", "h.json");
  ASSERT_FALSE(cpu.ok());
  for (const char* part : {"strata.host_blocks", "zero_optimization.offload_optimizer.device", "h.json"})
    EXPECT_NE(cpu.status().message().find(part), std::string::npos) << cpu.status().message();
  // "auto" is settled by the estimate (ResolveHostBlocks); without NVMe states it means none.
  auto automatic = ParseTrainConfig(R"({"strata": {"host_blocks": "auto"}})", "h.json");
  ASSERT_TRUE(automatic.ok()) << automatic.status().message();
  EXPECT_EQ(automatic->host_blocks, -1);
  auto negative = ParseTrainConfig(R"({"strata": {"host_blocks": -1}})", "h.json");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("host_blocks"), std::string::npos) << negative.status().message();
}

// strata.device_accumulation: "auto" (the default, settled by the estimate), true or false;
// ResolveDeviceAccumulation turns it off on the host and with one micro-batch, and records
// what "auto" became.
TEST(Config, DeviceAccumulationIsAutoTrueOrFalse) {
  auto absent = Unsettled(ParseTrainConfig(R"({"gradient_accumulation_steps": 4})", "d.json"));
  ASSERT_TRUE(absent);
  EXPECT_EQ(absent->device_accumulation, -1);
  EXPECT_FALSE(absent->accumulate_on_device);  // unresolved: the per-micro-batch path
  auto on = Unsettled(ParseTrainConfig(R"({"gradient_accumulation_steps": 4, "strata": {"device_accumulation": true}})", "d.json"));
  ASSERT_TRUE(on);
  EXPECT_EQ(on->device_accumulation, 1);
  ResolveDeviceAccumulation(&*on, /*host_device=*/true, true);
  EXPECT_FALSE(on->accumulate_on_device);  // no device to sum on
  ResolveDeviceAccumulation(&*on, /*host_device=*/false, false);
  EXPECT_TRUE(on->accumulate_on_device);  // as written, fit or not (the fit check has the last word)
  auto automatic = Unsettled(ParseTrainConfig(R"({"gradient_accumulation_steps": 4, "strata": {"device_accumulation": "auto"}})",
                                              "d.json"));
  ASSERT_TRUE(automatic);
  ResolveDeviceAccumulation(&*automatic, /*host_device=*/false, true);
  EXPECT_TRUE(automatic->accumulate_on_device);
  bool recorded = false;
  for (const AutoValue& a : automatic->autos) recorded = recorded || (a.path == "strata.device_accumulation" && a.value == "true");
  EXPECT_TRUE(recorded);
  auto bad = ParseTrainConfig(R"({"strata": {"device_accumulation": "yes"}})", "d.json");
  ASSERT_FALSE(bad.ok());
  for (const char* part : {"strata.device_accumulation", "\"yes\"", "\"auto\""})
    EXPECT_NE(bad.status().message().find(part), std::string::npos) << bad.status().message();
}

// strata.expert_fetch: "routed" (the default) or "all"; anything else names the key and the choices.
TEST(Config, ExpertFetchIsRoutedOrAll) {
  auto absent = ParseTrainConfig("{}", "e.json");
  ASSERT_TRUE(absent.ok()) << absent.status().message();
  EXPECT_EQ(absent->expert_fetch, ExpertFetch::kRouted);
  auto all = ParseTrainConfig(R"({"strata": {"expert_fetch": "all"}})", "e.json");
  ASSERT_TRUE(all.ok()) << all.status().message();
  EXPECT_EQ(all->expert_fetch, ExpertFetch::kAll);
  EXPECT_TRUE(all->warnings.empty());
  auto bad = ParseTrainConfig(R"({"strata": {"expert_fetch": "some"}})", "e.json");
  ASSERT_FALSE(bad.ok());
  for (const char* part : {"strata.expert_fetch", "\"some\"", "\"routed\"", "\"all\""})
    EXPECT_NE(bad.status().message().find(part), std::string::npos) << bad.status().message();
}

// Note [Expert updates]: every expert stepped (as transformers 5's fused tensors) unless "chosen".
TEST(Config, ExpertUpdateIsAllOrChosen) {
  auto absent = ParseTrainConfig("{}", "e.json");
  ASSERT_TRUE(absent.ok()) << absent.status().message();
  EXPECT_EQ(absent->expert_update, ExpertUpdate::kAll);
  auto chosen = ParseTrainConfig(R"({"strata": {"expert_update": "chosen"}})", "e.json");
  ASSERT_TRUE(chosen.ok()) << chosen.status().message();
  EXPECT_EQ(chosen->expert_update, ExpertUpdate::kChosen);
  auto bad = ParseTrainConfig(R"({"strata": {"expert_update": "routed"}})", "e.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("strata.expert_update"), std::string::npos) << bad.status().message();
}

TEST(Config, MasterWeightsAreFp32OrSplitWithAnUpdateThatReadsThem) {
  auto absent = ParseTrainConfig("{}", "m.json");
  ASSERT_TRUE(absent.ok()) << absent.status().message();
  EXPECT_FALSE(absent->split_master);
  auto split = ParseTrainConfig(R"({"strata": {"master_weights": "split"}})", "m.json");
  ASSERT_TRUE(split.ok()) << split.status().message();
  EXPECT_TRUE(split->split_master);
  auto bad = ParseTrainConfig(R"({"strata": {"master_weights": "bf16"}})", "m.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("strata.master_weights"), std::string::npos) << bad.status().message();
  for (const char* other : {R"("optimizer_overlap": "speculative")", R"("optimizer_overlap": "delayed")",
                            R"("model": {"arch": "llama"}, "lora": {"r": 4})", R"("resident_blocks": 2)"}) {
    auto no = ParseTrainConfig(fmt::format(R"({{"zero_optimization": {{"stage": 3, "offload_param": {{"device": "nvme"}}}},
                                              "strata": {{"master_weights": "split", {}}}}})", other), "m.json");
    ASSERT_FALSE(no.ok()) << other;
    EXPECT_NE(no.status().message().find("strata.master_weights \"split\""), std::string::npos) << other << ": " << no.status().message();
  }
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// strata.no_decay: "auto" is Hugging Face Trainer's groups (none with 8-bit moments); a list
// of regular expressions as written, a bad one named; a list with 8-bit moments refused.
TEST(Config, NoDecayIsTrainersGroupsOrTheWrittenPatterns) {
  auto c = ParseTrainConfig(R"({})", "t");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->no_decay.has_value());
  EXPECT_EQ(NoDecayPatterns(*c), HfTrainerNoDecay());
  const NameMatcher p(NoDecayPatterns(*c));
  for (const char* name : {"model.layers.0.input_layernorm.weight", "model.norm.weight", "transformer.h.1.ln_2.weight",
                           "transformer.ln_f.bias", "model.layers.3.self_attn.q_norm.weight",
                           "model.layers.0.self_attn.q_proj.bias"})
    EXPECT_TRUE(p.Matches(name)) << name;
  for (const char* name : {"model.layers.0.self_attn.q_proj.weight", "model.embed_tokens.weight", "lm_head.weight",
                           "transformer.h.0.attn.c_attn.weight", "model.layers.0.mlp.down_proj.weight"})
    EXPECT_FALSE(p.Matches(name)) << name;

  auto written = ParseTrainConfig(R"({"strata": {"no_decay": ["embed_tokens", "norm"]}})", "t");
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ(NoDecayPatterns(*written), (std::vector<std::string>{"embed_tokens", "norm"}));
  auto none = ParseTrainConfig(R"({"strata": {"no_decay": []}})", "t");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(NoDecayPatterns(*none).empty());

  auto bad = ParseTrainConfig(R"({"strata": {"no_decay": ["(unclosed"]}})", "t");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("strata.no_decay: '(unclosed' is not a regular expression"), std::string::npos)
      << bad.status().message();
  auto eight = ParseTrainConfig(R"({"strata": {"adam_states": "8bit"}})", "t");
  ASSERT_TRUE(eight.ok()) << eight.status().ToString();
  EXPECT_TRUE(NoDecayPatterns(*eight).empty());
  auto eight_listed = ParseTrainConfig(R"({"strata": {"adam_states": "8bit", "no_decay": ["bias"]}})", "t");
  ASSERT_FALSE(eight_listed.ok());
  EXPECT_NE(eight_listed.status().message().find("strata.no_decay: not with strata.adam_states \"8bit\""),
            std::string::npos)
      << eight_listed.status().message();
}

// strata.data as `config check` prints it (DataConfigJson) reads back as the same section,
// every key included; a bad choice names the key.
TEST(Config, DataSectionPrintsEveryKeyAndReadsBack) {
  auto c = ParseTrainConfig(R"({"strata": {"data": {"path": "t.u16", "format": "uint16", "loss_mask": "none",
      "eval_path": "v.u16", "epochs": 2, "packing": "packed", "long_examples": "truncate"}}})", "test");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const nlohmann::json printed = DataConfigJson(c->data);
  EXPECT_EQ(printed.size(), 8u) << printed.dump();
  auto back = ParseTrainConfig(nlohmann::json({{"strata", {{"data", printed}}}}).dump(), "printed");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(DataConfigJson(back->data), printed);
  EXPECT_EQ(back->data.packing, data::Packing::kPacked);
  EXPECT_EQ(back->data.long_examples, data::LongExamples::kTruncate);
  EXPECT_EQ(back->data.format, data::TokenFormat::kUint16);
  auto bad = ParseTrainConfig(R"({"strata": {"data": {"packing": "greedy"}}})", "test");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("packing"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace strata
