#include "strata/normal.h"

#include <algorithm>

#include "normal_impl.h"
#include "strata/check.h"
#include "strata/isa.h"

namespace strata {
namespace cpu {

void NormalChunksScalar(const uint32_t k[4], uint32_t first_chunk, size_t n, float mean, float std, float* out) {
  NormalChunks(k, first_chunk, n, mean, std, out);
}

}  // namespace cpu

namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t NormalStreamKey(uint64_t seed, uint64_t index) { return SplitMix64(SplitMix64(seed) ^ index); }

void FillNormal(std::span<float> out, float mean, float std, uint64_t key) {
  constexpr size_t kChunk = 2 * cpu::kNormalPairs;
  STRATA_CHECK(out.size() <= (size_t{1} << 33)) << "FillNormal: " << out.size() << " values, at most 2^33 per stream";
  const uint64_t k01 = SplitMix64(key), k23 = SplitMix64(k01);
  const uint32_t k[4] = {static_cast<uint32_t>(k01), static_cast<uint32_t>(k01 >> 32), static_cast<uint32_t>(k23),
                         static_cast<uint32_t>(k23 >> 32)};
  auto chunks = cpu::NormalChunksScalar;
  if (ActiveIsa() == IsaLevel::kAvx512) chunks = cpu::NormalChunksAvx512;
  else if (ActiveIsa() == IsaLevel::kAvx2) chunks = cpu::NormalChunksAvx2;
  const size_t whole = out.size() / kChunk * kChunk;
  chunks(k, 0, whole, mean, std, out.data());
  if (whole < out.size()) {  // the last chunk, cut short
    float tail[kChunk];
    chunks(k, static_cast<uint32_t>(whole / kChunk), kChunk, mean, std, tail);
    std::copy_n(tail, out.size() - whole, out.data() + whole);
  }
}

}  // namespace strata
