// Which ranks of a run see their --save folder as one folder. A checkpoint is written into
// one folder by every rank that sees it (Note [Checkpoint commit]): with a shared file system
// that is all of them; with node-local disks (checkpoint.use_node_local_storage) each node's
// ranks share their node's folder, and each node commits its part. A folder that is not what
// the run expects is found at start-up, before any step, where the first save used to fail
// after the first interval of training and leave no checkpoint.
#pragma once

#include <string>
#include <vector>

#include "strata/communicator.h"
#include "strata/status.h"

namespace strata::ckpt {

struct FolderGroups {
  std::vector<int> lead_of;  // per rank: the lowest rank that sees the same folder
  bool leads(int rank) const { return lead_of[static_cast<size_t>(rank)] == rank; }
  int count() const;  // how many folders
};

// Each rank leaves a probe in `dir` (named by a token rank 0 broadcasts; removed before
// returning, also on a stop signal) and looks for every rank's. A rank whose `dir` does not
// exist sees none. Collective; every rank gets the same groups. An error when the ranks see
// each other's probes inconsistently, or a probe cannot be written.
StatusOr<FolderGroups> FindFolderGroups(Communicator& comm, const std::string& dir);

// The run's expectation: one folder (`node_local` false), or one per group of ranks. An error
// names the folder and the ranks outside rank 0's folder (the lead rank's message; another
// rank's only where it does not see rank 0's folder, as its own terminal may be elsewhere).
// `note` receives what the lead should say when node-local storage finds one shared folder.
Status CheckFolderGroups(const FolderGroups& groups, const std::string& dir, const std::string& what, bool node_local,
                         int rank, std::string* note);

}  // namespace strata::ckpt
