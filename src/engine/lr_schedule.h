// The learning rate of an update and the step's Adam hyper-parameters, with DeepSpeed's
// scheduler meanings (deepspeed/runtime/lr_schedules.py):
//  WarmupLR:       warmup_min_lr -> warmup_max_lr over warmup_num_steps, then constant.
//  WarmupDecayLR:  WarmupLR, then linear decay back to warmup_min_lr at total_num_steps.
//  WarmupCosineLR: lr * (warmup_min_ratio -> 1) over the warmup, then cosine down to
//                  lr * cos_min_ratio at total_num_steps.
//  OneCycle:       cycle_min_lr -> cycle_max_lr -> cycle_min_lr over one cycle (in stairs
//                  where asked), then decayed; with cycle_momentum Adam's betas cycle too.
//  LRRangeTest:    lr_range_test_min_lr, growing linearly (or in stairs) with the iterations.
// The warmup rises as log(i + 1) / log(w) (warmup_type "log", DeepSpeed's default) or as i / w
// ("linear") at scheduler iteration i, with w = max(2, warmup_num_steps).
//
// Indexing: DeepSpeed steps its scheduler after each applied update (not after a skipped
// one), so update k (0-based, skipped steps not counted) uses iteration i = k - 1, and the
// first one the value before the schedule started: warmup_min_lr, or 0 for WarmupCosineLR.
// warmup_num_steps 0 (DeepSpeed refuses it) means no warmup: the first update takes the peak.
// Operations run in DeepSpeed's order, so the lr is its double to the bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <utility>

#include "src/config/train_config.h"
#include "src/engine/optimizer_rule.h"
#include "strata/cpu_adam.h"

