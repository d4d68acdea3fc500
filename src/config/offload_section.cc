#include "src/config/offload_section.h"

#include <fmt/format.h>

namespace strata {
namespace {

// One section. Its buffer_count sizes the working weights' pinned pool (offload_param); the
// optimizer's NVMe states move through a pool of their own (ShardPlan::PlanOptimizerPool).
Status ParseOffload(JsonReader& zero, const std::string& key, OffloadConfig* o, TrainConfig* c) {
  STRATA_ASSIGN_OR_RETURN(JsonReader r, zero.Child(key));
  std::string device = OffloadDeviceName(o->device);
  STRATA_RETURN_IF_ERROR(r.Choice("device", &device, {"none", "cpu", "nvme"}));
  o->device = device == "none" ? Tier::kDevice : device == "cpu" ? Tier::kCpu : Tier::kNvme;
  STRATA_RETURN_IF_ERROR(r.String("nvme_path", &o->nvme_path));
  STRATA_RETURN_IF_ERROR(r.Bool("pin_memory", &o->pin_memory));
  STRATA_RETURN_IF_ERROR(r.Ignored("buffer_size", false, "pinned buffers are sized by the largest block", &c->notes));
  if (key == "offload_param") {
    STRATA_RETURN_IF_ERROR(r.Int("buffer_count", &o->buffer_count, 1, 1024));
    STRATA_RETURN_IF_ERROR(r.Ignored("max_in_cpu", false,
                                     "with offload_optimizer on nvme, strata.host_blocks keeps the first blocks' "
                                     "weights and states in host memory",
                                     &c->notes));
  } else {
    STRATA_RETURN_IF_ERROR(r.Ignored("buffer_count", false,
                                     "the states on NVMe move through 12 pinned buffers (master, m and v of four "
                                     "sub-groups); more did not speed a disk-bound step here",
                                     &c->notes));
    double ratio = 1;  // ZeRO-Offload++: the fraction of the update run on the CPU
    STRATA_RETURN_IF_ERROR(r.Double("ratio", &ratio, 0, 1));
    if (ratio != 1)
      c->notes.push_back(fmt::format("{}: accepted, not used: {} would run part of the update on the GPU; every "
                                     "parameter's update runs on the CPU here (ratio 1)",
                                     r.PathOf("ratio"), ratio));
    r.Touch("pipeline_read");  // the next sub-group's states are always read during the update
    r.Touch("pipeline_write");
  }
  r.Touch("fast_init");
  r.UnusedKeys(&c->warnings);
  if (o->device == Tier::kNvme && o->nvme_path.empty())
    return InvalidArgument("zero_optimization.{}.nvme_path: required when device is \"nvme\"", key);
  return Status();
}

// DeepSpeed's deprecated flat keys, with the meaning DeepSpeed still gives them:
// cpu_offload -> offload_optimizer.device "cpu", cpu_offload_params (or _param, as its
// pydantic model names it) -> offload_param.device "cpu", cpu_offload_use_pin_memory ->
// pin_memory of both. Each, and its use together with the section that replaced it, is named.
Status ParseLegacyOffload(JsonReader& zero, TrainConfig* c) {
  struct Legacy {
    const char* key;
    const char* section;
    OffloadConfig* target;
  };
  for (const Legacy& l : {Legacy{"cpu_offload", "offload_optimizer", &c->offload_optimizer},
                          Legacy{"cpu_offload_params", "offload_param", &c->offload_param},
                          Legacy{"cpu_offload_param", "offload_param", &c->offload_param}}) {
    if (!zero.Has(l.key)) continue;
    bool on = false;
    STRATA_RETURN_IF_ERROR(zero.Bool(l.key, &on));
    if (!on) continue;
    if (zero.Has(l.section))
      return InvalidArgument("{} and {} are both set: {} is DeepSpeed's deprecated form of {}; keep only {}",
                             zero.PathOf(l.key), zero.PathOf(l.section), zero.PathOf(l.key), zero.PathOf(l.section),
                             zero.PathOf(l.section));
    l.target->device = Tier::kCpu;
    c->notes.push_back(fmt::format("{}: true read as {}.device = \"cpu\" (deprecated in DeepSpeed; write {} instead)",
                                   zero.PathOf(l.key), zero.PathOf(l.section), zero.PathOf(l.section)));
  }
  if (zero.Has("cpu_offload_use_pin_memory")) {
    bool pin = true;
    STRATA_RETURN_IF_ERROR(zero.Bool("cpu_offload_use_pin_memory", &pin));
    c->offload_optimizer.pin_memory = c->offload_param.pin_memory = pin;
    c->notes.push_back(fmt::format("{}: {} read as pin_memory = {} for both offload sections (deprecated in DeepSpeed)",
                                   zero.PathOf("cpu_offload_use_pin_memory"), pin, pin));
  }
  return Status();
}

}  // namespace

Status ParseOffloadSections(JsonReader& zero, TrainConfig* c) {
  STRATA_RETURN_IF_ERROR(ParseOffload(zero, "offload_param", &c->offload_param, c));
  STRATA_RETURN_IF_ERROR(ParseOffload(zero, "offload_optimizer", &c->offload_optimizer, c));
  return ParseLegacyOffload(zero, c);
}

std::string OptimizerStatesWhere(Tier d, bool host_device) {
  if (d != Tier::kDevice || host_device) return OffloadDeviceName(d);
  return "none (kept in host memory: the CPU Adam updates them there)";
}

}  // namespace strata
