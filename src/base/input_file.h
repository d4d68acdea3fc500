// Files this process did not write (configs, model folders, token files, checkpoints), opened
// so that nothing a user points at can hang or flood it: only regular files are read (a FIFO
// would block the open until some writer came, a device such as /dev/zero never ends), and a
// whole-file read is bounded by what the file can sensibly hold. Errors name the file.
#pragma once

#include <cstdint>
#include <string>

#include "strata/status.h"

namespace strata {

// An open descriptor (O_RDONLY | O_CLOEXEC) of `path` if it is a regular file; else an
// error saying what it is ("a FIFO", "a folder", ...). The caller closes it.
StatusOr<int> OpenRegularFile(const std::string& path);

// The whole of `path` as bytes, when it is a regular file of at most `max_bytes`; `what`
// names the kind of file in the size error ("a config file", "the 'latest' file").
StatusOr<std::string> ReadInputFile(const std::string& path, uint64_t max_bytes, const char* what);

// `text` cut to `max_chars` for an error message, with control characters escaped, so that a
// garbage file quoted in an error stays one short line.
std::string QuoteForError(const std::string& text, size_t max_chars = 80);

// Limits of ReadInputFile for the project's JSON inputs: far above any real one.
inline constexpr uint64_t kMaxConfigFileBytes = 64ull << 20;     // ds_config, config.json, generation_config.json
inline constexpr uint64_t kMaxIndexFileBytes = 256ull << 20;     // model.safetensors.index.json, manifest.json

}  // namespace strata
