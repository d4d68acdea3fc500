// Learning rate at a step (0-based), with DeepSpeed's scheduler meanings:
//  WarmupLR:       warmup_min_lr -> warmup_max_lr over warmup_num_steps (log by default in
//                  DeepSpeed; linear here), then constant.
//  WarmupDecayLR:  WarmupLR, then linear decay to 0 at total_num_steps.
//  WarmupCosineLR: peak lr * (warmup_min_ratio -> 1) linearly over warmup, then cosine
//                  to cos_min_ratio * peak at total_num_steps.
#pragma once

#include <algorithm>
#include <cmath>

#include "src/config/train_config.h"

namespace strata {

inline double LearningRate(const TrainConfig& c, int64_t step) {
  const ScheduleConfig& s = c.schedule;
  const double w = static_cast<double>(s.warmup_num_steps);
  const double t = static_cast<double>(step);
  switch (s.kind) {
    case LrScheduleKind::kConstant:
      return c.lr;
    case LrScheduleKind::kWarmupLR:
    case LrScheduleKind::kWarmupDecayLR: {
      if (t < w) return s.warmup_min_lr + (s.warmup_max_lr - s.warmup_min_lr) * (t + 1) / w;
      if (s.kind == LrScheduleKind::kWarmupLR) return s.warmup_max_lr;
      const double left = std::max(1.0, static_cast<double>(s.total_num_steps) - w);
      return s.warmup_max_lr * std::max(0.0, 1.0 - (t - w) / left);
    }
    case LrScheduleKind::kWarmupCosineLR: {
      if (t < w) return c.lr * (s.warmup_min_ratio + (1.0 - s.warmup_min_ratio) * (t + 1) / w);
      const double left = std::max(1.0, static_cast<double>(s.total_num_steps) - w);
      const double progress = std::min(1.0, (t - w) / left);
      const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
      return c.lr * (s.cos_min_ratio + (1.0 - s.cos_min_ratio) * cosine);
    }
  }
  return c.lr;
}

}  // namespace strata
