// A test's config settled as a run's is (SettleRunConfig), without a machine: what the test
// wrote stays, and every "auto" that needs a machine takes its safe value.
#pragma once

#include <stdexcept>

#include "src/settle/settle.h"

namespace strata::testing {

// `host_device`: blocks run on the host (false: the fake device or a GPU).
inline StatusOr<RunConfig> TrySettle(const TrainConfig& cfg, int world = 1, bool host_device = true) {
  auto s = SettleRunConfig(cfg, {world, world, /*on_gpu=*/false, {host_device}});
  if (!s.ok()) return s.status();
  return s->config;
}

// The same for a config the test expects to be valid: a refusal fails the test (an exception
// gtest reports, with the reason).
inline RunConfig Settled(const TrainConfig& cfg, int world = 1, bool host_device = true) {
  auto s = TrySettle(cfg, world, host_device);
  if (!s.ok()) throw std::runtime_error("the test's config cannot be settled: " + s.status().ToString());
  return *s;
}

}  // namespace strata::testing
