// The on-disk layout of a checkpoint folder (torch-free; shared by save/resume and export):
//
//   DIR/latest                      "step_00000040\n": the newest complete checkpoint
//   DIR/step_00000040/manifest.json step, world size, dtype, model, counters, parameter
//                                   layout, and per rank file: bytes, xxh3-64, tensor count
//   DIR/step_00000040/rank0.safetensors ...  this rank's shard: "block3.working" (compute
//                                   dtype), "block3.<offset>.master|adam_m|adam_v" (fp32)
//
// A step folder is built as step_N.tmp and renamed only once every file and the manifest
// are fsynced; `latest` moves after that (Note [Checkpoint commit]). A folder without a
// manifest, or a *.tmp folder, is never read.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "src/checkpoint/safetensors.h"
#include "strata/status.h"

namespace strata::ckpt {

inline constexpr const char* kManifestFormat = "strata-checkpoint-1";

std::string StepDirName(int64_t step);  // "step_00000040"
std::string RankFileName(int rank);     // "rank0.safetensors"

// `path` is either a checkpoint folder (follows its `latest`) or one step folder (holds
// manifest.json). Returns the step folder.
StatusOr<std::string> ResolveStepDir(const std::string& path);

// Reads and checks the manifest of a step folder (format, fields present).
StatusOr<nlohmann::json> ReadManifest(const std::string& step_dir);

// Maps rank `rank`'s file, checks its size and xxh3-64 against the manifest, then parses
// it. A truncated or altered file is a DATA_LOSS error naming the file.
StatusOr<SafetensorsFile> OpenRankFile(const std::string& step_dir, const nlohmann::json& manifest, int rank);

// The step folders under `dir` that have a manifest, oldest first, as (step, path).
std::vector<std::pair<int64_t, std::string>> ListSteps(const std::string& dir);

}  // namespace strata::ckpt
