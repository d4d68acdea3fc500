// `strata doctor`: what this machine offers Strata, and every fallback it would take.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "src/cli/commands.h"
#include "strata/io_engine.h"
#include "strata/isa.h"

#ifdef STRATA_HAVE_TORCH
#include <torch/cuda.h>
#include <torch/headeronly/version.h>
#endif

namespace strata::cli {
namespace {

std::string Limit(rlim_t v) { return v == RLIM_INFINITY ? "unlimited" : fmt::format("{} bytes", v); }

int RunDoctor(const std::string& dir) {
  const CpuFeatures& f = DetectCpuFeatures();
  std::printf("CPU ISA:          %s (avx2+fma+f16c %s, avx512 %s, avx512_bf16 %s, avx512_fp16 %s); kernels use %s\n",
              IsaName(DetectedIsa()), f.avx2 ? "yes" : "no", f.avx512 ? "yes" : "no", f.avx512_bf16 ? "yes" : "no",
              f.avx512_fp16 ? "yes" : "no", IsaName(ActiveIsa()));
  std::string bf16_why;
  const bool bf16_native = CpuHasNativeBf16(&bf16_why);
  std::printf("bf16 compute:     %s (%s): bf16.enabled \"auto\" computes in %s on this CPU\n",
              bf16_native ? "native" : "not native", bf16_why.c_str(), bf16_native ? "bf16" : "fp32");
  std::printf("CPU threads:      %ld online\n", sysconf(_SC_NPROCESSORS_ONLN));

  auto ring = MakeUringEngine(8);
  std::printf("io_uring:         %s\n", ring.ok() ? "available" : ("unavailable: " + ring.status().message()).c_str());

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string probe = dir + "/.strata-doctor-probe";
  int fd = open(probe.c_str(), O_CREAT | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
  const int err = errno;
  if (fd >= 0) close(fd);
  unlink(probe.c_str());
  std::printf("swap folder:      %s\n", dir.c_str());
  std::printf("  O_DIRECT:       %s\n", fd >= 0 ? "supported" : fmt::format("refused ({}): the pread engine would be used",
                                                                            std::strerror(err)).c_str());
  struct statvfs vfs {};
  if (statvfs(dir.c_str(), &vfs) == 0)
    std::printf("  free space:     %.1f GiB of %.1f GiB\n", vfs.f_bavail * double(vfs.f_frsize) / (1 << 30),
                vfs.f_blocks * double(vfs.f_frsize) / (1 << 30));
  else
    std::printf("  free space:     unknown (%s)\n", std::strerror(errno));

  rlimit lim{};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  std::printf("pinned memory:    RLIMIT_MEMLOCK soft %s, hard %s%s\n", Limit(lim.rlim_cur).c_str(),
              Limit(lim.rlim_max).c_str(), geteuid() == 0 ? " (root: mlock is not limited)" : "");
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  std::printf("host memory:      %.1f GiB\n", pages * double(page) / (1 << 30));
#ifdef STRATA_HAVE_TORCH
  std::printf("LibTorch:         %d.%d.%d (%s)\n", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH,
              STRATA_CUDA_BUILD ? "torch_cpu + c10 + torch_cuda + c10_cuda" : "torch_cpu + c10");
  const int gpus = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  std::printf("CUDA devices:     %d%s\n", gpus, gpus ? " (strata.device \"auto\" trains on cuda:LOCAL_RANK)" : "");
#else
  std::printf("LibTorch:         not built in (STRATA_WITH_TORCH=OFF)\n");
#endif
  std::printf("CUDA build:       %s\n", STRATA_CUDA_BUILD ? "on" : "off (CPU build; the CUDA sources compiled only)");
  return 0;
}

}  // namespace

void AddDoctorCommand(CLI::App& app, Action* action) {
  auto* cmd = app.add_subcommand("doctor", "what this machine offers: ISA, io_uring, O_DIRECT, free space, "
                                           "pinned-memory limit, LibTorch, CUDA");
  auto dir = std::make_shared<std::string>("/var/tmp/strata");
  cmd->add_option("--dir", *dir, "swap folder to check (nvme_path)")->capture_default_str();
  cmd->callback([=] { *action = [=] { return RunDoctor(*dir); }; });
}

}  // namespace strata::cli
