#include "src/checkpoint/manifest.h"

#include <algorithm>
#include <filesystem>

#include "src/base/input_file.h"
#include "src/base/json_text.h"
#include "src/base/durable_file.h"
#include "src/config/json_reader.h"
#include "src/engine/optimizer_rule.h"

namespace strata::ckpt {
namespace fs = std::filesystem;

constexpr uint64_t kMaxLatestBytes = 4096;

std::string StepDirName(int64_t step) { return fmt::format("step_{:08d}", step); }
std::string RankFileName(int rank) { return fmt::format("rank{}.safetensors", rank); }

StatusOr<std::string> ResolveStepDir(const std::string& path) {
  std::error_code ec;
  if (fs::exists(fs::path(path) / "manifest.json", ec)) return path;
  const std::string latest = (fs::path(path) / "latest").string();
  if (!fs::exists(latest, ec)) {
    if (!fs::exists(path, ec)) return Error(StatusCode::kNotFound, "checkpoint folder '{}' does not exist", path);
    return Error(StatusCode::kNotFound, "'{}' holds no checkpoint (neither 'latest' nor 'manifest.json')", path);
  }
  // It names one step folder ("step_00000100\n"); anything longer is not Strata's.
  STRATA_ASSIGN_OR_RETURN(std::string name, ReadInputFile(latest, kMaxLatestBytes, "a 'latest' file"));
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.empty() || name.find('/') != std::string::npos || name == "..")
    return Error(StatusCode::kDataLoss, "'{}' does not name a step folder: {}", latest, QuoteForError(name));
  return (fs::path(path) / name).string();
}

namespace {

bool IsCount(const nlohmann::json& v) { return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0); }

// What every reader of a manifest relies on, checked once so that none of them meets a
// missing field or a wrong type: "" when it holds, else what is wrong.
std::string ManifestProblem(const nlohmann::json& j) {
  for (const char* k : {"step", "world_size", "compute_dtype", "model", "counters", "layout", "files"})
    if (!j.contains(k)) return fmt::format("lacks the field \"{}\"", k);
  if (!IsCount(j["step"])) return "\"step\" is not a step number";
  if (!IsCount(j["world_size"]) || j["world_size"].get<int64_t>() < 1 || j["world_size"].get<int64_t>() > 65536)
    return "\"world_size\" is not a rank count";
  if (!j["compute_dtype"].is_string() || !j["model"].is_object() || !j["counters"].is_object())
    return "\"compute_dtype\", \"model\" or \"counters\" has the wrong type";
  if (j.contains("optimizer") && (!j["optimizer"].is_string() || !RuleNamed(j["optimizer"].get<std::string>())))
    return "\"optimizer\" is none of \"adam\", \"lion\", \"adagrad\", \"lamb\", \"muon\"";
  if (j.contains("adam_states") && j["adam_states"] != "fp32" && j["adam_states"] != "bf16")
    return "\"adam_states\" is neither \"fp32\" nor \"bf16\"";
  if (j.contains("run_adam_states") && j["run_adam_states"] != "fp32" && j["run_adam_states"] != "bf16" &&
      j["run_adam_states"] != "8bit")
    return "\"run_adam_states\" is none of \"fp32\", \"bf16\", \"8bit\"";
  for (const char* k : {"zero_stage", "sub_group_size", "seed"})
    if (j.contains(k) && !j[k].is_number_integer()) return fmt::format("\"{}\" is not an integer", k);
  for (const char* k : {"adam_steps", "clean_steps", "hysteresis_left", "loss_scale"})
    if (!j["counters"].contains(k) || !j["counters"][k].is_number()) return fmt::format("counters.{} is not a number", k);
  if (j["counters"].contains("expert_steps")) {  // per block, per expert: counts
    const nlohmann::json& steps = j["counters"]["expert_steps"];
    bool counts = steps.is_array();
    for (const nlohmann::json& block : counts ? steps : nlohmann::json::array()) {
      counts = counts && block.is_array();
      for (const nlohmann::json& n : counts ? block : nlohmann::json::array()) counts = counts && IsCount(n);
    }
    if (!counts) return "counters.expert_steps is not a list of lists of counts";
  }
  if (!j["files"].is_array() || j["files"].size() != j["world_size"].get<size_t>())
    return fmt::format("{} files listed for world size {}", j["files"].is_array() ? j["files"].size() : 0,
                       j["world_size"].dump());
  for (const nlohmann::json& f : j["files"]) {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("bytes") || !IsCount(f["bytes"]) ||
        !f.contains("xxh3") || !f["xxh3"].is_string() || !f.contains("tensors") || !IsCount(f["tensors"]))
      return "a \"files\" entry lacks name, bytes, xxh3 or tensors";
    const std::string name = f["name"].get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
      return fmt::format("file name \"{}\" is not a file of the step folder", name);
  }
  if (!j["layout"].is_array()) return "\"layout\" is not an array";
  for (const nlohmann::json& b : j["layout"]) {
    if (!b.is_object() || !b.contains("block") || !b["block"].is_number_integer() || !b.contains("padded") ||
        !IsCount(b["padded"]) || !b.contains("params") || !b["params"].is_array())
      return "a \"layout\" entry lacks block, padded or params";
    for (const nlohmann::json& p : b["params"]) {
      if (!p.is_object() || !p.contains("name") || !p["name"].is_string() || !p.contains("offset") ||
          !IsCount(p["offset"]) || !p.contains("shape") || !p["shape"].is_array())
        return "a parameter in \"layout\" lacks name, offset or shape";
      for (const nlohmann::json& d : p["shape"])
        if (!IsCount(d)) return "a parameter's shape holds a negative or non-integer size";
    }
  }
  return "";
}

}  // namespace

