// tensorboard, csv_monitor and wandb (monitor_section.h).
#include "src/config/monitor_section.h"

namespace strata {
namespace {

Status ParseMonitor(JsonReader& root, const char* key, MonitorConfig* m, std::vector<std::string>* warnings) {
  if (!root.Has(key)) return Status();
  STRATA_ASSIGN_OR_RETURN(JsonReader s, root.Child(key));
  STRATA_RETURN_IF_ERROR(s.Bool("enabled", &m->enabled));
  STRATA_RETURN_IF_ERROR(s.String("output_path", &m->output_path));
  STRATA_RETURN_IF_ERROR(s.String("job_name", &m->job_name));
  if (m->job_name.empty() || m->job_name.find('/') != std::string::npos)
    return InvalidArgument("{}: \"{}\" must be a folder name (not empty, no '/')", s.PathOf("job_name"), m->job_name);
  s.UnusedKeys(warnings);
  return Status();
}

// A string or null (DeepSpeed's Optional[str]: "" here).
Status OptionalString(JsonReader& s, const char* key, std::string* out) {
  if (const nlohmann::json* v = s.Has(key) ? s.Raw(key) : nullptr; v && v->is_null()) {
    out->clear();
    return Status();
  }
  return s.String(key, out);
}

Status ParseWandb(JsonReader& root, WandbConfig* w, std::vector<std::string>* warnings) {
  if (!root.Has("wandb")) return Status();
  STRATA_ASSIGN_OR_RETURN(JsonReader s, root.Child("wandb"));
  STRATA_RETURN_IF_ERROR(s.Bool("enabled", &w->enabled));
  STRATA_RETURN_IF_ERROR(OptionalString(s, "group", &w->group));
  STRATA_RETURN_IF_ERROR(OptionalString(s, "team", &w->team));
  STRATA_RETURN_IF_ERROR(s.String("project", &w->project));
  s.UnusedKeys(warnings);
  return Status();
}

}  // namespace

Status ParseMonitors(JsonReader& root, TrainConfig* c) {
  STRATA_RETURN_IF_ERROR(ParseMonitor(root, "tensorboard", &c->tensorboard, &c->warnings));
  STRATA_RETURN_IF_ERROR(ParseMonitor(root, "csv_monitor", &c->csv_monitor, &c->warnings));
  return ParseWandb(root, &c->wandb, &c->warnings);
}

}  // namespace strata
