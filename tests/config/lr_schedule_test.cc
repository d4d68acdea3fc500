// The learning-rate schedules (src/engine/lr_schedule.h) against DeepSpeed's: its formulas
// written out here, values its schedulers gave, and, where STRATA_PYTHON has deepspeed,
// its schedulers themselves; the scheduler keys as parsed (warmup_type, DeepSpeed's
// defaults); optimizer.params.bias_correction on its way to the Adam hyper-parameters.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "src/config/train_config.h"
#include "src/engine/lr_schedule.h"
#include "support/peers.h"

namespace strata {
namespace {

// DeepSpeed's schedulers (deepspeed/runtime/lr_schedules.py), as functions of its scheduler
// iteration `it` (last_batch_iteration: -1 when built, +1 each time it is stepped). Its
// engine builds the scheduler before the first update and steps it after each applied one,
// so the update that follows k applied updates runs with the lr at it = k - 1.
//   w = max(2, warmup_num_steps)
//   warmup share at it (0 <= it < w):   log: ln(it + 1) / ln(w)        linear: it / w
//   WarmupLR:       it = -1: min_lr;  it < w: min_lr + (max_lr - min_lr) * share;  later: max_lr
//   WarmupDecayLR:  as WarmupLR up to w; later the share is replaced by the remaining
//                   fraction max(0, (T - it) / max(1, T - w)), so the lr ends at min_lr at it = T
//   WarmupCosineLR: it = -1: 0;  it < w: lr * (r0 + (1 - r0) * share);  later lr times
//                   max(0, rc + (1 - rc) * (1 + cos(pi * q)) / 2) with q = min(1, (it - w + 1) / max(1, T - w)),
//                   r0 = warmup_min_ratio, rc = cos_min_ratio, lr the optimizer's
struct Setting {
  double lr = 0.3, min_lr = 0.01, max_lr = 0.5;
  int64_t warmup = 10, total = 50;
  double min_ratio = 0.2, cos_min = 0.1;
};

double DeepSpeedLr(LrScheduleKind kind, WarmupType type, const Setting& s, int64_t applied) {
  const int64_t it = applied - 1;
  const double w = static_cast<double>(std::max<int64_t>(2, s.warmup));
  const double t = static_cast<double>(s.total);
  const auto share = [&] { return type == WarmupType::kLog ? std::log(it + 1.0) / std::log(w) : it / w; };
  if (kind == LrScheduleKind::kWarmupCosineLR) {
    if (it < 0) return 0.0;
    if (it < w) return s.lr * (s.min_ratio + (1 - s.min_ratio) * share());
    const double q = std::min(1.0, (it - w + 1) / std::max(1.0, t - w));
    return s.lr * std::max(0.0, s.cos_min + (1 - s.cos_min) * (1 + std::cos(M_PI * q)) / 2);
  }
  if (it < 0) return s.min_lr;
  double fraction = 1.0;
  if (it < w) fraction = share();
  else if (kind == LrScheduleKind::kWarmupDecayLR) fraction = std::max(0.0, (t - it) / std::max(1.0, t - w));
  return s.min_lr + (s.max_lr - s.min_lr) * fraction;
}

TrainConfig Config(LrScheduleKind kind, WarmupType type, const Setting& s) {
  TrainConfig c;
  c.lr = s.lr;
  c.schedule.kind = kind;
  c.schedule.warmup_type = type;
  c.schedule.warmup_min_lr = s.min_lr;
  c.schedule.warmup_max_lr = s.max_lr;
  c.schedule.warmup_num_steps = s.warmup;
  c.schedule.total_num_steps = s.total;
  c.schedule.warmup_min_ratio = s.min_ratio;
  c.schedule.cos_min_ratio = s.cos_min;
  return c;
}

const char* KindName(LrScheduleKind k) {
  return k == LrScheduleKind::kWarmupLR ? "WarmupLR" : k == LrScheduleKind::kWarmupDecayLR ? "WarmupDecayLR" : "WarmupCosineLR";
}
const char* TypeName(WarmupType t) { return t == WarmupType::kLog ? "log" : "linear"; }

constexpr LrScheduleKind kKinds[] = {LrScheduleKind::kWarmupLR, LrScheduleKind::kWarmupDecayLR,
                                     LrScheduleKind::kWarmupCosineLR};
constexpr WarmupType kTypes[] = {WarmupType::kLog, WarmupType::kLinear};
// Applied updates: the first two, mid-warmup, the warmup's last update and the one after,
// mid-decay, the cosine's end (it = T - 1), the linear decay's end (it = T), past both.
const std::vector<int64_t> kSteps = {0, 1, 2, 5, 10, 11, 30, 50, 51, 80};

TEST(LrSchedule, EverySchedulePhaseIsDeepSpeeds) {
  for (const Setting& s : {Setting{}, Setting{.warmup = 1}, Setting{.min_lr = 0, .warmup = 7, .total = 20, .min_ratio = 0}})
    for (LrScheduleKind kind : kKinds)
      for (WarmupType type : kTypes) {
        const TrainConfig c = Config(kind, type, s);
        for (int64_t k : kSteps) {
          const double want = DeepSpeedLr(kind, type, s, k);
          EXPECT_NEAR(LearningRate(c, k), want, 1e-15 * std::abs(want))
              << KindName(kind) << " " << TypeName(type) << " warmup " << s.warmup << " after " << k << " updates";
        }
      }
}

// What DeepSpeed 0.19.8's schedulers gave for Setting{} (deepspeed_lr.py 0.3 0.01 0.5 10 50
// 0.2 0.1 ...): the first two updates at the bottom, the log warmup's last at the top.
TEST(LrSchedule, ValuesDeepSpeedGave) {
  const Setting s;
  const auto lr = [&](LrScheduleKind kind, WarmupType type, int64_t k) { return LearningRate(Config(kind, type, s), k); };
  using K = LrScheduleKind;
  const WarmupType log = WarmupType::kLog, linear = WarmupType::kLinear;
  EXPECT_EQ(lr(K::kWarmupLR, log, 0), 0.01);
  EXPECT_EQ(lr(K::kWarmupLR, log, 1), 0.01);
  EXPECT_EQ(lr(K::kWarmupLR, log, 2), 0.15750469787535076);
  EXPECT_EQ(lr(K::kWarmupLR, log, 5), 0.35249530212464913);
  EXPECT_EQ(lr(K::kWarmupLR, log, 10), 0.49999999999999994);
  EXPECT_EQ(lr(K::kWarmupLR, log, 11), 0.5);
  EXPECT_EQ(lr(K::kWarmupLR, linear, 2), 0.059000000000000004);
  EXPECT_EQ(lr(K::kWarmupLR, linear, 10), 0.451);
  EXPECT_EQ(lr(K::kWarmupDecayLR, log, 30), 0.26725);
  EXPECT_EQ(lr(K::kWarmupDecayLR, linear, 50), 0.02225);
  EXPECT_EQ(lr(K::kWarmupDecayLR, linear, 51), 0.01);  // back at warmup_min_lr, not 0
  EXPECT_EQ(lr(K::kWarmupDecayLR, log, 80), 0.01);
  EXPECT_EQ(lr(K::kWarmupCosineLR, log, 0), 0.0);  // not warmup_min_ratio: the scheduler had not started
  EXPECT_EQ(lr(K::kWarmupCosineLR, log, 1), 0.06);
  EXPECT_EQ(lr(K::kWarmupCosineLR, log, 2), 0.13224719895935547);
  EXPECT_EQ(lr(K::kWarmupCosineLR, linear, 10), 0.276);
  EXPECT_EQ(lr(K::kWarmupCosineLR, log, 11), 0.29958384005397226);
  EXPECT_EQ(lr(K::kWarmupCosineLR, linear, 30), 0.165);
  EXPECT_EQ(lr(K::kWarmupCosineLR, log, 50), 0.03);
  EXPECT_EQ(lr(K::kWarmupCosineLR, linear, 80), 0.03);
}

// DeepSpeed's schedulers themselves, bit for bit (run by STRATA_PYTHON).
// `cmd`'s exit status (as pclose gives it) and its output, stderr included.
std::pair<int, std::string> RunCommand(const std::string& cmd) {
  std::string out;
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed: " + cmd};
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  return {pclose(pipe), out};
}

TEST(LrSchedule, DeepSpeedsOwnSchedulersAgreeBitForBit) {
  const Setting s;
  std::string cmd = fmt::format("{} {}/tests/config/deepspeed_lr.py {} {} {} {} {} {} {}", STRATA_PYTHON,
                                STRATA_SOURCE_DIR, s.lr, s.min_lr, s.max_lr, s.warmup, s.total, s.min_ratio, s.cos_min);
  for (int64_t k : kSteps) cmd += fmt::format(" {}", k);
  const auto [status, out] = RunCommand(cmd);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) return testing::PeersMissing(out);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n" << out;
  std::map<std::tuple<std::string, std::string, int64_t>, double> got;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string tag, kind, type, value;
    int64_t k = 0;
    if (words >> tag >> kind >> type >> k >> value && tag == "lr") got[{kind, type, k}] = std::strtod(value.c_str(), nullptr);
  }
  ASSERT_EQ(got.size(), 6 * kSteps.size()) << out;
  for (LrScheduleKind kind : kKinds)
    for (WarmupType type : kTypes)
      for (int64_t k : kSteps)
        EXPECT_EQ(LearningRate(Config(kind, type, s), k), (got[{KindName(kind), TypeName(type), k}]))
            << KindName(kind) << " " << TypeName(type) << " after " << k << " updates";
}