StatusOr<nlohmann::json> ReadManifest(const std::string& step_dir) {
  const std::string path = (fs::path(step_dir) / "manifest.json").string();
  STRATA_ASSIGN_OR_RETURN(nlohmann::json j, ReadJsonFile(path, kMaxIndexFileBytes, StatusCode::kDataLoss));
  if (!j.is_object() || !j.contains("format") || j["format"] != kManifestFormat)
    return Error(StatusCode::kDataLoss, "'{}' is not a Strata checkpoint manifest (format \"{}\" expected)", path,
                 kManifestFormat);
  if (std::string problem = ManifestProblem(j); !problem.empty())
    return Error(StatusCode::kDataLoss, "'{}': {}", path, problem);
  return j;
}

StatusOr<SafetensorsFile> OpenRankFile(const std::string& step_dir, const nlohmann::json& manifest, int rank) {
  const nlohmann::json& entry = manifest["files"].at(rank);
  const std::string path = (fs::path(step_dir) / entry.at("name").get<std::string>()).string();
  STRATA_ASSIGN_OR_RETURN(MappedFile m, MappedFile::Open(path));
  const uint64_t want = entry.at("bytes").get<uint64_t>();
  if (m.bytes().size() != want)
    return Error(StatusCode::kDataLoss, "checkpoint file '{}' has {} bytes, its manifest says {} (truncated or replaced)",
                 path, m.bytes().size(), want);
  const std::string sum = HexU64(Xxh3(m.bytes()));
  if (sum != entry.at("xxh3").get<std::string>())
    return Error(StatusCode::kDataLoss, "checkpoint file '{}' is corrupt: xxh3 {} differs from the manifest's {}", path,
                 sum, entry.at("xxh3").get<std::string>());
  STRATA_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::FromMapping(std::move(m)));
  if (static_cast<int64_t>(f.tensors().size()) != entry.at("tensors").get<int64_t>())
    return Error(StatusCode::kDataLoss, "checkpoint file '{}' holds {} tensors, its manifest says {}", path,
                 f.tensors().size(), entry.at("tensors").dump());
  return f;
}

std::vector<std::pair<int64_t, std::string>> ListSteps(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) != 0 || name.find('.') != std::string::npos) continue;
    if (!fs::exists(e.path() / "manifest.json", ec)) continue;
    try {
      out.push_back({std::stoll(name.substr(5)), e.path().string()});
    } catch (...) {
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace strata::ckpt
