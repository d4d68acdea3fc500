// FindFolderGroups and CheckFolderGroups (shared_folder.h).
#include "src/checkpoint/shared_folder.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <set>

#include "src/base/temporaries.h"
#include "src/comm/float_pieces.h"

namespace strata::ckpt {
namespace {

std::string ProbeName(const std::string& dir, uint64_t token, int rank) {
  return (std::filesystem::path(dir) / fmt::format(".strata-probe-{:016x}-{}", token, rank)).string();
}

}  // namespace

int FolderGroups::count() const { return static_cast<int>(std::set<int>(lead_of.begin(), lead_of.end()).size()); }

StatusOr<FolderGroups> FindFolderGroups(Communicator& comm, const std::string& dir) {
  namespace fs = std::filesystem;
  const int rank = comm.rank(), world = comm.world_size();
  FolderGroups g;
  g.lead_of.assign(static_cast<size_t>(world), 0);
  if (world == 1) return g;
  float pieces[kFloatPieces] = {};
  if (rank == 0) {
    std::random_device random;
    ToFloatPieces((uint64_t{random()} << 32) | random(), pieces);
  }
  STRATA_RETURN_IF_ERROR(comm.Broadcast(pieces, kFloatPieces, DType::kF32, 0));
  const uint64_t token = FromFloatPieces(pieces);
  std::error_code ec;
  const std::string mine = ProbeName(dir, token, rank);
  const bool exists = fs::is_directory(dir, ec);
  float failed = 0;
  if (exists) {
    RegisterTemporary(mine);  // a stop meanwhile removes it
    FILE* f = std::fopen(mine.c_str(), "wx");
    failed = f && std::fclose(f) == 0 ? 0.0f : 1.0f;
  }
  const Status made = comm.AllReduce(&failed, 1, DType::kF32, ReduceOp::kSum);  // (every probe is there after it)
  std::vector<float> seen(static_cast<size_t>(world), 0.0f), all(static_cast<size_t>(world) * world, 0.0f);
  for (int q = 0; exists && made.ok() && q < world; ++q) seen[static_cast<size_t>(q)] = fs::exists(ProbeName(dir, token, q), ec);
  const Status gathered = made.ok() ? comm.AllGather(seen.data(), all.data(), seen.size(), DType::kF32) : made;
  if (exists) {  // every rank has looked: the probes go
    fs::remove(mine, ec);
    ForgetTemporary(mine);
  }
  STRATA_RETURN_IF_ERROR(gathered);
  if (failed > 0)
    return Error(StatusCode::kIoError, "cannot write in '{}' on {} rank(s) (a probe of which ranks share it)", dir,
                 static_cast<int>(failed));
  const auto sees = [&](int r, int q) { return all[static_cast<size_t>(r) * world + q] > 0; };
  for (int r = 0; r < world; ++r) {
    g.lead_of[static_cast<size_t>(r)] = r;  // a rank without the folder is a group of its own
    for (int q = 0; q < world; ++q)
      if (sees(r, q)) {
        g.lead_of[static_cast<size_t>(r)] = q;
        break;
      }
  }
  for (int r = 0; r < world; ++r)
    for (int q = 0; q < world; ++q)
      if (sees(r, q) != (sees(r, r) && g.lead_of[static_cast<size_t>(r)] == g.lead_of[static_cast<size_t>(q)]))
        return Error(StatusCode::kFailedPrecondition,
                     "'{}': rank {} {} rank {}'s probe there, which does not make the ranks' folders one or several "
                     "whole folders (a file system that shows files late?)", dir, r, sees(r, q) ? "sees" : "does not see",
                     q);
  return g;
}

Status CheckFolderGroups(const FolderGroups& g, const std::string& dir, const std::string& what, bool node_local,
                         int rank, std::string* note) {
  const int world = static_cast<int>(g.lead_of.size());
  if (node_local) {
    if (g.count() == 1 && world > 1 && note)
      *note = fmt::format("checkpoint.use_node_local_storage: {} '{}' is one folder all {} ranks share: saved as "
                          "such", what, dir, world);
    return Status();
  }
  std::vector<int> blind;
  for (int r = 0; r < world; ++r)
    if (g.lead_of[static_cast<size_t>(r)] != 0) blind.push_back(r);
  if (blind.empty()) return Status();
  if (rank != 0)  // what this rank's own terminal shows; rank 0 says the rest
    return Error(StatusCode::kFailedPrecondition, "{}",
                 g.lead_of[static_cast<size_t>(rank)] != 0
                     ? fmt::format("rank {}: {} '{}' here is not the folder rank 0 saves into (rank 0's error says "
                                   "more)", rank, what, dir)
                     : "");
  return Error(StatusCode::kFailedPrecondition,
               "{} '{}' is not one folder that every rank shares: rank(s) {} of {} do not see what rank 0 wrote there "
               "(each node has a folder of its own, as on node-local disks). A checkpoint is one folder every rank "
               "writes its shard into: give {} a folder on a file system all nodes share, or set "
               "checkpoint.use_node_local_storage to true (each node then saves its ranks' shards into its own "
               "folder, and resumes from it)",
               what, dir, fmt::join(blind, ", "), world, what);
}

}  // namespace strata::ckpt