// DeepSpeed's schedulers set every parameter group: Muon's two halves each follow their own lr
// where the schedule is relative to it (WarmupLR without warmup_max_lr, WarmupCosineLR, none)
// and share the schedule's own values otherwise.
TEST(LrSchedule, MuonsHalvesFollowTheirOwnLr) {
  const Setting s;
  for (LrScheduleKind kind : kKinds)
    for (bool own_peak : {false, true}) {
      TrainConfig c = Config(kind, WarmupType::kLinear, s);
      c.optimizer = OptimizerKind::kMuon;
      c.muon.lr = 0.05;
      c.schedule.warmup_max_is_group_lr = own_peak && kind == LrScheduleKind::kWarmupLR;
      if (c.schedule.warmup_max_is_group_lr) c.schedule.warmup_max_lr = c.lr;
      Setting adam = s, muon = s;
      if (c.schedule.warmup_max_is_group_lr) adam.max_lr = s.lr, muon.max_lr = 0.05;
      muon.lr = 0.05;
      for (int64_t k : kSteps) {
        EXPECT_EQ(LearningRate(c, k), DeepSpeedLr(kind, WarmupType::kLinear, adam, k)) << KindName(kind) << " " << k;
        EXPECT_NEAR(MuonLearningRate(c, k), DeepSpeedLr(kind, WarmupType::kLinear, muon, k), 1e-15)
            << KindName(kind) << " " << k;
      }
    }
  TrainConfig constant;
  constant.lr = 3e-4;
  constant.muon.lr = 0.02;
  EXPECT_EQ(LearningRate(constant, 4), 3e-4);
  EXPECT_EQ(MuonLearningRate(constant, 4), 0.02);
}

