// A line chart as a standalone SVG document, written by Strata itself so that a benchmark's
// picture needs no plotting runtime: one or more panels side by side sharing one y scale
// (from 0), a log2 x axis with labelled ticks, polylines (solid or dashed) with a dot at each
// point, a legend at the right, axis labels and a title. Pure string building, no I/O.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace strata::bench {

struct PlotSeries {
  std::string colour;  // any SVG colour ("#0072B2")
  bool dashed = false;
  std::vector<std::pair<double, double>> points;  // (x, y) in data units, x > 0, in drawing order
};

struct PlotPanel {
  std::string title;
  std::vector<PlotSeries> series;  // one <polyline> each (series with no point draw nothing)
};

struct LegendEntry {
  std::string label;
  std::string colour;
  bool dashed = false;
};

struct PlotSpec {
  std::string title, subtitle;
  std::string x_label, y_label;
  // The x axis is log2 from the first tick's value to the last's; each tick is drawn and labelled.
  std::vector<std::pair<double, std::string>> x_ticks;
  std::vector<PlotPanel> panels;
  std::vector<LegendEntry> legend;  // one <g class="legend-entry"> each
};

// The SVG document (UTF-8, with an XML declaration). Text is XML-escaped.
std::string RenderSvg(const PlotSpec& spec);

// Round tick values 0, step, 2*step, ... up to the first one >= max (at least one step),
// with step 1, 2 or 5 times a power of ten giving at most about `target` intervals.
std::vector<double> NiceTicks(double max, int target = 7);

// &, <, >, " and ' as entities.
std::string XmlEscape(const std::string& text);

}  // namespace strata::bench
