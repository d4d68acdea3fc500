// Folder-private: a sparse layer's working weights cut at its experts' boundaries (Note
// [Expert-aware fetching]), so that a fetch reads the router, attention and norms (the parts
// of no expert) and then only the experts some token chose. Torch-free arithmetic.
#pragma once

#include <cstdint>
#include <vector>

#include "src/engine/shard_plan.h"

namespace strata {

// Block b's working tensor ([working.begin, + working_tensor_len()) of its flat group) in
// parts: each part's first element, relative to the tensor, and its length; the expert it
// holds (-1: none). Empty unless plan.FetchesRouted(b).
struct WorkingPart {
  int64_t begin = 0, len = 0;
  int expert = -1;
};
std::vector<WorkingPart> PartsOfWorking(const ShardPlan& plan, int b);

}  // namespace strata