// warmup_num_steps 0, which DeepSpeed refuses, is no warmup: the first update takes the peak.
TEST(LrSchedule, NoWarmupStartsAtThePeak) {
  Setting s{.warmup = 0};
  EXPECT_EQ(LearningRate(Config(LrScheduleKind::kWarmupLR, WarmupType::kLog, s), 0), s.max_lr);
  EXPECT_EQ(LearningRate(Config(LrScheduleKind::kWarmupDecayLR, WarmupType::kLog, s), 0), s.max_lr);
  EXPECT_EQ(LearningRate(Config(LrScheduleKind::kWarmupDecayLR, WarmupType::kLog, s), 51), s.min_lr);
  EXPECT_EQ(LearningRate(Config(LrScheduleKind::kWarmupCosineLR, WarmupType::kLog, s), 0), s.lr);
  EXPECT_NEAR(LearningRate(Config(LrScheduleKind::kWarmupCosineLR, WarmupType::kLog, s), 25), 0.3 * 0.55, 1e-15);
  TrainConfig constant;
  constant.lr = 0.25;
  EXPECT_EQ(LearningRate(constant, 0), 0.25);
  EXPECT_EQ(LearningRate(constant, 1000), 0.25);
}

StatusOr<TrainConfig> Parse(const std::string& text) { return ParseTrainConfig(text, "lr.json"); }

