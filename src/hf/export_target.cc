#include "src/hf/export_target.h"

#include <fcntl.h>
#include <stdio.h>

#include <filesystem>
#include <set>

#include "src/base/input_file.h"
#include "src/base/json_text.h"
#include "src/base/durable_file.h"
#include "src/checkpoint/manifest.h"
#include "src/checkpoint/safetensors.h"

namespace strata::ckpt {
namespace fs = std::filesystem;
namespace {

std::string Trimmed(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// Whether `inner` is `outer` or lies below it (both made absolute and normal first).
bool Within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin(), o = outer.begin();
  for (; o != outer.end(); ++i, ++o) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

fs::path Canonical(const std::string& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(fs::absolute(p), ec);
  return ec ? fs::absolute(p).lexically_normal() : c;
}

std::string Refusal(const std::string& out, const std::string& why) {
  return fmt::format("'{}' exists and {}: not replaced (choose another --out, remove it yourself, or pass --overwrite "
                     "to replace it)", out, why);
}

// "" when the folder `out` holds only what an earlier export of `kind` wrote there (or is
// absent or empty); else why it may not be replaced.
std::string WhyNotReplaceable(const std::string& out, const char* kind) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(out, ec))) return "";
  if (!fs::is_directory(out, ec)) return "is not a folder";
  if (fs::is_empty(out, ec)) return "";
  const std::string marker = (fs::path(out) / kExportMarker).string();
  std::set<std::string> ours;
  if (fs::exists(marker, ec)) {
    StatusOr<nlohmann::json> m = ReadJsonFile(marker, 1 << 20);
    if (!m.ok() || !m->is_object() || !(*m)["files"].is_array()) return fmt::format("its {} is unreadable", kExportMarker);
    const std::string was = m->value("kind", std::string());
    if (was != kind) return fmt::format("is {} written by strata export, not {}", was.empty() ? "an output" : was, kind);
    for (const nlohmann::json& f : (*m)["files"])
      if (f.is_string()) ours.insert(f.get<std::string>());
  }
  for (const auto& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    if (name != kExportMarker && !ours.count(name))
      return fmt::format("holds '{}', which strata export did not write there", name);
  }
  return "";
}

}  // namespace

std::map<std::string, std::string> ExportMetadata() { return {{"format", "pt"}, {kWrittenByKey, kWrittenBy}}; }

Status CheckExportTarget(const std::string& out, const std::string& checkpoint, const std::string& step_dir,
                         const nlohmann::json& manifest, const std::string& option, bool overwrite) {
  std::vector<std::string> reads = {checkpoint, step_dir};
  std::error_code ec;
  const std::string save = fs::path(Trimmed(step_dir)).parent_path().string();
  const bool in_save_folder = !save.empty() && fs::exists(fs::path(save) / "latest", ec);
  if (in_save_folder) reads.push_back(save);  // its sibling steps too
  const fs::path o = Canonical(out);
  for (const std::string& r : reads) {
    const fs::path c = Canonical(r);
    if (Within(o, c))
      return InvalidArgument("--out '{}' lies inside the checkpoint folder '{}' being exported: it would replace part of "
                             "it; write the export elsewhere", out, r);
    if (Within(c, o))
      return InvalidArgument("--out '{}' holds the checkpoint '{}' being exported: replacing it would delete the "
                             "checkpoint; write the export elsewhere", out, r);
  }
  if (overwrite) return Status();
  // The base folders in reach, and who names each.
  std::vector<std::pair<std::string, std::string>> bases;
  if (!option.empty()) bases.emplace_back(option, "--hf-source");
  auto named_by = [&](const nlohmann::json& m, const std::string& where) {
    const nlohmann::json* source = m.is_object() && m.contains("hf_source") ? &m["hf_source"] : nullptr;
    if (source && source->is_string() && !source->get<std::string>().empty())
      bases.emplace_back(source->get<std::string>(), fmt::format("the hf_source of '{}'", where));
  };
  named_by(manifest, step_dir);
  if (in_save_folder)
    for (const auto& [step, dir] : ListSteps(save))
      if (StatusOr<nlohmann::json> m = ReadManifest(dir); m.ok()) named_by(*m, dir);
  for (const auto& [base, who] : bases) {
    const fs::path b = Canonical(base);
    if (!Within(o, b) && !Within(b, o)) continue;
    return Error(StatusCode::kAlreadyExists,
                 "--out '{}' {} the Hugging Face folder '{}' ({}), the base this checkpoint was trained from: "
                 "replacing it would lose that model (a QLoRA checkpoint keeps only its 4-bit codes, and a LoRA "
                 "export names it as its base); write the export elsewhere, or pass --overwrite to replace it",
                 out, Within(o, b) ? (o == b ? "is" : "lies inside") : "holds", base, who);
  }
  return Status();
}

