// The picture of an I/O sweep: GB/s against block size, one colour per queue depth, the
// store's curve solid and fio's dashed beside it, reads and writes as two panels.
#pragma once

#include "bench/io_results.h"
#include "bench/svg_plot.h"

namespace strata::bench {

// `where`: a few words on what was measured (the folder's drive, the machine), for the subtitle.
PlotSpec SweepPlot(const SweepTable& table, const std::string& where);

}  // namespace strata::bench
