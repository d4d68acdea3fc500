// Dynamic loss scaling for fp16 (DeepSpeed's semantics): start at 2^initial_scale_power;
// on an overflowing step skip the update and, once `hysteresis` overflows have been seen,
// halve the scale (not below min_loss_scale); after `window` clean steps double it. A static
// loss_scale > 0 never changes. bf16 and fp32 use a scale of 1. An overflow that would halve
// a scale already at min_loss_scale leaves the run nothing to adjust: at_floor() says so, and
// the engine stops there (DeepSpeed raises at the minimum scale too).
#pragma once

#include <algorithm>
#include <cmath>

#include "src/config/train_config.h"

namespace strata {

class LossScaler {
 public:
  LossScaler(const LossScaleConfig& c, bool enabled)
      : c_(c), enabled_(enabled),
        scale_(!enabled ? 1.0 : c.static_scale > 0 ? c.static_scale : std::ldexp(1.0, c.initial_scale_power)),
        hysteresis_left_(c.hysteresis) {}

  double scale() const { return scale_; }
  bool dynamic() const { return enabled_ && c_.static_scale <= 0; }

  // Overflowing (skipped) steps in a row, whether or not the scale can react to them.
  int64_t overflow_streak() const { return streak_; }
  // The last Update would have halved a scale already at its minimum.
  bool at_floor() const { return at_floor_; }

  // Call once per optimizer step with whether the gradients overflowed.
  void Update(bool overflow) {
    streak_ = overflow ? streak_ + 1 : 0;
    at_floor_ = false;
    if (!dynamic()) return;
    if (overflow) {
      clean_steps_ = 0;
      if (--hysteresis_left_ <= 0) {
        at_floor_ = scale_ <= c_.min_scale;
        scale_ = std::max(c_.min_scale, scale_ / 2);
        hysteresis_left_ = c_.hysteresis;
      }
      return;
    }
    if (++clean_steps_ >= c_.window) {
      scale_ *= 2;
      clean_steps_ = 0;
      hysteresis_left_ = c_.hysteresis;
    }
  }

  // For checkpoints.
  struct State {
    double scale;
    int64_t clean_steps;
    int hysteresis_left;
  };
  State state() const { return {scale_, clean_steps_, hysteresis_left_}; }
  void set_state(const State& s) {
    scale_ = s.scale;
    clean_steps_ = s.clean_steps;
    hysteresis_left_ = s.hysteresis_left;
  }

 private:
  LossScaleConfig c_;
  bool enabled_;
  double scale_;
  int64_t clean_steps_ = 0;
  int hysteresis_left_;
  int64_t streak_ = 0;
  bool at_floor_ = false;
};

}  // namespace strata
