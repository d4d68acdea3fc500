#include "src/checkpoint/manifest.h"

#include <algorithm>
#include <filesystem>

#include "src/checkpoint/durable_file.h"
#include "src/engine/json_reader.h"

namespace strata::ckpt {
namespace fs = std::filesystem;

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
  STRATA_ASSIGN_OR_RETURN(std::string name, ReadTextFile(latest));
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.empty() || name.find('/') != std::string::npos)
    return Error(StatusCode::kDataLoss, "'{}' does not name a step folder: \"{}\"", latest, name);
  return (fs::path(path) / name).string();
}

StatusOr<nlohmann::json> ReadManifest(const std::string& step_dir) {
  const std::string path = (fs::path(step_dir) / "manifest.json").string();
  STRATA_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  STRATA_ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonText(text, "'" + path + "'", StatusCode::kDataLoss));
  if (!j.is_object() || j.value("format", "") != kManifestFormat)
    return Error(StatusCode::kDataLoss, "'{}' is not a Strata checkpoint manifest (format \"{}\" expected)", path,
                 kManifestFormat);
  for (const char* k : {"step", "world_size", "compute_dtype", "model", "counters", "layout", "files"})
    if (!j.contains(k)) return Error(StatusCode::kDataLoss, "'{}' lacks the field \"{}\"", path, k);
  if (!j["files"].is_array() || j["files"].size() != j["world_size"].get<size_t>())
    return Error(StatusCode::kDataLoss, "'{}': {} files listed for world size {}", path, j["files"].size(),
                 j["world_size"].dump());
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
