// A DPO run's reference log-probabilities (Note [DPO]) kept beside its training data: the
// initial model's log-probability of every row's completion, computed in one forward pass
// before the first step and written to PATH.ref-HASH (PATH the training token file, HASH of
// what they depend on: the model's config, where its initial weights came from, the seed, the
// data files and how they are cut). A later run of the same model on the same data reads them
// instead of passing over the data again. Each checkpoint keeps a copy (kDpoReferenceFile in its
// step folder), which a resumed run reads first (its weights are no longer the initial ones, so
// it cannot compute them again); without it, the file beside the data; without either, the
// resume is refused, naming the file.
//
// The file, little-endian: "STRATA-REFLOGPS\n", uint64 HASH, uint64 rows, uint32 length of the
// identity text, the text (JSON: what HASH covers, for people), then a float64 per row.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "src/config/train_config.h"
#include "src/data/data.h"
#include "src/engine/engine.h"
#include "strata/communicator.h"

namespace strata::cli {

struct DpoReferenceInputs {
  const TrainConfig& config;
  std::string init_from;  // the initial weights' folder or file; "" = drawn from the seed
  bool resuming = false;
  bool lead = false;  // says what happens
  std::function<void(const std::string&)> message;
  std::string step_dir;  // resuming: the checkpoint's step folder, whose copy is read first
};

// The name of the copy in a checkpoint's step folder.
inline constexpr char kDpoReferenceFile[] = "dpo_reference";

// The identity text whose hash names the file.
std::string DpoReferenceIdentity(const TrainConfig& config, const std::string& init_from,
                                 const data::TokenDataset& data);
std::string DpoReferencePath(const TrainConfig& config, const std::string& identity);

// Reads the file (resuming: the checkpoint's copy first), or (a fresh run without one) computes
// the log-probabilities with `engine` and writes it; every rank ends with the same vector and
// hands it to the engine. Returns the file's bytes, which each checkpoint keeps. Collective.
StatusOr<std::string> PrepareDpoReference(const DpoReferenceInputs& in, Engine& engine, Communicator& comm,
                                          const data::TokenDataset& data);

}  // namespace strata::cli