TEST(LrSchedule, WarmupTypeIsParsedLogByDefaultAndAnUnknownOneNamesTheKey) {
  auto plain = Parse(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}})");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->schedule.warmup_type, WarmupType::kLog);
  EXPECT_TRUE(plain->warnings.empty());
  auto linear = Parse(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"warmup_type": "linear"}}})");
  ASSERT_TRUE(linear.ok()) << linear.status().ToString();
  EXPECT_EQ(linear->schedule.warmup_type, WarmupType::kLinear);
  auto bad = Parse(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_type": "cubic"}}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("lr.json: scheduler.params.warmup_type: \"cubic\" is not one of \"log\", "
                                        "\"linear\""), std::string::npos) << bad.status().message();
}

// Keys left out mean what DeepSpeed's defaults say; total_num_steps defaults to the run's steps.
TEST(LrSchedule, AbsentKeysTakeDeepSpeedsDefaults) {
  auto warmup = Parse(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.02}}, "scheduler": {"type": "WarmupLR"}})");
  ASSERT_TRUE(warmup.ok()) << warmup.status().ToString();
  EXPECT_EQ(warmup->schedule.warmup_num_steps, 1000);
  EXPECT_EQ(warmup->schedule.warmup_min_lr, 0.0);
  EXPECT_EQ(warmup->schedule.warmup_max_lr, 0.02);  // WarmupLR: the optimizer's lr
  auto decay = Parse(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.02}}, "scheduler": {"type": "WarmupDecayLR"},
                         "strata": {"steps": 77}})");
  ASSERT_TRUE(decay.ok()) << decay.status().ToString();
  EXPECT_EQ(decay->schedule.warmup_max_lr, 0.001);  // WarmupDecayLR: its own default
  EXPECT_EQ(decay->schedule.total_num_steps, 77);
  auto cosine = Parse(R"({"scheduler": {"type": "WarmupCosineLR"}})");
  ASSERT_TRUE(cosine.ok()) << cosine.status().ToString();
  EXPECT_EQ(cosine->schedule.cos_min_ratio, 1e-4);
  EXPECT_EQ(cosine->schedule.warmup_min_ratio, 0.0);
  // "auto" (the Hugging Face Trainer's): the optimizer's lr, and its warmup_steps, 0 unless set.
  auto hf = Parse(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.02}}, "scheduler": {"type": "WarmupDecayLR",
                      "params": {"warmup_max_lr": "auto", "warmup_num_steps": "auto"}}})");
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  EXPECT_EQ(hf->schedule.warmup_max_lr, 0.02);
  EXPECT_EQ(hf->schedule.warmup_num_steps, 0);
}

// optimizer.params.bias_correction (DeepSpeed's default true) reaches the update's Adam
// hyper-parameters; the kernel's arithmetic without it: tests/kernels/adam_test.cc.
TEST(LrSchedule, BiasCorrectionReachesTheAdamHyperParameters) {
  auto plain = Parse(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.02, "betas": [0.8, 0.9], "eps": 1e-6,
                         "weight_decay": 0.05}}})");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_TRUE(plain->bias_correction);
  EXPECT_TRUE(StepHyperParams(*plain, 0).bias_correction);
  auto off = Parse(R"({"optimizer": {"type": "Adam", "params": {"lr": 0.02, "bias_correction": false}}})");
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_TRUE(off->warnings.empty()) << off->warnings[0];
  const AdamHyperParams hp = StepHyperParams(*off, 4);
  EXPECT_FALSE(hp.bias_correction);
  EXPECT_EQ(hp.step, 5);  // Adam's t counts this update
  EXPECT_EQ(hp.lr, 0.02);
  const AdamHyperParams full = StepHyperParams(*plain, 0);
  EXPECT_EQ(std::make_tuple(full.lr, full.beta1, full.beta2, full.eps, full.weight_decay, full.step),
            std::make_tuple(0.02, 0.8, 0.9, 1e-6, 0.05, int64_t{1}));
  auto wrong = Parse(R"({"optimizer": {"type": "AdamW", "params": {"bias_correction": "no"}}})");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("optimizer.params.bias_correction: expected true or false"), std::string::npos)
      << wrong.status().message();
}