StatusOr<OutFolder> OutFolder::Make(const std::string& out, const char* kind, bool overwrite) {
  OutFolder f(Trimmed(out), kind, overwrite);
  if (std::string why = WhyNotReplaceable(f.target_, kind); !why.empty() && !overwrite)
    return Error(StatusCode::kAlreadyExists, "{}", Refusal(f.target_, why));
  const std::string parent = fs::path(f.target_).parent_path().string();
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);
  f.tmp_ = TempPath(TemporaryNameFor(f.target_));
  const auto hold = HoldOffStops();
  if (!fs::create_directory(f.tmp_.path(), ec))
    return Error(StatusCode::kIoError, "cannot create '{}': {}", f.tmp_.path(), ec ? ec.message() : "it exists");
  return f;
}

std::string OutFolder::Path(const std::string& name) {
  files_.push_back(name);
  return (fs::path(tmp_.path()) / name).string();
}

Status OutFolder::Write(const std::string& name, std::string_view bytes) {
  STRATA_ASSIGN_OR_RETURN(DurableWriter w, DurableWriter::Create(Path(name)));
  STRATA_RETURN_IF_ERROR(w.Write(std::as_bytes(std::span(bytes.data(), bytes.size()))));
  return w.Close();
}

Status OutFolder::Publish() {
  const nlohmann::json marker = {{kWrittenByKey, kWrittenBy}, {"kind", kind_}, {"files", files_}};
  STRATA_RETURN_IF_ERROR(WriteDurably((fs::path(tmp_.path()) / kExportMarker).string(), marker.dump(1) + "\n"));
  STRATA_RETURN_IF_ERROR(FsyncDir(tmp_.path()));
  // Checked again: something may have appeared in OUT while the export ran.
  if (std::string why = WhyNotReplaceable(target_, kind_); !why.empty() && !overwrite_)
    return Error(StatusCode::kAlreadyExists, "{}", Refusal(target_, why));
  std::error_code ec;
  TempPath old;
  if (fs::exists(fs::symlink_status(target_, ec))) {
    // One atomic swap where the file system has it: OUT is the old folder or the new, never
    // absent, and a stop removes only the temporary name, which then holds the old one.
    if (::renameat2(AT_FDCWD, tmp_.path().c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) == 0) {
      const std::string parent = fs::path(target_).parent_path().string();
      STRATA_RETURN_IF_ERROR(FsyncDir(parent.empty() ? "." : parent));
      tmp_.Remove();  // the old folder, under the temporary name
      return Status();
    }
    const auto hold = HoldOffStops();  // (the old folder moves to a registered name: both or neither)
    old = TempPath(TemporaryNameFor(target_));
    if (::rename(target_.c_str(), old.path().c_str()) != 0)
      return ErrnoError(errno, "rename '{}' to '{}'", target_, old.path());
  }
  if (::rename(tmp_.path().c_str(), target_.c_str()) != 0) {
    const Status s = ErrnoError(errno, "rename '{}' to '{}'", tmp_.path(), target_);
    if (!old.path().empty() && ::rename(old.path().c_str(), target_.c_str()) == 0) old.Release();  // put it back
    return s;
  }
  tmp_.Release();
  const std::string parent = fs::path(target_).parent_path().string();
  STRATA_RETURN_IF_ERROR(FsyncDir(parent.empty() ? "." : parent));
  old.Remove();
  return Status();
}

StatusOr<OutFile> OutFile::Make(const std::string& out, bool overwrite) {
  OutFile f(out, overwrite);
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(out, ec);
  if (fs::exists(st) && !overwrite) {
    if (!fs::is_regular_file(fs::status(out, ec)))
      return Error(StatusCode::kAlreadyExists, "{}", Refusal(out, "is not a regular file"));
    StatusOr<SafetensorsFile> old = SafetensorsFile::Open(out);
    const bool ours = old.ok() && old->metadata().count(kWrittenByKey) && old->metadata().at(kWrittenByKey) == kWrittenBy;
    if (!ours) return Error(StatusCode::kAlreadyExists, "{}", Refusal(out, "was not written by strata export"));
  }
  const std::string parent = fs::path(out).parent_path().string();
  if (!parent.empty()) fs::create_directories(parent, ec);
  f.tmp_ = TempPath(TemporaryNameFor(out));
  return f;
}

Status OutFile::Publish() {
  if (::rename(tmp_.path().c_str(), target_.c_str()) != 0)
    return ErrnoError(errno, "rename '{}' to '{}'", tmp_.path(), target_);
  tmp_.Release();
  const std::string parent = fs::path(target_).parent_path().string();
  return FsyncDir(parent.empty() ? "." : parent);
}

StatusOr<std::string> SourceFolder(const nlohmann::json& manifest, const std::string& option, const char* without,
                                   std::vector<std::string>* notes) {
  std::error_code ec;
  if (!option.empty()) {
    if (!fs::is_directory(option, ec)) return Error(StatusCode::kNotFound, "--hf-source '{}' is not a folder", option);
    return option;
  }
  const std::string recorded = manifest.value("hf_source", std::string());
  if (recorded.empty()) return std::string();
  if (!fs::is_directory(recorded, ec)) {
    notes->push_back(fmt::format("the checkpoint's source folder '{}' no longer exists: {} (pass --hf-source DIR)",
                                 recorded, without));
    return std::string();
  }
  return recorded;
}

}  // namespace strata::ckpt
