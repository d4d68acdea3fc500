// The learning rate of an update and the step's Adam hyper-parameters, with DeepSpeed's
// scheduler meanings (deepspeed/runtime/lr_schedules.py):
//  WarmupLR:       warmup_min_lr -> warmup_max_lr over warmup_num_steps, then constant.
//  WarmupDecayLR:  WarmupLR, then linear decay back to warmup_min_lr at total_num_steps.
//  WarmupCosineLR: lr * (warmup_min_ratio -> 1) over the warmup, then cosine down to
//                  lr * cos_min_ratio at total_num_steps.
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

#include "src/config/train_config.h"
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

}  // namespace lr_schedule_internal

// The lr of the update that follows `applied` applied updates.
inline double LearningRate(const TrainConfig& c, int64_t applied) {
  namespace sched = lr_schedule_internal;
  const ScheduleConfig& s = c.schedule;
  const double i = static_cast<double>(applied - 1);  // DeepSpeed's last_batch_iteration
  const bool started = applied > 0 || s.warmup_num_steps == 0;
  switch (s.kind) {
    case LrScheduleKind::kConstant:
      return c.lr;
    case LrScheduleKind::kWarmupLR:
    case LrScheduleKind::kWarmupDecayLR:
      if (!started) return s.warmup_min_lr;
      if (i < 0) return s.warmup_max_lr;
      return s.warmup_min_lr + (s.warmup_max_lr - s.warmup_min_lr) * sched::WarmupGamma(s, i);
    case LrScheduleKind::kWarmupCosineLR:
      if (!started) return 0.0;
      return c.lr * (i < 0 ? 1.0 : sched::CosineRatio(s, i));
  }
  return c.lr;
}

// The Adam hyper-parameters of the update that follows `applied` applied updates, as the
// config and the schedule say; the loss scale's unscale and the clip coefficient are the
// step's own (left at 1).
inline AdamHyperParams StepHyperParams(const TrainConfig& c, int64_t applied) {
  AdamHyperParams hp;
  hp.lr = LearningRate(c, applied);
  hp.beta1 = c.beta1;
  hp.beta2 = c.beta2;
  hp.eps = c.eps;
  hp.weight_decay = c.weight_decay;
  hp.bias_correction = c.bias_correction;
  hp.step = applied + 1;
  return hp;
}

}  // namespace strata
