// A PCIe link's physical figure, read from sysfs (no NVML, no CUDA): the generation and width
// the device negotiated (current_link_speed, current_link_width) and what it could do
// (max_link_*), turned into GB/s per direction after line encoding.
#pragma once

#include <optional>
#include <string>

namespace strata::bench {

struct PcieLink {
  double gts = 0;        // GT/s per lane now (current_link_speed)
  int width = 0;         // lanes now
  double max_gts = 0;    // what the device supports (0 if unknown)
  int max_width = 0;
  double gbps() const;   // per direction, current link
  std::string Describe() const;  // "PCIe 4.0 x16 (31.5 GB/s)", noting a lower max or a downtrained link
};

// "16.0 GT/s PCIe", "8 GT/s", "2.5 GT/s" -> GT/s; nullopt for "Unknown" or anything else.
std::optional<double> ParseLinkSpeed(const std::string& text);
// GB/s per direction of `width` lanes at `gts`: 8b/10b encoding below 8 GT/s (PCIe 1, 2),
// 128b/130b from 8 GT/s (PCIe 3 to 5; PCIe 6's FLIT mode is close to it).
double PcieGbps(double gts, int width);
// "PCIe 4.0" for 16 GT/s, ...; "PCIe ?" for an unknown rate.
std::string PcieGeneration(double gts);

// Reads the link of the PCI device whose sysfs folder is `device_dir`
// ("/sys/bus/pci/devices/0000:3b:00.0"); nullopt when it has no readable link (a virtual device).
std::optional<PcieLink> ReadPcieLink(const std::string& device_dir);
// The sysfs folder of the PCI device whose bus id ("0000:3B:00.0", any case) is given.
std::string PciDeviceDir(const std::string& bus_id);
// The PCIe link above the block device holding `path` (an NVMe drive's controller); nullopt
// when there is none (a virtio disk, a device-mapper or network file system).
std::optional<PcieLink> BlockDevicePcieLink(const std::string& path);

}  // namespace strata::bench
