#include "src/config/decay_groups.h"

namespace strata {

const std::vector<std::string>& HfTrainerNoDecay() {
  static const std::vector<std::string> patterns = {
      "bias", "layernorm", "rmsnorm", R"((?:^|\.)norm(?:$|\.))", R"(_norm(?:$|\.))", R"((?:^|\.)ln_)"};
  return patterns;
}

Status ParseNoDecay(JsonReader& s, TrainConfig* c) {
  if (!s.Has("no_decay") || s.IsAuto("no_decay")) {
    s.Touch("no_decay");
    return Status();
  }
  std::vector<std::string> patterns;
  STRATA_RETURN_IF_ERROR(s.StringList("no_decay", &patterns));
  for (const std::string& p : patterns) {
    try {
      std::regex compiled(p, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return InvalidArgument("strata.no_decay: '{}' is not a regular expression ({})", p, e.what());
    }
  }
  c->no_decay = std::move(patterns);
  return Status();
}

Status CheckNoDecay(const TrainConfig& c) {
  if (c.moments_8bit && c.no_decay && !c.no_decay->empty())
    return InvalidArgument("strata.no_decay: not with strata.adam_states \"8bit\" (its moments are updated in whole "
                           "blocks of 256, which a parameter's range may cut); set it to [] or \"auto\"");
  return Status();
}

std::vector<std::string> NoDecayPatterns(const TrainConfig& c) {
  if (c.no_decay) return *c.no_decay;
  if (c.moments_8bit) return {};
  return HfTrainerNoDecay();
}

NameMatcher::NameMatcher(const std::vector<std::string>& patterns) {
  for (const std::string& p : patterns) patterns_.emplace_back(p, std::regex::ECMAScript);
}

bool NameMatcher::Matches(const std::string& hf_name) const {
  for (const std::regex& p : patterns_)
    if (std::regex_search(hf_name, p)) return true;
  return false;
}

}  // namespace strata
