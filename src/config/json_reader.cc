#include "src/config/json_reader.h"

#include <fmt/format.h>

#include <cmath>

namespace strata {

const nlohmann::json* JsonReader::Get(const std::string& key) {
  used_.insert(key);
  if (!Has(key)) return nullptr;
  const nlohmann::json& v = (*obj_)[key];
  return v.is_null() ? nullptr : &v;
}

StatusOr<JsonReader> JsonReader::Child(const std::string& key) {
  const nlohmann::json* v = Get(key);
  if (v && !v->is_object()) return InvalidArgument("{}: expected an object, got {}", PathOf(key), v->dump());
  JsonReader child(v, PathOf(key));
  child.autos_ = autos_;
  return child;
}

Status JsonReader::Bool(const std::string& key, bool* out) {
  const nlohmann::json* v = Get(key);
  if (!v) return Status();
  if (IsAuto(key)) {
    autos_->push_back({PathOf(key), *out ? "true" : "false", "Strata's default"});
    return Status();
  }
  if (!v->is_boolean()) return InvalidArgument("{}: expected true or false, got {}", PathOf(key), v->dump());
  *out = v->get<bool>();
  return Status();
}

Status JsonReader::Int(const std::string& key, int64_t* out, int64_t lo, int64_t hi) {
  const nlohmann::json* v = Get(key);
  if (!v) return Status();
  if (IsAuto(key)) {
    autos_->push_back({PathOf(key), std::to_string(*out), "Strata's default"});
    return Status();
  }
  // DeepSpeed configs often write sizes as 1e8: accept numbers that are whole.
  if (!v->is_number() || (v->is_number_float() && std::floor(v->get<double>()) != v->get<double>()))
    return InvalidArgument("{}: expected an integer in [{}, {}], got {}", PathOf(key), lo, hi, v->dump());
  const double d = v->get<double>();
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
    return InvalidArgument("{}: {} is out of range [{}, {}]", PathOf(key), v->dump(), lo, hi);
  *out = v->is_number_float() ? static_cast<int64_t>(d) : v->get<int64_t>();
  return Status();
}

Status JsonReader::Int(const std::string& key, int* out, int lo, int hi) {
  int64_t v = *out;
  STRATA_RETURN_IF_ERROR(Int(key, &v, lo, hi));
  *out = static_cast<int>(v);
  return Status();
}

Status JsonReader::Double(const std::string& key, double* out, double lo, double hi) {
  const nlohmann::json* v = Get(key);
  if (!v) return Status();
  if (IsAuto(key)) {
    autos_->push_back({PathOf(key), fmt::format("{}", *out), "Strata's default"});
    return Status();
  }
  if (!v->is_number()) return InvalidArgument("{}: expected a number in [{}, {}], got {}", PathOf(key), lo, hi, v->dump());
  const double d = v->get<double>();
  if (!(d >= lo && d <= hi)) return InvalidArgument("{}: {} is out of range [{}, {}]", PathOf(key), v->dump(), lo, hi);
  *out = d;
  return Status();
}

Status JsonReader::String(const std::string& key, std::string* out) {
  const nlohmann::json* v = Get(key);
  if (!v) return Status();
  if (!v->is_string()) return InvalidArgument("{}: expected a string, got {}", PathOf(key), v->dump());
  *out = v->get<std::string>();
  return Status();
}

Status JsonReader::StringList(const std::string& key, std::vector<std::string>* out) {
  const nlohmann::json* v = Get(key);
  if (!v) return Status();
  if (v->is_string()) {
    *out = {v->get<std::string>()};
    return Status();
  }
  if (!v->is_array()) return InvalidArgument("{}: expected a list of strings, got {}", PathOf(key), v->dump());
  std::vector<std::string> list;
  for (const nlohmann::json& e : *v) {
    if (!e.is_string()) return InvalidArgument("{}: expected a list of strings, got {}", PathOf(key), v->dump());
    list.push_back(e.get<std::string>());
  }
  *out = std::move(list);
  return Status();
}

Status JsonReader::Choice(const std::string& key, std::string* out, const std::vector<std::string>& allowed) {
  std::string s = *out;
  STRATA_RETURN_IF_ERROR(String(key, &s));
  for (const auto& a : allowed)
    if (a == s) {
      *out = s;
      return Status();
    }
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + ("\"" + a + "\"");
  return InvalidArgument("{}: \"{}\" is not one of {}", PathOf(key), s, list);
}

Status JsonReader::Ignored(const std::string& key, bool boolean, const char* why, std::vector<std::string>* notes) {
  if (!Has(key)) return Status();
  bool b = false;
  int64_t i = 0;
  STRATA_RETURN_IF_ERROR(boolean ? Bool(key, &b) : Int(key, &i, 0, int64_t{1} << 50));
  notes->push_back(fmt::format("{}: accepted, not used: {}", PathOf(key), why));
  return Status();
}

void JsonReader::UnusedKeys(std::vector<std::string>* out) const {
  if (!obj_ || !obj_->is_object()) return;
  for (auto it = obj_->begin(); it != obj_->end(); ++it)
    if (!used_.count(it.key())) out->push_back(PathOf(it.key()));
}

}  // namespace strata
