// libFuzzer target: a checkpoint's manifest.json (and the rank files it lists, absent here:
// each must be a Status). The input is the manifest's text.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "src/checkpoint/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    std::string d = "/dev/shm/strata-fuzz-manifest-" + std::to_string(getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  {
    std::ofstream out(dir + "/manifest.json", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  auto m = strata::ckpt::ReadManifest(dir);
  if (!m.ok()) return 0;
  for (int r = 0; r < (*m)["world_size"].get<int>() && r < 4; ++r) (void)strata::ckpt::OpenRankFile(dir, *m, r);
  return 0;
}
