// libFuzzer target: the safetensors reader (header length, JSON header, dtypes, shapes,
// data_offsets). The input is a whole file.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "src/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/dev/shm/strata-fuzz-" + std::to_string(getpid()) + ".safetensors";
  const int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  if (fd < 0) return 0;
  const bool written = write(fd, data, size) == static_cast<ssize_t>(size);
  close(fd);
  if (!written) return 0;
  auto f = strata::ckpt::SafetensorsFile::Open(path);
  if (!f.ok()) return 0;
  size_t bytes = 0;
  for (const auto& t : f->tensors()) bytes += t.bytes.size() + static_cast<size_t>(t.numel() > 0);
  return bytes == SIZE_MAX;  // uses the views: their bounds were checked
}
