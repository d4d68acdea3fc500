#include "src/hf/hf_index.h"

#include "src/base/json_text.h"

namespace strata::ckpt {

StatusOr<std::map<std::string, std::set<std::string>>> ParseSafetensorsIndex(std::string_view text,
                                                                            const std::string& origin) {
  STRATA_ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonText(text, origin));
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    return InvalidArgument("{}: no \"weight_map\" object (tensor name -> file)", origin);
  std::map<std::string, std::set<std::string>> by_file;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it->is_string()) return InvalidArgument("{}: weight_map[\"{}\"] is not a file name", origin, it.key());
    const std::string file = it->get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      return InvalidArgument("{}: weight_map[\"{}\"] = \"{}\" is not a file of the folder", origin, it.key(), file);
    by_file[file].insert(it.key());
  }
  return by_file;
}

}  // namespace strata::ckpt
