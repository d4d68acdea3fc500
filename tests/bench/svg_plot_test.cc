// The SVG writer: a well-formed document with one polyline per series and one legend entry per
// queue depth and line style; the sweep's picture has the panels, curves and legend expected.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/io_sweep_plot.h"
#include "bench/svg_plot.h"
#include "tests/bench/sweep_table_util.h"

namespace strata::bench {
namespace {

using testing::FakeTable;

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + what.size())) ++n;
  return n;
}

// Rough XML check: one root, every element closed in order, attributes quoted, no bare '&'.
// Returns "" when well-formed, otherwise what is wrong.
std::string XmlProblem(const std::string& doc) {
  std::vector<std::string> open;
  size_t i = 0, roots = 0;
  while ((i = doc.find('<', i)) != std::string::npos) {
    const size_t end = doc.find('>', i);
    if (end == std::string::npos) return "unterminated tag";
    const std::string tag = doc.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty() || tag[0] == '?' || tag[0] == '!') continue;
    if (Count(tag, "\"") % 2) return "odd quotes in <" + tag + ">";
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return "</" + tag.substr(1) + "> closes nothing open";
      open.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" \n/"));
    if (open.empty()) ++roots;
    if (tag.back() != '/') open.push_back(name);
  }
  if (!open.empty()) return "<" + open.back() + "> never closed";
  if (roots != 1) return "expected one root element";
  for (size_t a = doc.find('&'); a != std::string::npos; a = doc.find('&', a + 1))
    if (doc.compare(a, 4, "&lt;") && doc.compare(a, 4, "&gt;") && doc.compare(a, 5, "&amp;") &&
        doc.compare(a, 6, "&quot;") && doc.compare(a, 6, "&apos;"))
      return "bare &";
  return "";
}

TEST(SvgPlot, WellFormedWithOnePolylinePerSeriesAndLegendEntries) {
  PlotSpec spec;
  spec.title = "reads & writes <GB/s>";
  spec.x_label = "block";
  spec.y_label = "GB/s";
  spec.x_ticks = {{1, "1"}, {4, "4"}, {16, "16"}};
  spec.panels = {{"a", {{"#000", false, {{1, 1}, {4, 2}, {16, 3}}}, {"#111", true, {{1, 0.5}, {16, 2.5}}}}},
                 {"b", {{"#222", false, {{4, 7}}}, {"#333", false, {}}}}};
  spec.legend = {{"one", "#000", false}, {"two", "#111", true}, {"three", "#222", false}};
  const std::string svg = RenderSvg(spec);
  EXPECT_EQ(XmlProblem(svg), "");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_EQ(Count(svg, "<polyline class=\"series\""), 3u);  // the empty series draws nothing
  EXPECT_EQ(Count(svg, "class=\"legend-entry\""), 3u);
  EXPECT_EQ(Count(svg, "class=\"panel\""), 2u);
  EXPECT_EQ(Count(svg, "stroke-dasharray"), 2u);  // one dashed series, one dashed legend line
  EXPECT_NE(svg.find("reads &amp; writes &lt;GB/s&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(SvgPlot, NiceTicksCoverTheMaximumWithRoundSteps) {
  EXPECT_EQ(NiceTicks(3.12), (std::vector<double>{0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5}));
  EXPECT_EQ(NiceTicks(10), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_GE(NiceTicks(0).size(), 2u);  // an empty plot still has an axis
}

TEST(SweepPlot, TwoPanelsWithStoreAndFioCurvesPerQueueDepth) {
  const SweepTable t = FakeTable({{1 << 20, 1, 1.0, 2.0, 0.9, 1.8}, {4 << 20, 1, 1.5, 2.5, 1.4, 2.4},
                                  {1 << 20, 16, 3.0, 3.5, 2.9, 3.6}, {4 << 20, 16, 3.2, 3.6, 3.0, 3.7}});
  const std::string svg = RenderSvg(SweepPlot(t, "test"));
  EXPECT_EQ(XmlProblem(svg), "");
  // 2 panels x 2 queue depths x (store, fio); legend: 2 depths + the two line styles.
  EXPECT_EQ(Count(svg, "<polyline class=\"series\""), 8u);
  EXPECT_EQ(Count(svg, "class=\"legend-entry\""), 4u);
  EXPECT_NE(svg.find(">1M<"), std::string::npos);
  EXPECT_NE(svg.find(">4M<"), std::string::npos);
  EXPECT_NE(svg.find(">read<"), std::string::npos);
  EXPECT_NE(svg.find(">write<"), std::string::npos);
}

TEST(SweepPlot, WithoutFioOnlyTheStoreCurves) {
  const SweepTable t = FakeTable({{1 << 20, 1, 1.0, 2.0}, {4 << 20, 1, 1.5, 2.5}, {1 << 20, 8, 3.0, 3.5}});
  const std::string svg = RenderSvg(SweepPlot(t, "test"));
  EXPECT_EQ(XmlProblem(svg), "");
  EXPECT_EQ(Count(svg, "<polyline class=\"series\""), 4u);
  EXPECT_EQ(Count(svg, "class=\"legend-entry\""), 3u);
  EXPECT_EQ(Count(svg, "stroke-dasharray"), 0u);
}

}  // namespace
}  // namespace strata::bench
