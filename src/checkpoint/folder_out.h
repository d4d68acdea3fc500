// Folder-private: writing an export folder (hf_export.cc's model folder, lora_export.cc's
// PEFT adapter folder) so that a killed export never leaves one that looks complete: every
// file goes into OUT.tmp and is fsynced there, then OUT.tmp replaces OUT by rename.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "strata/status.h"

namespace strata::ckpt {

struct OutFolder {
  std::string target;  // OUT without trailing slashes
  std::string tmp;     // OUT.tmp, where the files are written
};

// Creates an empty OUT.tmp (one left by an export killed earlier is removed first).
StatusOr<OutFolder> MakeOutFolder(const std::string& out);

// Writes `bytes` to `path` and fsyncs it (Publish fsyncs the folder).
Status WriteDurably(const std::string& path, std::string_view bytes);

// Fsyncs f.tmp (complete) and renames it to f.target. An existing target is moved aside first
// and removed after, so f.target is at every moment absent, the old folder or the new one; it
// is replaced only when it is empty or holds `marker` (an earlier export of the same kind, e.g.
// "config.json"); else the error says it is not `kind` ("a model folder").
Status Publish(const OutFolder& f, const char* marker, const char* kind);

// The Hugging Face folder an export refers to: `option` (--hf-source; it must be a folder),
// else the one the manifest records ("hf_source": the run's strata.model.from / --init-from
// DIR) if it still exists (else a note says so, and what the export lacks `without` it:
// "no tokenizer files copied"), else "".
StatusOr<std::string> SourceFolder(const nlohmann::json& manifest, const std::string& option, const char* without,
                                   std::vector<std::string>* notes);

}  // namespace strata::ckpt
