// The PCIe figure: sysfs's link speed text parsed, encodings applied, and a device folder read.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "bench/pcie_link.h"
#include "support/temp_dir.h"

namespace strata::bench {
namespace {

TEST(PcieLink, ParsesSysfsSpeeds) {
  EXPECT_EQ(ParseLinkSpeed("16.0 GT/s PCIe"), 16.0);
  EXPECT_EQ(ParseLinkSpeed("8 GT/s"), 8.0);
  EXPECT_EQ(ParseLinkSpeed("2.5 GT/s PCIe"), 2.5);
  EXPECT_EQ(ParseLinkSpeed("Unknown"), std::nullopt);
  EXPECT_EQ(ParseLinkSpeed(""), std::nullopt);
  EXPECT_EQ(ParseLinkSpeed("16"), std::nullopt);
}

TEST(PcieLink, BandwidthAfterEncoding) {
  EXPECT_NEAR(PcieGbps(16, 16), 31.51, 0.01);  // PCIe 4.0 x16
  EXPECT_NEAR(PcieGbps(32, 16), 63.02, 0.01);  // PCIe 5.0 x16
  EXPECT_NEAR(PcieGbps(5, 8), 4.0, 1e-9);       // PCIe 2.0 x8, 8b/10b
  EXPECT_EQ(PcieGeneration(32), "PCIe 5.0");
  EXPECT_EQ(PcieGeneration(7), "PCIe ?");
}

TEST(PcieLink, ReadsADeviceFolder) {
  strata::testing::TempDir dir;
  auto put = [&](const char* name, const char* text) { std::ofstream(dir.path() + "/" + name) << text << "\n"; };
  EXPECT_EQ(ReadPcieLink(dir.path()), std::nullopt);  // no link files: a virtual device
  put("current_link_speed", "16.0 GT/s PCIe");
  put("current_link_width", "16");
  put("max_link_speed", "32.0 GT/s PCIe");
  put("max_link_width", "16");
  auto link = ReadPcieLink(dir.path());
  ASSERT_TRUE(link.has_value());
  EXPECT_EQ(link->gts, 16.0);
  EXPECT_EQ(link->width, 16);
  EXPECT_EQ(link->max_gts, 32.0);
  EXPECT_EQ(link->Describe(), "PCIe 4.0 x16 (31.5 GB/s); the device can do PCIe 5.0 x16");
  EXPECT_EQ(PciDeviceDir("0000:3B:00.0"), "/sys/bus/pci/devices/0000:3b:00.0");
}

}  // namespace
}  // namespace strata::bench
