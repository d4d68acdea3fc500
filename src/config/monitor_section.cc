// tensorboard and csv_monitor (monitor_section.h).
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

}  // namespace

Status ParseMonitors(JsonReader& root, TrainConfig* c) {
  STRATA_RETURN_IF_ERROR(ParseMonitor(root, "tensorboard", &c->tensorboard, &c->warnings));
  return ParseMonitor(root, "csv_monitor", &c->csv_monitor, &c->warnings);
}

}  // namespace strata
