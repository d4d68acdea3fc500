// Every signal that would end a Strata process (src/base/stop_signals.h: SIGINT, SIGTERM,
// SIGHUP, SIGQUIT, SIGALRM, SIGUSR1/2, SIGPIPE, SIGXFSZ) ends it within a second and leaves
// nothing behind: its swap folders are removed (a real model's are terabytes), and so is every
// output still under its temporary name (a checkpoint being written, an export, a rewritten
// config; see src/base/temporaries.h), so the last complete checkpoint stays what resume
// reads; the exit code is 128 + the signal (130, 143, 129, 141, ...), as a shell reports it.
// A file-size limit reached by this process's own write is not a stop: that write fails with
// EFBIG and its caller reports the file, as for any other write error.
#pragma once

namespace strata::cli {

// Installs the handlers (async-signal-safe: they only wake a watcher thread, which does the
// cleanup). Call early in a command; later calls do nothing; a second signal during the
// cleanup changes nothing.
void StopOnSignals();

}  // namespace strata::cli
