// The wandb section's monitor: DeepSpeed's WandbMonitor, through the official client. A Python
// process of its own (STRATA_PYTHON, or python3 on the PATH, with the wandb package) runs
// wandb.init(project, group, entity=team) as DeepSpeed does, offline unless WANDB_MODE says
// otherwise (`wandb sync` uploads the run folder later), and logs each scalar with wandb.log({tag:
// value}, step=samples). It reads the scalars from a socket, so a client that dies is a failed
// write (the warning once), never a signal that stops the run; in a process group of its own it
// never sees the terminal's interrupt, and finishes its run when the trainer closes the socket,
// or when the trainer dies.
#pragma once

#include <memory>

#include "src/config/train_config.h"
#include "src/monitor/monitors.h"

namespace strata::monitor {

// Starts the client and waits for its run to be open; an error (no Python, no wandb package, an
// init that fails) says which and how to mend it.
StatusOr<std::unique_ptr<Sink>> OpenWandbSink(const WandbConfig& config);

}  // namespace strata::monitor
