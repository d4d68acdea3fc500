// JsonReader: typed, range-checked reads of a JSON object that remember which keys were
// used, so that every key nobody read can be reported by its full path. Errors name the
// path ("optimizer.params.lr") and what was expected.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/json_text.h"
#include "strata/status.h"

namespace strata {

// A key whose value was "auto" (as Hugging Face's DeepSpeed configs write it): the reader
// keeps the caller's default and records the path and the value it kept.
struct AutoValue {
  std::string path;
  std::string value;
  std::string reason;
};

class JsonReader {
 public:
  JsonReader(const nlohmann::json* object, std::string path)
      : obj_(object), path_(std::move(path)), autos_(std::make_shared<std::vector<AutoValue>>()) {}

  bool Has(const std::string& key) const { return obj_ && obj_->is_object() && obj_->contains(key); }
  std::string PathOf(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  // A nested object (missing -> an empty reader). Error if present but not an object.
  StatusOr<JsonReader> Child(const std::string& key);

  Status Bool(const std::string& key, bool* out);
  Status Int(const std::string& key, int64_t* out, int64_t lo, int64_t hi);
  Status Int(const std::string& key, int* out, int lo, int hi);
  Status Double(const std::string& key, double* out, double lo, double hi);
  Status String(const std::string& key, std::string* out);
  // A list of strings; a single string is a list of one (as PEFT's target_modules allows).
  Status StringList(const std::string& key, std::vector<std::string>* out);
  // One of `allowed` (case-sensitive); the error lists them.
  Status Choice(const std::string& key, std::string* out, const std::vector<std::string>& allowed);
  // Marks a key as known without reading it (e.g. "auto" handled elsewhere).
  void Touch(const std::string& key) { used_.insert(key); }
  // A DeepSpeed key accepted without acting on it: its type is still checked (a bool, or an
  // integer >= 0), and a note says why it has no effect here.
  Status Ignored(const std::string& key, bool boolean, const char* why, std::vector<std::string>* notes);
  const nlohmann::json* Raw(const std::string& key) {
    used_.insert(key);
    return Has(key) ? &(*obj_)[key] : nullptr;
  }

  // True (and the key marked used) when the key's value is the string "auto".
  bool IsAuto(const std::string& key) const {
    return Has(key) && (*obj_)[key].is_string() && (*obj_)[key].get<std::string>() == "auto";
  }
  // Every "auto" met by this reader and its children, in reading order.
  const std::vector<AutoValue>& autos() const { return *autos_; }

  // Appends the paths of keys never read to `out` (nested readers report their own).
  void UnusedKeys(std::vector<std::string>* out) const;

 private:
  const nlohmann::json* Get(const std::string& key);
  const nlohmann::json* obj_;
  std::string path_;
  std::set<std::string> used_;
  std::shared_ptr<std::vector<AutoValue>> autos_;  // shared with children
};

}  // namespace strata
