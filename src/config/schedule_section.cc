#include "src/config/schedule_section.h"

namespace strata {

const char* StepScheduleName(StepSchedule s) {
  switch (s) {
    case StepSchedule::kAuto: return "auto";
    case StepSchedule::kMicroBatch: return "micro_batch";
    case StepSchedule::kLayerMajor: return "layer_major";
  }
  return "?";
}

const char* BlockInputsName(BlockInputsAt at) {
  switch (at) {
    case BlockInputsAt::kDevice: return "device";
    case BlockInputsAt::kHost: return "host";
    case BlockInputsAt::kNvme: return "nvme";
  }
  return "?";
}

const char* ExpertFetchName(ExpertFetch f) { return f == ExpertFetch::kRouted ? "routed" : "all"; }
const char* ExpertUpdateName(ExpertUpdate u) { return u == ExpertUpdate::kAll ? "all" : "chosen"; }

BlockInputsAt WrittenBlockInputs(const SettledConfig& c, bool host_device) {
  if (!c.block_inputs || c.keep_activations) return BlockInputsAt::kDevice;
  if (*c.block_inputs == BlockInputsAt::kHost && host_device) return BlockInputsAt::kDevice;
  return *c.block_inputs;
}

namespace {
constexpr int64_t kMaxTokens = int64_t{1} << 50;
}  // namespace

// strata.schedule, fuse_micro_batches, block_inputs, expert_fetch, expert_update, loss_chunk and mlp_chunk.
Status ParseSchedule(JsonReader& s, TrainConfig* c) {
  std::string schedule = StepScheduleName(c->schedule_setting);
  STRATA_RETURN_IF_ERROR(s.Choice("schedule", &schedule, {"auto", "micro_batch", "layer_major"}));
  c->schedule_setting = schedule == "auto"          ? StepSchedule::kAuto
                        : schedule == "micro_batch" ? StepSchedule::kMicroBatch
                                                    : StepSchedule::kLayerMajor;
  STRATA_RETURN_IF_ERROR(s.Bool("fuse_micro_batches", &c->fuse_micro_batches));
  std::string inputs = c->block_inputs ? BlockInputsName(*c->block_inputs) : "auto";
  STRATA_RETURN_IF_ERROR(s.Choice("block_inputs", &inputs, {"auto", "device", "host", "nvme"}));
  c->block_inputs = inputs == "auto"     ? std::nullopt
                    : inputs == "device" ? std::optional(BlockInputsAt::kDevice)
                    : inputs == "host"   ? std::optional(BlockInputsAt::kHost)
                                         : std::optional(BlockInputsAt::kNvme);
  std::string fetch = ExpertFetchName(c->expert_fetch);
  STRATA_RETURN_IF_ERROR(s.Choice("expert_fetch", &fetch, {"routed", "all"}));
  c->expert_fetch = fetch == "routed" ? ExpertFetch::kRouted : ExpertFetch::kAll;
  std::string update = ExpertUpdateName(c->expert_update);
  STRATA_RETURN_IF_ERROR(s.Choice("expert_update", &update, {"all", "chosen"}));
  c->expert_update = update == "all" ? ExpertUpdate::kAll : ExpertUpdate::kChosen;
  STRATA_RETURN_IF_ERROR(s.Int("loss_chunk", &c->loss_chunk, 0, kMaxTokens));  // ("auto" keeps -1)
  return s.Int("mlp_chunk", &c->mlp_chunk, 0, kMaxTokens);
}

}  // namespace strata
