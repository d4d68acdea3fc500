// RunConfig: the config of one run with every "auto" settled (the batch for its world, the
// compute dtype for where blocks run, device accumulation, recompute and host blocks for the
// machine) and what only the plan can check checked. The engine accepts nothing else; the one
// maker is SettleRunConfig (src/settle/settle.h), so no run starts from a config nobody settled.
#pragma once

#include <utility>

#include "src/config/train_config.h"

namespace strata {

class RunConfig {
 public:
  const SettledConfig& get() const { return c_; }
  const SettledConfig& operator*() const { return c_; }
  const SettledConfig* operator->() const { return &c_; }

 private:
  friend class RunConfigSettler;  // src/settle/settle.cc
  explicit RunConfig(SettledConfig c) : c_(std::move(c)) {}
  SettledConfig c_;
};

}  // namespace strata
