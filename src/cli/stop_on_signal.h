// SIGINT and SIGTERM end a Strata process within a second and leave nothing behind: its
// swap folders are removed (a real model's are terabytes), a checkpoint being written is
// abandoned as a temporary folder that resume never reads (the last complete one stays
// loadable), and the exit code is 128 + the signal (130, 143), as a shell reports it.
#pragma once

namespace strata::cli {

// Installs the handlers (async-signal-safe: they only wake a watcher thread, which does the
// cleanup). Call once, early in main; a second signal during the cleanup changes nothing.
void StopOnSignals();

}  // namespace strata::cli
