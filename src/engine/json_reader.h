// JsonReader: typed, range-checked reads of a JSON object that remember which keys were
// used, so that every key nobody read can be reported by its full path. Errors name the
// path ("optimizer.params.lr") and what was expected.
#pragma once

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

#include "strata/status.h"

namespace strata {

class JsonReader {
 public:
  JsonReader(const nlohmann::json* object, std::string path) : obj_(object), path_(std::move(path)) {}

  bool Has(const std::string& key) const { return obj_ && obj_->is_object() && obj_->contains(key); }
  std::string PathOf(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  // A nested object (missing -> an empty reader). Error if present but not an object.
  StatusOr<JsonReader> Child(const std::string& key);

  Status Bool(const std::string& key, bool* out);
  Status Int(const std::string& key, int64_t* out, int64_t lo, int64_t hi);
  Status Int(const std::string& key, int* out, int lo, int hi);
  Status Double(const std::string& key, double* out, double lo, double hi);
  Status String(const std::string& key, std::string* out);
  // One of `allowed` (case-sensitive); the error lists them.
  Status Choice(const std::string& key, std::string* out, const std::vector<std::string>& allowed);
  // Marks a key as known without reading it (e.g. "auto" handled elsewhere).
  void Touch(const std::string& key) { used_.insert(key); }
  const nlohmann::json* Raw(const std::string& key) {
    used_.insert(key);
    return Has(key) ? &(*obj_)[key] : nullptr;
  }

  // Appends the paths of keys never read to `out` (nested readers report their own).
  void UnusedKeys(std::vector<std::string>* out) const;

 private:
  const nlohmann::json* Get(const std::string& key);
  const nlohmann::json* obj_;
  std::string path_;
  std::set<std::string> used_;
};

}  // namespace strata
