#include "bench/io_point.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>

#include "bench/bench_util.h"

namespace strata::bench {

size_t StoreBuffersFor(uint32_t block, unsigned queue_depth, uint64_t tensor_bytes) {
  const uint64_t in_flight = static_cast<uint64_t>(queue_depth) * block;
  const size_t tensors = static_cast<size_t>((in_flight + tensor_bytes - 1) / tensor_bytes);
  return std::max<size_t>(3, tensors + 2);
}

StatusOr<std::unique_ptr<PinnedPool>> MakeBenchPool(size_t count, uint64_t tensor_bytes, HostPages pages) {
  STRATA_ASSIGN_OR_RETURN(auto pool, PinnedPool::Create(count, tensor_bytes, MakeMlockPinner(), pages));
  std::mt19937_64 rng(42);
  auto* words = reinterpret_cast<uint64_t*>(pool->region().data());
  for (size_t i = 0; i < pool->region().size() / 8; ++i) words[i] = rng();
  return pool;
}

// Not just on PATH: it must start. On the GPU machine fio was there but its shared libraries
// were not, and the benches stopped at their first fio pass instead of leaving the anchor out.
bool HaveFio() {
  if (std::system("command -v fio >/dev/null 2>&1") != 0) return false;
  if (std::system("fio --version >/dev/null 2>&1") == 0) return true;
  std::fprintf(stderr, "[strata warn] fio is on PATH but does not start (`fio --version` failed): measuring without it\n");
  return false;
}

IoEngineKind EngineKindFromName(const std::string& name) {
  return name == "uring" ? IoEngineKind::kUring : name == "pread" ? IoEngineKind::kPread : IoEngineKind::kAuto;
}

StatusOr<std::unique_ptr<IoPoint>> IoPoint::Open(const IoPointSettings& s, PinnedPool* pool) {
  if (s.block == 0 || s.block % 4096 || s.tensor_bytes % s.block)
    return InvalidArgument("block size {} must be a multiple of 4096 dividing the tensor size ({} bytes)", s.block,
                           s.tensor_bytes);
  if (s.size < s.tensor_bytes) return InvalidArgument("size must be at least {} bytes", s.tensor_bytes);
  if (pool->buffer_size() < s.tensor_bytes)
    return InvalidArgument("pool buffers of {} bytes are smaller than a tensor ({})", pool->buffer_size(),
                           s.tensor_bytes);
  NvmeTierOptions to;
  to.dir = s.dir;
  to.block_size = s.block;
  to.queue_depth = s.queue_depth;
  to.verify_checksums = s.checksums;
  to.engine = s.engine;
  to.registered_buffers = pool->Regions();
  STRATA_ASSIGN_OR_RETURN(auto tier, NvmeTier::Open(to));
  std::vector<ExtentId> extents;
  for (uint64_t i = 0; i < s.size / s.tensor_bytes; ++i) {
    STRATA_ASSIGN_OR_RETURN(ExtentId e, tier->Allocate(fmt::format("bench.{}", i), s.tensor_bytes));
    extents.push_back(e);
  }
  return std::unique_ptr<IoPoint>(new IoPoint(s, pool, std::move(tier), std::move(extents)));
}

IoPoint::IoPoint(IoPointSettings settings, PinnedPool* pool, std::unique_ptr<NvmeTier> tier,
                 std::vector<ExtentId> extents)
    : settings_(std::move(settings)), pool_(pool), tier_(std::move(tier)), extents_(std::move(extents)) {
  fio_file_ = tier_->folder() + "/fio.bin";
}

IoPoint::~IoPoint() {
  std::error_code ec;
  std::filesystem::remove(fio_file_, ec);
}

StatusOr<double> IoPoint::RingPass(size_t requests,
                                   const std::function<Event(size_t, std::span<std::byte>)>& issue) {
  const size_t count =
      std::min(pool_->buffer_count(), StoreBuffersFor(settings_.block, settings_.queue_depth, settings_.tensor_bytes));
  std::vector<PinnedBuffer> buffers;
  for (size_t i = 0; i < count; ++i) buffers.push_back(pool_->Acquire());
  std::vector<Event> last(buffers.size());
  Status first;
  auto keep_first = [&first](Status s) {
    if (!s.ok() && first.ok()) first = std::move(s);
  };
  const double t0 = NowSeconds();
  for (size_t i = 0; i < requests; ++i) {
    const size_t b = i % buffers.size();
    keep_first(last[b].Wait());
    last[b] = issue(i, std::span<std::byte>(buffers[b].data(), settings_.tensor_bytes));
  }
  for (auto& t : last) keep_first(t.Wait());
  const double dt = NowSeconds() - t0;
  if (!first.ok()) return first;
  return dt;
}

StatusOr<double> IoPoint::StorePass(IoDirection direction) {
  const bool write = direction == IoDirection::kWrite;
  STRATA_ASSIGN_OR_RETURN(double dt, RingPass(extents_.size(), [&](size_t i, std::span<std::byte> mem) {
                            return write ? tier_->Write(extents_[i], mem) : tier_->Read(extents_[i], mem);
                          }));
  return static_cast<double>(bytes()) / dt / 1e9;
}

Status IoPoint::Prepare(bool with_fio) {
  STRATA_RETURN_IF_ERROR(StorePass(IoDirection::kWrite).status());
  if (!with_fio) return Status();
  return RunFio(IoDirection::kWrite, 8u << 20, 16, /*fixed_buffers=*/false).status();
}

StatusOr<double> IoPoint::FioPass(IoDirection direction, FioFlavour flavour) {
  return RunFio(direction, settings_.block, settings_.queue_depth, flavour == FioFlavour::kFixedBuffers);
}

StatusOr<double> IoPoint::RunFio(IoDirection direction, uint32_t block, unsigned queue_depth, bool fixed_buffers) {
  const bool write = direction == IoDirection::kWrite;
  const std::string cmd = fmt::format(
      "exec fio --name=strata-anchor --filename='{}' --size={} --bs={} --iodepth={} --ioengine=io_uring {}--direct=1 "
      "--rw={} --numjobs=1 --group_reporting --output-format=json 2>&1",
      fio_file_, bytes(), block, queue_depth, fixed_buffers ? "--fixedbufs --registerfiles " : "",
      write ? "write" : "read");
  STRATA_ASSIGN_OR_RETURN(nlohmann::json j, RunFioJson(cmd));
  try {
    return j["jobs"][0][write ? "write" : "read"]["bw_bytes"].get<double>() / 1e9;
  } catch (const std::exception& e) {
    return Error(StatusCode::kInternal, "cannot parse fio's JSON: {}", e.what());
  }
}

StatusOr<double> IoPoint::StoreMixedPass() {
  const size_t half = extents_.size() / 2;
  if (half == 0) return InvalidArgument("a reader and a writer at once need at least two tensors");
  // Request i reads extent i/2 (even i) or writes extent half + i/2 (odd i).
  STRATA_ASSIGN_OR_RETURN(double dt, RingPass(2 * half, [&](size_t i, std::span<std::byte> mem) {
                            return i % 2 == 0 ? tier_->Read(extents_[i / 2], mem)
                                              : tier_->Write(extents_[half + i / 2], mem);
                          }));
  return static_cast<double>(2 * half * settings_.tensor_bytes) / dt / 1e9;
}

StatusOr<double> IoPoint::FioMixedPass() {
  const uint64_t half = bytes() / 2 / 4096 * 4096;
  const std::string cmd = fmt::format(
      "exec fio --filename='{}' --size={} --bs={} --iodepth={} --ioengine=io_uring --direct=1 --fixedbufs "
      "--registerfiles --output-format=json --name=reader --rw=read --offset=0 --name=writer --rw=write --offset={} "
      "2>&1",
      fio_file_, half, settings_.block, settings_.queue_depth, half);
  STRATA_ASSIGN_OR_RETURN(nlohmann::json j, RunFioJson(cmd));
  try {
    // Each job's bytes over its own runtime; they start together, and the slower sets the pass.
    double seconds = 0, moved = 0;
    for (const auto& [job, kind] : {std::pair{0, "read"}, std::pair{1, "write"}}) {
      const auto& r = j["jobs"][job][kind];
      moved += r["io_bytes"].get<double>();
      seconds = std::max(seconds, r["runtime"].get<double>() / 1e3);
    }
    if (seconds <= 0) return Error(StatusCode::kInternal, "fio reported no runtime");
    return moved / seconds / 1e9;
  } catch (const std::exception& e) {
    return Error(StatusCode::kInternal, "cannot parse fio's JSON: {}", e.what());
  }
}

Status IoPoint::MixedRound(int round, bool fio, IoSamples* out) {
  for (int k = 0; k < (fio ? 2 : 1); ++k) {
    if (!fio || (round % 2 == 0) == (k == 0)) {  // the store first on even rounds
      STRATA_ASSIGN_OR_RETURN(double v, StoreMixedPass());
      out->store.push_back(v);
    } else {
      STRATA_ASSIGN_OR_RETURN(double v, FioMixedPass());
      out->fio.push_back(v);
    }
  }
  return Status();
}

StatusOr<nlohmann::json> IoPoint::RunFioJson(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return ErrnoError(errno, "cannot run fio");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  const size_t brace = out.find('{');
  if (rc != 0 || brace == std::string::npos)
    return Error(StatusCode::kInternal, "fio failed (exit {}): {}", rc, out.substr(0, 500));
  try {
    return nlohmann::json::parse(out.substr(brace));
  } catch (const std::exception& e) {
    return Error(StatusCode::kInternal, "cannot parse fio's JSON: {}", e.what());
  }
}

Status IoPoint::Round(IoDirection direction, int round, std::span<const FioFlavour> fio, IoSamples* out) {
  // Sides in order: the store, then each fio flavour; reversed on odd rounds.
  const int sides = 1 + static_cast<int>(fio.size());
  for (int k = 0; k < sides; ++k) {
    const int side = round % 2 == 0 ? k : sides - 1 - k;
    if (side == 0) {
      STRATA_ASSIGN_OR_RETURN(double v, StorePass(direction));
      out->store.push_back(v);
    } else {
      const FioFlavour f = fio[side - 1];
      STRATA_ASSIGN_OR_RETURN(double v, FioPass(direction, f));
      (f == FioFlavour::kDefaults ? out->fio : out->fio_fixed).push_back(v);
    }
  }
  return Status();
}

}  // namespace strata::bench
