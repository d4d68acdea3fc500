// Whether every rank of a run sees one folder as the same folder. A checkpoint is one folder
// that all ranks write their shards into (Note [Checkpoint commit]); where each node has a
// --save folder of its own (node-local disks, no shared file system), rank 0's step folder is
// not there for the other nodes' ranks, and the first save failed after the first training
// interval, leaving no checkpoint. Checked at start-up instead, before any step.
#pragma once

#include <string>

#include "strata/communicator.h"
#include "strata/status.h"

namespace strata::ckpt {

// Rank 0 leaves a probe file in `dir` (which it has created), named by a token it broadcasts;
// each rank looks for it. Every rank returns the same verdict: an error naming the folder and
// the ranks that do not see the probe (the lead rank's message; the others' empty, as the
// lead reports it). The probe is removed before returning, also on a stop signal. Collective.
Status CheckFolderIsShared(Communicator& comm, const std::string& dir, const std::string& what);

}  // namespace strata::ckpt
