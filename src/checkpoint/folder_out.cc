#include "src/checkpoint/folder_out.h"

#include <cstdio>
#include <filesystem>
#include <span>

#include "src/checkpoint/durable_file.h"

namespace strata::ckpt {
namespace fs = std::filesystem;

StatusOr<OutFolder> MakeOutFolder(const std::string& out) {
  OutFolder f{out, ""};
  while (f.target.size() > 1 && f.target.back() == '/') f.target.pop_back();
  f.tmp = f.target + ".tmp";
  std::error_code ec;
  fs::remove_all(f.tmp, ec);  // an export killed earlier
  if (!fs::create_directories(f.tmp, ec))
    return Error(StatusCode::kIoError, "cannot create '{}': {}", f.tmp, ec ? ec.message() : "it exists");
  return f;
}

Status WriteDurably(const std::string& path, std::string_view bytes) {
  STRATA_ASSIGN_OR_RETURN(DurableWriter w, DurableWriter::Create(path));
  STRATA_RETURN_IF_ERROR(w.Write(std::as_bytes(std::span(bytes.data(), bytes.size()))));
  return w.Close();
}

Status Publish(const OutFolder& f, const char* marker, const char* kind) {
  STRATA_RETURN_IF_ERROR(FsyncDir(f.tmp));
  std::error_code ec;
  const std::string& out = f.target;
  const std::string old = out + ".old";
  if (fs::exists(out, ec)) {
    const bool replaceable = fs::is_directory(out, ec) && (fs::is_empty(out, ec) || fs::exists(fs::path(out) / marker, ec));
    if (!replaceable)
      return Error(StatusCode::kAlreadyExists, "'{}' exists and is not {} (no {}): not replaced; remove it or choose "
                   "another --out", out, kind, marker);
    fs::remove_all(old, ec);
    if (::rename(out.c_str(), old.c_str()) != 0) return ErrnoError(errno, "rename '{}' to '{}'", out, old);
  }
  if (::rename(f.tmp.c_str(), out.c_str()) != 0) return ErrnoError(errno, "rename '{}' to '{}'", f.tmp, out);
  const std::string parent = fs::path(out).parent_path().string();
  STRATA_RETURN_IF_ERROR(FsyncDir(parent.empty() ? "." : parent));
  fs::remove_all(old, ec);
  return Status();
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
