// The demo's picture: loss, loss scale and FP8 scales per step as a PNG, drawn by gnuplot run as a
// subprocess on a generated script (Debian package gnuplot-nox).
#pragma once

#include <string>
#include <vector>

#include "run_result.h"

namespace mixprec_demo {

/// Writes `dir`/plot.dat and `dir`/plot.gp and runs `gnuplot plot.gp` to make `dir`/plot.png.
/// Returns false, with the reason in `*message` (e.g. gnuplot is not installed), when no PNG was
/// made; the data and script files are written in any case, so the plot can be redrawn by hand.
bool write_plot(const std::string& dir, const std::vector<RunResult>& runs, std::string* message);

}  // namespace mixprec_demo
