// Folder-private: where an export writes, so that it never loses what it did not write and
// never leaves a half-written output. The rules (export.h states them for users):
//   * the output is never inside the checkpoint being read, nor holds it;
//   * the output never replaces (nor lies in, nor holds) a Hugging Face folder a checkpoint
//     in reach names as its base (its `hf_source`: the run's --init-from), whoever wrote it,
//     unless the caller says so (--overwrite): with QLoRA the checkpoint keeps only the 4-bit
//     codes, and a LoRA export names that folder as its base;
//   * an existing output is replaced only when strata export wrote it (a folder's
//     `.strata-export.json` lists every file an export put there; a file's safetensors
//     metadata says "written_by": "strata export") and nothing else was added since, or when
//     the caller says so (--overwrite);
//   * everything is written under a temporary name beside the output (registered, so a
//     signal removes it), fsynced, and renamed into place only when complete.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/temporaries.h"
#include "strata/status.h"

namespace strata::ckpt {

// The marker file of an exported folder and the metadata mark of an exported file.
inline constexpr const char* kExportMarker = ".strata-export.json";
inline constexpr const char* kWrittenByKey = "written_by";
inline constexpr const char* kWrittenBy = "strata export";

// The metadata of every exported safetensors file: transformers' "format" and the mark above.
std::map<std::string, std::string> ExportMetadata();

// An error unless `out` lies outside every folder of `checkpoint` that the export reads (the
// path given, its step folder, and the save folder holding `latest`) and holds none of them;
// and, unless `overwrite`, outside every base folder in reach (the `hf_source` of `manifest`,
// of the save folder's other steps, and --hf-source `option`) and holding none of them.
Status CheckExportTarget(const std::string& out, const std::string& checkpoint, const std::string& step_dir,
                         const nlohmann::json& manifest, const std::string& option, bool overwrite);

// A folder being exported: files go into a temporary folder beside OUT, which replaces OUT
// on Publish(). `kind` names what it is ("a model folder", "a PEFT adapter folder").
class OutFolder {
 public:
  // Checks that OUT may be replaced (above) before any work is done, then makes the temporary.
  static StatusOr<OutFolder> Make(const std::string& out, const char* kind, bool overwrite);

  const std::string& target() const { return target_; }
  // Where a file named `name` is written (it then counts as the export's own).
  std::string Path(const std::string& name);
  // Writes `bytes` durably as `name`.
  Status Write(const std::string& name, std::string_view bytes);
  // Writes the marker, fsyncs, and renames the temporary to OUT (the old OUT is moved aside
  // first and removed after, so OUT is at every moment absent, the old folder or the new).
  Status Publish();

 private:
  OutFolder(std::string target, const char* kind, bool overwrite)
      : target_(std::move(target)), kind_(kind), overwrite_(overwrite) {}
  std::string target_;
  const char* kind_;
  bool overwrite_;
  TempPath tmp_;
  std::vector<std::string> files_;
};

// A single file being exported (`--out FILE.safetensors`): same rules, through a temporary
// file beside it.
class OutFile {
 public:
  static StatusOr<OutFile> Make(const std::string& out, bool overwrite);
  const std::string& tmp() const { return tmp_.path(); }
  Status Publish();  // renames the (closed, fsynced) temporary over OUT and fsyncs the folder

 private:
  OutFile(std::string target, bool overwrite) : target_(std::move(target)), overwrite_(overwrite) {}
  std::string target_;
  bool overwrite_;
  TempPath tmp_;
};

// The Hugging Face folder an export refers to: `option` (--hf-source; it must be a folder),
// else the one the manifest records ("hf_source": the run's strata.model.from / --init-from
// DIR) if it still exists (else a note says so, and what the export lacks `without` it:
// "no tokenizer files copied"), else "".
StatusOr<std::string> SourceFolder(const nlohmann::json& manifest, const std::string& option, const char* without,
                                   std::vector<std::string>* notes);

}  // namespace strata::ckpt
