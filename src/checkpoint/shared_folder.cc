// CheckFolderIsShared (shared_folder.h).
#include "src/checkpoint/shared_folder.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <random>
#include <vector>

#include "src/base/temporaries.h"

namespace strata::ckpt {

Status CheckFolderIsShared(Communicator& comm, const std::string& dir, const std::string& what) {
  namespace fs = std::filesystem;
  const int rank = comm.rank(), world = comm.world_size();
  if (world == 1) return Status();
  // The token in 16-bit pieces: a float holds each exactly, whatever the collective does.
  float token[4] = {0, 0, 0, 0};
  if (rank == 0) {
    std::random_device random;
    for (float& t : token) t = static_cast<float>(random() & 0xFFFF);
  }
  STRATA_RETURN_IF_ERROR(comm.Broadcast(token, 4, DType::kF32, 0));
  const std::string probe =
      (fs::path(dir) / fmt::format(".strata-shared-{:04x}{:04x}{:04x}{:04x}", static_cast<unsigned>(token[0]),
                                   static_cast<unsigned>(token[1]), static_cast<unsigned>(token[2]),
                                   static_cast<unsigned>(token[3])))
          .string();
  float made = 1;
  if (rank == 0) {
    RegisterTemporary(probe);  // a stop meanwhile removes it
    FILE* f = std::fopen(probe.c_str(), "wx");
    made = f && std::fclose(f) == 0 ? 1.0f : 0.0f;
  }
  STRATA_RETURN_IF_ERROR(comm.Broadcast(&made, 1, DType::kF32, 0));
  std::vector<float> missing(static_cast<size_t>(world), 0.0f);
  std::error_code ec;
  if (made == 1 && !fs::exists(probe, ec)) missing[static_cast<size_t>(rank)] = 1;
  const Status reduced = comm.AllReduce(missing.data(), missing.size(), DType::kF32, ReduceOp::kSum);
  if (rank == 0) {
    fs::remove(probe, ec);
    ForgetTemporary(probe);
  }
  STRATA_RETURN_IF_ERROR(reduced);
  if (made != 1)
    return Error(StatusCode::kIoError, "{}", rank == 0 ? fmt::format("cannot write in {} '{}'", what, dir) : "");
  std::vector<int> blind;
  for (int r = 0; r < world; ++r)
    if (missing[static_cast<size_t>(r)] > 0) blind.push_back(r);
  if (blind.empty()) return Status();
  if (rank != 0)  // what this rank's own terminal shows; rank 0 says the rest
    return Error(StatusCode::kFailedPrecondition, "{}",
                 missing[static_cast<size_t>(rank)] > 0
                     ? fmt::format("rank {}: {} '{}' here is not the folder rank 0 saves into (rank 0's error "
                                   "says more)", rank, what, dir)
                     : "");
  return Error(StatusCode::kFailedPrecondition,
               "{} '{}' is not one folder that every rank shares: rank(s) {} of {} do not see what rank 0 wrote there "
               "(each node has a folder of its own, as on node-local disks). A checkpoint is one folder every rank "
               "writes its shard into: give {} a folder on a file system all nodes share (node-local checkpoint "
               "folders, DeepSpeed's checkpoint.use_node_local_storage, are not supported yet)",
               what, dir, fmt::join(blind, ", "), world, what);
}

}  // namespace strata::ckpt