namespace strata {
namespace lr_schedule_internal {

inline double WarmupLength(const ScheduleConfig& s) {
  return s.warmup_num_steps == 0 ? 0.0 : std::max(2.0, static_cast<double>(s.warmup_num_steps));
}

// The share of the warmup done at iteration i (0 <= i < w).
inline double WarmupShare(WarmupType type, double i, double w) {
  return type == WarmupType::kLog ? (1.0 / std::log(w)) * std::log(i + 1) : i / w;
}

// WarmupLR and WarmupDecayLR: how far from warmup_min_lr to warmup_max_lr at iteration i >= 0.
inline double WarmupGamma(const ScheduleConfig& s, double i) {
  const double w = WarmupLength(s);
  if (i < w) return WarmupShare(s.warmup_type, i, w);
  if (s.kind == LrScheduleKind::kWarmupLR) return 1.0;
  const double t = static_cast<double>(s.total_num_steps);
  return std::max(0.0, (t - i) / std::max(1.0, t - w));
}

// WarmupCosineLR: the share of the optimizer's lr at iteration i >= 0.
inline double CosineRatio(const ScheduleConfig& s, double i) {
  const double w = WarmupLength(s);
  if (i < w) return s.warmup_min_ratio + WarmupShare(s.warmup_type, i, w) * (1.0 - s.warmup_min_ratio);
  const double progress = std::min(1.0, (i - w + 1) / std::max(1.0, static_cast<double>(s.total_num_steps) - w));
  const double cosine = (1 + std::cos(M_PI * progress)) / 2;
  return std::max(0.0, s.cos_min_ratio + (1.0 - s.cos_min_ratio) * cosine);
}

// OneCycle's position in its cycle at scheduler iteration i >= 0 (DeepSpeed's
// _get_scale_factor, with last_batch_iteration = i): 0 at the ends, 1 at the peak.
inline double CycleScale(const ScheduleConfig& s, double i) {
  const double first = s.cycle_first_step_size, second = s.cycle_second_step_size;
  const double total = first + second, ratio = first / total;
  const double batch = i + 1;
  const double cycle = std::floor(1 + batch / total);
  const double x = 1. + batch / total - cycle;
  double scale;
  int64_t stairs;
  if (x <= ratio) {
    scale = x / ratio;
    stairs = s.cycle_first_stair_count;
  } else {
    scale = (x - 1) / (ratio - 1);
    stairs = s.cycle_second_stair_count;
  }
  if (stairs > 0) {
    const double at = std::fmod(batch, total);  // Python's % on non-negative floats
    const double position = at <= first ? at * static_cast<double>(stairs) / first
                                        : (total - at) * static_cast<double>(stairs) / second;
    scale = std::floor(position) / static_cast<double>(stairs);
  }
  return scale;
}

inline double OneCycleLr(const ScheduleConfig& s, double i) {
  const double total = s.cycle_first_step_size + s.cycle_second_step_size;
  if (i < total) return s.cycle_min_lr + (s.cycle_max_lr - s.cycle_min_lr) * CycleScale(s, i);
  if (s.decay_step_size == 0 || s.decay_lr_rate == 0) return s.cycle_min_lr;  // (math.isclose(x, 0))
  const double interval = (i - total + 1) / s.decay_step_size;
  return s.cycle_min_lr / (1 + s.decay_lr_rate * interval);
}

inline double OneCycleBeta1(const ScheduleConfig& s, double i) {
  const double total = s.cycle_first_step_size + s.cycle_second_step_size;
  if (i < total) return s.cycle_max_mom - (s.cycle_max_mom - s.cycle_min_mom) * CycleScale(s, i);
  if (s.decay_step_size == 0 || s.decay_mom_rate == 0) return s.cycle_max_mom;
  const double interval = (i - total + 1) / s.decay_step_size;
  return s.cycle_max_mom * (1 + s.decay_mom_rate * interval);
}

inline double RangeTestLr(const ScheduleConfig& s, double i) {
  const double interval = (i + 1) / static_cast<double>(s.range_step_size);
  return s.range_min_lr * (1 + s.range_step_rate * (s.range_staircase ? std::floor(interval) : interval));
}

}  // namespace lr_schedule_internal

// The lr of the update that follows `applied` applied updates, of a parameter group whose own
// lr is `group_lr` (DeepSpeed's schedulers set every group: WarmupLR's default peak and
// WarmupCosineLR's ratio are of each group's lr, the other values are the schedule's own).
inline double GroupLearningRate(const ScheduleConfig& s, double group_lr, int64_t applied) {
  namespace sched = lr_schedule_internal;
  const double i = static_cast<double>(applied - 1);  // DeepSpeed's last_batch_iteration
  const bool started = applied > 0 || s.warmup_num_steps == 0;
  switch (s.kind) {
    case LrScheduleKind::kConstant:
      return group_lr;
    case LrScheduleKind::kWarmupLR:
    case LrScheduleKind::kWarmupDecayLR: {
      const double max_lr = s.warmup_max_is_group_lr ? group_lr : s.warmup_max_lr;
      if (!started) return s.warmup_min_lr;
      if (i < 0) return max_lr;
      return s.warmup_min_lr + (max_lr - s.warmup_min_lr) * sched::WarmupGamma(s, i);
    }
    case LrScheduleKind::kWarmupCosineLR:
      if (!started) return 0.0;
      return group_lr * (i < 0 ? 1.0 : sched::CosineRatio(s, i));
    case LrScheduleKind::kOneCycle:  // built: cycle_min_lr
      return applied == 0 ? s.cycle_min_lr : sched::OneCycleLr(s, i);
    case LrScheduleKind::kLRRangeTest:  // built: lr_range_test_min_lr
      return applied == 0 ? s.range_min_lr : sched::RangeTestLr(s, i);
  }
  return group_lr;
}

// The lr of the update that follows `applied` applied updates (Muon's matrices: MuonLearningRate).
inline double LearningRate(const TrainConfig& c, int64_t applied) { return GroupLearningRate(c.schedule, c.lr, applied); }
inline double MuonLearningRate(const TrainConfig& c, int64_t applied) {
  return GroupLearningRate(c.schedule, c.muon.lr, applied);
}

// Adam's betas for the update that follows `applied` applied updates: the config's, or with
// OneCycle's cycle_momentum DeepSpeed's cycled beta1 and 0.99 (its scheduler sets the
// optimizer's betas to (momentum, 0.99), at construction to (cycle_min_mom, 0.99)).
inline std::pair<double, double> StepBetas(const TrainConfig& c, int64_t applied) {
  const ScheduleConfig& s = c.schedule;
  if (s.kind != LrScheduleKind::kOneCycle || !s.cycle_momentum) return {c.beta1, c.beta2};
  return {applied == 0 ? s.cycle_min_mom : lr_schedule_internal::OneCycleBeta1(s, static_cast<double>(applied - 1)),
          0.99};
}

// The Adam hyper-parameters of the update that follows `applied` applied updates, as the
// config and the schedule say; the loss scale's unscale and the clip coefficient are the
// step's own (left at 1).
inline AdamHyperParams StepHyperParams(const TrainConfig& c, int64_t applied) {
  AdamHyperParams hp;
  hp.lr = LearningRate(c, applied);
  const auto [beta1, beta2] = StepBetas(c, applied);
  hp.beta1 = beta1;
  hp.beta2 = beta2;
  hp.eps = c.eps;
  hp.weight_decay = c.weight_decay;
  hp.bias_correction = c.bias_correction;
  hp.step = applied + 1;
  hp.rule = RuleOf(c.optimizer).kernel;
  hp.eps_inside_sqrt = c.eps_inside_sqrt;  // (LAMB's; its trust ratio is per tensor, set by the step)
  return hp;
}

}  // namespace strata
