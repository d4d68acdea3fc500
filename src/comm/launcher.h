// The built-in launcher for one node (`strata train --nproc N`): runs this program N times
// as ranks 0..N-1 with the torchrun environment, and supervises them.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace strata {

// Set to "1" in every child: a program that finds it must run as a rank, not launch again.
inline constexpr const char* kLaunchedEnvVar = "STRATA_LAUNCHED";

// True when this process was started by LaunchLocalRanks.
bool IsLaunchedRank();

struct LaunchOptions {
  int nproc = 1;
  // The children's argv (argv[0] included, shown by ps); the program run is /proc/self/exe.
  std::vector<std::string> argv;
  // MASTER_PORT for the children's rendezvous; 0 picks a free port.
  int master_port = 0;
  // After the first failure, the others get SIGTERM, then SIGKILL after this long.
  std::chrono::milliseconds grace{5000};
};

// Starts the ranks with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT and
// STRATA_LAUNCHED=1 added to this process's environment; their stdout/stderr are ours,
// unprefixed. Blocks until every child has exited. A stop signal received meanwhile
// (src/base/stop_signals.h: SIGINT, SIGTERM, SIGHUP, SIGPIPE, ...; one the caller ignores
// stays ignored) is forwarded to the children. If a child exits non-zero or is killed, the others are
// terminated (SIGTERM, then SIGKILL after `grace`) and the result is that child's code
// (128 + signal when killed), logged as "rank N exited with code C" / "rank N killed by
// signal S". Returns 0 when all ranks succeed, and 1 if the children could not be started
// (logged). Call from the main thread, before other threads start: it blocks SIGCHLD
// and the stop signals in the calling thread while it runs.
int LaunchLocalRanks(const LaunchOptions& options);

}  // namespace strata
