// Save and resume the whole training state, sharded per rank (see manifest.h for the
// layout). Both are collective: every rank of the run calls them with the same arguments.
//
// Note [Checkpoint commit]
// 1. rank 0 creates DIR/step_N.tmp (an old one left by a crash is removed first);
// 2. every rank streams its shard into rank<r>.safetensors there, fsyncs it, and writes
//    rank<r>.sum (bytes, xxh3-64, tensor count), fsynced;
// 3. rank 0 writes manifest.json (fsynced), fsyncs the folder, renames step_N.tmp to
//    step_N, fsyncs DIR, then replaces DIR/latest (temporary name + fsync + rename);
// 4. rank 0 removes the oldest step folders beyond `keep`.
// A process killed anywhere before the end of 3 leaves `latest` on the previous step
// folder, untouched. With node-local folders (checkpoint.use_node_local_storage) each folder's
// lead (its lowest rank) does rank 0's part in its folder, with the manifest of every rank's
// file (the sums gathered over the ranks, not read from the folder), and a resume agrees on the
// newest step every folder holds (a save cut short on one node resumes all from the step before). Failures on any rank reach all ranks (an all-reduced flag after each
// phase), so no rank waits for a peer that gave up.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "src/engine/engine.h"
#include "strata/communicator.h"
#include "strata/status.h"

namespace strata::ckpt {

struct SaveOptions {
  int keep = 2;  // step folders kept, newest first; 0 = all
  // Tests: called at named points of the commit ("shard_partly_written" after the first tensor, "before_rename",
  // "before_latest") on every rank; the hook may kill the process.
  std::function<void(const std::string& point)> crash_hook;
  // What an earlier run left in the folder that this run replaces (train --overwrite): removed
  // by the commit of this save once `latest` names it (CheckSaveFolder lists them).
  std::vector<std::string> replaces;
  // How many --save folders the ranks write into (ckpt::FolderGroups: one shared folder, or one
  // per node with checkpoint.use_node_local_storage) and whether this rank leads its folder (it
  // makes the step folder, commits it and prunes). One folder: rank 0 leads.
  int folders = 1;
  bool folder_lead = false;
  // Files of the run's own kept in the step folder beside the shards (name, bytes), written by
  // each folder's lead before the manifest: DPO's reference log-probabilities.
  std::vector<std::pair<std::string, std::string>> side_files;
};

// Whether a run may save into `save` (before it saves anything): a folder holding no
// checkpoint, or the one the run resumes from (`resume`, the folder or one of its step
// folders), or any with `overwrite` (train --overwrite). Otherwise the error names the
// folder, its latest step and the ways on. Returns what another run left there that this
// run replaces (with `overwrite`: its step folders, finished or not), for
// SaveOptions::replaces: removed only once this run's first checkpoint is in place, so that
// a run that never saves loses nothing, and pruning and `latest` then see this run's steps
// alone.
StatusOr<std::vector<std::string>> CheckSaveFolder(const std::string& save, const std::string& resume, bool overwrite);

// Writes the state after `step` optimizer steps (the next step to run is `step`).
Status SaveCheckpoint(Engine& engine, Communicator& comm, const TrainConfig& cfg, const std::string& dir,
                      int64_t step, const SaveOptions& options = {});

// Restores the state from `path` (a checkpoint folder, via its `latest`, or one step
// folder). Returns the step to continue from. The run must have the same world size,
// model, compute dtype and optimizer sub-groups as the one that saved.
StatusOr<int64_t> LoadCheckpoint(Engine& engine, Communicator& comm, const TrainConfig& cfg, const std::string& path);

// The model section of a config as the manifest stores it (strata.model keys).
nlohmann::json ModelConfigJson(const model::ModelConfig& m);

}  // namespace strata::ckpt
