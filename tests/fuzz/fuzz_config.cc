// libFuzzer target: the config reader. Input: a ds_config text, then (after each NUL byte)
// one --set override. Every input must end as a TrainConfig or a Status, never a crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "src/config/train_config.h"
#include "src/settle/settle_keys.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = strata::fuzz::SplitAtNul(data, size);
  const std::vector<std::string> sets(parts.begin() + 1, parts.end());
  auto text = strata::ApplyOverrides(parts[0], sets);
  if (!text.ok()) return 0;
  auto cfg = strata::ParseTrainConfig(*text, "fuzz.json");
  if (!cfg.ok()) return 0;
  strata::SettledConfig settled(*cfg);
  strata::ResolvePrecision(&settled, false);
  (void)strata::ResolveBatch(&settled, 1 + static_cast<int>(size % 4));
  strata::ResolveRecompute(&settled, size % 2 == 0);
  return 0;
}
