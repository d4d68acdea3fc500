#include "strata/isa.h"

#include <cpuid.h>

#include <atomic>
#include <cstdlib>

#include "strata/log.h"

namespace strata {
namespace {

uint64_t ReadXcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures Probe() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & bit_OSXSAVE, fma = c & bit_FMA, f16c = c & bit_F16C;
  if (!osxsave) return f;
  const uint64_t xcr0 = ReadXcr0();
  const bool ymm_os = (xcr0 & 0x6) == 0x6, zmm_os = (xcr0 & 0xe6) == 0xe6;
  const bool amx_os = (xcr0 & (3ull << 17)) == (3ull << 17);  // XTILECFG + XTILEDATA
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = ymm_os && (b & bit_AVX2) && fma && f16c;
  f.avx512 = zmm_os && (b & bit_AVX512F) && (b & bit_AVX512BW) && (b & bit_AVX512VL) && (b & bit_AVX512DQ);
  f.avx512_fp16 = f.avx512 && (d & (1u << 23));
  f.amx_bf16 = amx_os && (d & (1u << 22)) && (d & (1u << 24));  // AMX-BF16 and AMX-TILE
  unsigned a1, b1, c1, d1;
  if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) f.avx512_bf16 = f.avx512 && (a1 & (1u << 5));
  return f;
}

std::atomic<int> g_forced{-1};

}  // namespace

const CpuFeatures& DetectCpuFeatures() {
  static const CpuFeatures features = Probe();
  return features;
}

IsaLevel DetectedIsa() {
  const CpuFeatures& f = DetectCpuFeatures();
  if (f.avx512) return IsaLevel::kAvx512;
  if (f.avx2) return IsaLevel::kAvx2;
  return IsaLevel::kScalar;
}

static IsaLevel Clamp(IsaLevel wanted) {
  IsaLevel have = DetectedIsa();
  if (static_cast<int>(wanted) > static_cast<int>(have)) {
    LogOnce(LogLevel::kWarn, fmt::format("ISA {} requested but this CPU offers only {}; using {}", IsaName(wanted),
                                         IsaName(have), IsaName(have)));
    return have;
  }
  return wanted;
}

IsaLevel ActiveIsa() {
  int forced = g_forced.load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<IsaLevel>(forced);
  static const IsaLevel from_env = [] {
    const char* env = std::getenv("STRATA_FORCE_ISA");
    IsaLevel level = DetectedIsa();
    if (env && *env) {
      if (!ParseIsa(env, &level)) {
        LogOnce(LogLevel::kWarn, fmt::format("STRATA_FORCE_ISA='{}' is not one of scalar, avx2, avx512; ignored", env));
        return DetectedIsa();
      }
      level = Clamp(level);
    }
    if (level == IsaLevel::kScalar) LogOnce(LogLevel::kWarn, "CPU kernels run the scalar path (3-12x slower than SIMD)");
    return level;
  }();
  return from_env;
}

void SetForcedIsa(IsaLevel level) { g_forced.store(static_cast<int>(Clamp(level))); }
void ClearForcedIsa() { g_forced.store(-1); }

bool CpuHasNativeBf16(std::string* why) {
  const CpuFeatures& f = DetectCpuFeatures();
  auto say = [&](std::string text) {
    if (why) *why = std::move(text);
  };
  if (!f.avx512_bf16 && !f.amx_bf16) {
    say(fmt::format("no AVX512-BF16 or AMX-BF16 ({} CPU)", IsaName(DetectedIsa())));
    return false;
  }
  if (ActiveIsa() != IsaLevel::kAvx512) {
    say(fmt::format("STRATA_FORCE_ISA={} hides AVX512-BF16/AMX", IsaName(ActiveIsa())));
    return false;
  }
  say(f.amx_bf16 ? "AMX-BF16" : "AVX512-BF16");
  return true;
}

const char* IsaName(IsaLevel level) {
  switch (level) {
    case IsaLevel::kScalar: return "scalar";
    case IsaLevel::kAvx2: return "avx2";
    case IsaLevel::kAvx512: return "avx512";
  }
  return "?";
}

bool ParseIsa(const std::string& text, IsaLevel* out) {
  if (text == "scalar") *out = IsaLevel::kScalar;
  else if (text == "avx2") *out = IsaLevel::kAvx2;
  else if (text == "avx512") *out = IsaLevel::kAvx512;
  else return false;
  return true;
}

}  // namespace strata
