#include "bench/svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace strata::bench {
namespace {

// Geometry, in SVG user units (pixels).
constexpr double kPlotWidth = 420, kPlotHeight = 320;  // one panel's plotting area
constexpr double kLeft = 78;       // room for the y label and tick labels of the first panel
constexpr double kGap = 64;        // between panels: the next panel's tick labels
constexpr double kTop = 92;        // title, subtitle, panel title
constexpr double kBottom = 64;     // x tick labels and the x label
constexpr double kLegendWidth = 220;
constexpr double kInset = 14;      // keeps the first and last points off the y axes

struct Frame {
  double left, top;
  double x_lo, x_hi;  // log2 of the axis ends
  double y_max;
  double X(double x) const {
    const double span = x_hi > x_lo ? x_hi - x_lo : 1;
    return left + kInset + (std::log2(x) - x_lo) / span * (kPlotWidth - 2 * kInset);
  }
  double Y(double y) const { return top + kPlotHeight - std::clamp(y / y_max, 0.0, 1.0) * kPlotHeight; }
};

std::string Text(double x, double y, const std::string& s, const char* anchor, int size, const char* extra = "") {
  return fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\" font-size=\"{}\"{}>{}</text>\n", x, y, anchor,
                     size, extra, XmlEscape(s));
}

// Grid, axes, tick labels and the panel's title.
std::string PanelFrame(const PlotSpec& spec, const PlotPanel& panel, const Frame& f, const std::vector<double>& yticks) {
  std::string out = fmt::format("<g class=\"panel\">\n<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{}\" height=\"{}\" "
                                "fill=\"#fafafa\" stroke=\"none\"/>\n", f.left, f.top, kPlotWidth, kPlotHeight);
  for (double t : yticks) {
    const double y = f.Y(t);
    out += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#dddddd\"/>\n", f.left, y,
                       f.left + kPlotWidth, y);
    out += Text(f.left - 8, y + 4, fmt::format("{:g}", t), "end", 12);
  }
  for (const auto& [value, label] : spec.x_ticks) {
    const double x = f.X(value);
    out += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#eeeeee\"/>\n", x, f.top, x,
                       f.top + kPlotHeight);
    out += Text(x, f.top + kPlotHeight + 18, label, "middle", 12);
  }
  const double bottom = f.top + kPlotHeight;
  out += fmt::format("<polyline points=\"{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}\" fill=\"none\" stroke=\"#333333\" "
                     "class=\"axes\"/>\n", f.left, f.top, f.left, bottom, f.left + kPlotWidth, bottom);
  out += Text(f.left + kPlotWidth / 2, f.top - 12, panel.title, "middle", 15, " font-weight=\"bold\"");
  out += Text(f.left + kPlotWidth / 2, bottom + 42, spec.x_label, "middle", 13);
  return out + "</g>\n";
}

std::string SeriesLines(const PlotPanel& panel, const Frame& f) {
  std::string out;
  for (const PlotSeries& s : panel.series) {
    if (s.points.empty()) continue;
    std::string pts;
    for (const auto& [x, y] : s.points) pts += fmt::format("{}{:.1f},{:.1f}", pts.empty() ? "" : " ", f.X(x), f.Y(y));
    out += fmt::format("<polyline class=\"series\" points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}/>\n",
                       pts, s.colour, s.dashed ? " stroke-dasharray=\"7 4\"" : "");
    // Hollow dots on dashed lines, so two series through the same point both stay visible.
    const std::string paint = s.dashed ? fmt::format("fill=\"#ffffff\" stroke=\"{}\"", s.colour)
                                       : fmt::format("fill=\"{}\"", s.colour);
    for (const auto& [x, y] : s.points)
      out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" {}/>\n", f.X(x), f.Y(y), s.dashed ? 2.5 : 3.0,
                         paint);
  }
  return out;
}

std::string Legend(const std::vector<LegendEntry>& legend, double left, double top) {
  std::string out;
  for (size_t i = 0; i < legend.size(); ++i) {
    const LegendEntry& e = legend[i];
    const double y = top + 22.0 * static_cast<double>(i);
    out += fmt::format("<g class=\"legend-entry\"><line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" "
                       "stroke=\"{}\" stroke-width=\"2.5\"{}/>", left, y, left + 34, y, e.colour,
                       e.dashed ? " stroke-dasharray=\"7 4\"" : "");
    out += Text(left + 42, y + 4.5, e.label, "start", 13);
    out += "</g>\n";
  }
  return out;
}

double MaxY(const PlotSpec& spec) {
  double m = 0;
  for (const PlotPanel& p : spec.panels)
    for (const PlotSeries& s : p.series)
      for (const auto& pt : s.points) m = std::max(m, pt.second);
  return m;
}

}  // namespace

std::vector<double> NiceTicks(double max, int target) {
  if (!(max > 0)) max = 1;
  const double raw = max / std::max(1, target);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw) {
      step = m * power;
      break;
    }
  std::vector<double> ticks;
  for (int i = 0; ticks.empty() || ticks.back() < max - 1e-12 * max; ++i) ticks.push_back(i * step);
  if (ticks.size() < 2) ticks.push_back(step);
  return ticks;
}

std::string XmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string RenderSvg(const PlotSpec& spec) {
  const size_t n = std::max<size_t>(1, spec.panels.size());
  const double legend_left = kLeft + n * kPlotWidth + (n - 1) * kGap + 28;
  const double width = legend_left + kLegendWidth, height = kTop + kPlotHeight + kBottom;
  const std::vector<double> yticks = NiceTicks(MaxY(spec));
  const double lo = spec.x_ticks.empty() ? 0 : std::log2(spec.x_ticks.front().first);
  const double hi = spec.x_ticks.empty() ? 1 : std::log2(spec.x_ticks.back().first);

  std::string out = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" "
      "height=\"{1:.0f}\" viewBox=\"0 0 {0:.0f} {1:.0f}\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n", width, height);
  out += Text(kLeft, 28, spec.title, "start", 18, " font-weight=\"bold\"");
  out += Text(kLeft, 50, spec.subtitle, "start", 12, " fill=\"#555555\"");
  const double mid_y = kTop + kPlotHeight / 2;
  out += Text(22, mid_y, spec.y_label, "middle", 13, fmt::format(" transform=\"rotate(-90 22 {:.1f})\"", mid_y).c_str());
  for (size_t i = 0; i < spec.panels.size(); ++i) {
    const Frame f{kLeft + i * (kPlotWidth + kGap), kTop, lo, hi, yticks.back()};
    out += PanelFrame(spec, spec.panels[i], f, yticks);
    out += SeriesLines(spec.panels[i], f);
  }
  out += Legend(spec.legend, legend_left, kTop + 10);
  return out + "</svg>\n";
}

}  // namespace strata::bench
