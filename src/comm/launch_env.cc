// LaunchEnv::FromEnvironment: the torchrun / Slurm contract.
#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>

#include "strata/communicator.h"

namespace strata {
namespace {

// The first of `names` that is set, parsed as an int in [min, max]; nullopt if none is set.
StatusOr<std::optional<int>> IntFromEnv(std::initializer_list<const char*> names, int min, int max) {
  for (const char* name : names) {
    const char* text = std::getenv(name);
    if (text == nullptr) continue;
    const std::string s(text);
    int v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
      return InvalidArgument("{}='{}' is not an integer", name, s);
    }
    if (v < min || v > max) return InvalidArgument("{}={} is outside [{}, {}]", name, v, min, max);
    return std::optional<int>(v);
  }
  return std::optional<int>();
}

}  // namespace

StatusOr<LaunchEnv> LaunchEnv::FromEnvironment() {
  LaunchEnv env;
  STRATA_ASSIGN_OR_RETURN(std::optional<int> rank, IntFromEnv({"RANK", "SLURM_PROCID"}, 0, 1 << 20));
  STRATA_ASSIGN_OR_RETURN(std::optional<int> world, IntFromEnv({"WORLD_SIZE", "SLURM_NTASKS"}, 1, 1 << 20));
  STRATA_ASSIGN_OR_RETURN(std::optional<int> local, IntFromEnv({"LOCAL_RANK", "SLURM_LOCALID"}, 0, 1 << 20));
  STRATA_ASSIGN_OR_RETURN(std::optional<int> port, IntFromEnv({"MASTER_PORT"}, 1, 65535));
  if (rank.has_value() != world.has_value()) {
    if (rank) return InvalidArgument("RANK is set ({}) but WORLD_SIZE is not", *rank);
    return InvalidArgument("WORLD_SIZE is set ({}) but RANK is not", *world);
  }
  if (rank && *rank >= *world) {
    const bool slurm = std::getenv("RANK") == nullptr;
    return InvalidArgument("{}={} but {}={}", slurm ? "SLURM_PROCID" : "RANK", *rank,
                           slurm ? "SLURM_NTASKS" : "WORLD_SIZE", *world);
  }
  env.rank = rank.value_or(0);
  env.world_size = world.value_or(1);
  env.local_rank = local.value_or(env.rank);
  if (port) env.master_port = *port;
  if (const char* addr = std::getenv("MASTER_ADDR")) {
    if (*addr == '\0') return InvalidArgument("MASTER_ADDR is set but empty");
    env.master_addr = addr;
  }
  return env;
}

}  // namespace strata