// As DeepSpeed: "AdamW" is decoupled whatever adam_w_mode says; "Adam" follows adam_w_mode.
TEST(LrSchedule, AdamWIgnoresAdamWModeFalseAsDeepSpeedDoes) {
  auto adamw = Parse(R"({"optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}}})");
  ASSERT_TRUE(adamw.ok()) << adamw.status().ToString();
  EXPECT_TRUE(adamw->adam_w_mode);
  auto adam = Parse(R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})");
  ASSERT_TRUE(adam.ok()) << adam.status().ToString();
  EXPECT_FALSE(adam->adam_w_mode);
}

// OneCycle and LRRangeTest, DeepSpeed's own objects driven as its engine drives them (built
// before the first update, stepped after each): the lr and, with cycle_momentum, Adam's betas
// of every update, bit for bit. Cases: a symmetric cycle, an asymmetric one in stairs with
// decay of lr and momentum after it, momentum left alone, the range test continuous and in
// stairs.
TEST(LrSchedule, DeepSpeedsOneCycleAndRangeTestAgreeBitForBit) {
  const std::vector<std::string> sections = {
      R"({"type": "OneCycle", "params": {"cycle_min_lr": 0.001, "cycle_max_lr": 0.01, "cycle_first_step_size": 7}})",
      R"({"type": "OneCycle", "params": {"cycle_min_lr": 0.0003, "cycle_max_lr": 0.003, "cycle_first_step_size": 5,
          "cycle_second_step_size": 9, "cycle_first_stair_count": 2, "cycle_second_stair_count": 3,
          "decay_step_size": 4, "decay_lr_rate": 0.5, "decay_mom_rate": 0.01, "cycle_min_mom": 0.85,
          "cycle_max_mom": 0.95}})",
      R"({"type": "OneCycle", "params": {"cycle_min_lr": 0.002, "cycle_max_lr": 0.02, "cycle_first_step_size": 3.5,
          "cycle_momentum": false, "decay_step_size": 2, "decay_lr_rate": 0.1}})",
      R"({"type": "LRRangeTest", "params": {"lr_range_test_min_lr": 0.0001, "lr_range_test_step_size": 3,
          "lr_range_test_step_rate": 2.5}})",
      R"({"type": "LRRangeTest", "params": {"lr_range_test_step_size": 4, "lr_range_test_staircase": true}})",
  };
  constexpr int kUpdates = 40;
  for (const std::string& section : sections) {
    SCOPED_TRACE(section);
    auto cfg = ParseTrainConfig(R"({"optimizer": {"type": "Adam", "params": {"lr": 0.05, "betas": [0.9, 0.999]}},
                                    "scheduler": )" + section + "}", "cycle.json");
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    std::string compact = section;
    std::erase(compact, '\n');
    const std::string cmd = fmt::format("{} {}/tests/config/deepspeed_cycle.py '{}' {}", STRATA_PYTHON,
                                        STRATA_SOURCE_DIR, compact, kUpdates);
    const auto [status, out] = RunCommand(cmd);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77) return testing::PeersMissing(out);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n" << out;
    std::istringstream lines(out);
    int seen = 0;
    for (std::string line; std::getline(lines, line);) {
      std::istringstream words(line);
      int64_t k = -1;
      std::string lr, beta1, beta2;
      if (!(words >> k >> lr >> beta1 >> beta2) || k < 0) continue;
      ++seen;
      const AdamHyperParams hp = StepHyperParams(*cfg, k);
      EXPECT_EQ(hp.lr, std::strtod(lr.c_str(), nullptr)) << "update " << k;
      EXPECT_EQ(hp.beta1, std::strtod(beta1.c_str(), nullptr)) << "update " << k;
      EXPECT_EQ(hp.beta2, std::strtod(beta2.c_str(), nullptr)) << "update " << k;
    }
    EXPECT_EQ(seen, kUpdates) << out;
  }
}

}  // namespace
}  // namespace strata
