#include "bench/pcie_link.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cctype>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>

namespace strata::bench {
namespace {

std::optional<std::string> ReadLine(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::string line;
  if (!f || !std::getline(f, line)) return std::nullopt;
  return line;
}

std::optional<int> ParseWidth(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  try {
    const int w = std::stoi(*text);
    return w > 0 ? std::optional<int>(w) : std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::optional<double> ParseLinkSpeed(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.')) ++pos;
  if (pos == 0 || text.find("GT/s", pos) == std::string::npos) return std::nullopt;
  try {
    const double v = std::stod(text.substr(0, pos));
    return v > 0 ? std::optional<double>(v) : std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

double PcieGbps(double gts, int width) {
  const double efficiency = gts < 8 ? 8.0 / 10.0 : 128.0 / 130.0;
  return gts * efficiency / 8.0 * width;
}

std::string PcieGeneration(double gts) {
  const struct { double gts; const char* name; } kGenerations[] = {
      {2.5, "PCIe 1.0"}, {5, "PCIe 2.0"}, {8, "PCIe 3.0"}, {16, "PCIe 4.0"}, {32, "PCIe 5.0"}, {64, "PCIe 6.0"}};
  for (const auto& g : kGenerations)
    if (gts > g.gts * 0.99 && gts < g.gts * 1.01) return g.name;
  return "PCIe ?";
}

double PcieLink::gbps() const { return PcieGbps(gts, width); }

std::string PcieLink::Describe() const {
  std::string s = fmt::format("{} x{} ({:.1f} GB/s)", PcieGeneration(gts), width, gbps());
  if ((max_gts > gts * 1.01 || max_width > width) && max_gts > 0)
    s += fmt::format("; the device can do {} x{}", PcieGeneration(max_gts), max_width);
  return s;
}

std::optional<PcieLink> ReadPcieLink(const std::string& device_dir) {
  const std::filesystem::path d(device_dir);
  const auto speed = ReadLine(d / "current_link_speed");
  const auto width = ParseWidth(ReadLine(d / "current_link_width"));
  if (!speed || !width) return std::nullopt;
  const auto gts = ParseLinkSpeed(*speed);
  if (!gts) return std::nullopt;
  PcieLink link{*gts, *width};
  if (auto max = ReadLine(d / "max_link_speed")) link.max_gts = ParseLinkSpeed(*max).value_or(0);
  link.max_width = ParseWidth(ReadLine(d / "max_link_width")).value_or(0);
  return link;
}

std::string PciDeviceDir(const std::string& bus_id) {
  std::string id = bus_id;
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return "/sys/bus/pci/devices/" + id;
}

std::optional<PcieLink> BlockDevicePcieLink(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  std::error_code ec;
  std::filesystem::path dev = std::filesystem::canonical(
      fmt::format("/sys/dev/block/{}:{}", major(st.st_dev), minor(st.st_dev)), ec);
  if (ec) return std::nullopt;
  // A virtio disk's PCI function reports no real link (or a nominal one that limits nothing).
  if (dev.string().find("/virtio") != std::string::npos) return std::nullopt;
  // Up from the block device (a partition, the disk, the controller) to the first PCI device.
  for (; dev.has_relative_path() && dev != dev.root_path(); dev = dev.parent_path()) {
    if (std::filesystem::exists(dev / "current_link_speed", ec)) return ReadPcieLink(dev.string());
    if (dev.filename() == "devices") break;
  }
  return std::nullopt;
}

}  // namespace strata::bench
