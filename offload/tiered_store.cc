#include "strata/tiered_store.h"

#include <sys/mman.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "strata/check.h"
#include "strata/log.h"
#include "strata/pinned_pool.h"

namespace strata {

const char* TierName(Tier tier) { return tier == Tier::kCpu ? "cpu" : tier == Tier::kNvme ? "nvme" : "device"; }

enum class Residency { kZero, kResident, kFailed };

// A write in flight that holds the pinned buffer its bytes come from.
struct TieredStore::WriteBackRecord {
  uint32_t tensor = 0;
  Event event;
  PinnedBuffer lease;
  int copying = 0;  // reads served from the lease right now: it is not released (retired) meanwhile
};

struct TieredStore::Entry {
  std::string name;
  uint64_t bytes = 0;
  Tier home = Tier::kCpu;
  Residency residency = Residency::kZero;
  std::byte* cpu = nullptr;  // kCpu home
  bool pinned = false;
  // Where its parts begin (bytes; empty: one part) and, on NVMe, each part's extent.
  std::vector<uint64_t> parts;
  std::vector<ExtentId> extents;
  int num_parts() const { return parts.empty() ? 1 : static_cast<int>(parts.size()); }
  std::pair<uint64_t, uint64_t> part(int i) const {
    if (parts.empty()) return {0, bytes};
    return {parts[i], i + 1 < static_cast<int>(parts.size()) ? parts[i + 1] : bytes};
  }
  // fn(index, first byte, end byte) for each of `which` parts, or for every part when none are.
  template <typename Fn>
  void ForParts(std::span<const int> which, Fn&& fn) const {
    if (which.empty()) {
      for (int i = 0; i < num_parts(); ++i) fn(i, part(i).first, part(i).second);
    } else {
      for (int i : which) fn(i, part(i).first, part(i).second);
    }
  }
  std::shared_ptr<WriteBackRecord> pending;  // this tensor's write-back in flight
};

struct TieredStore::State {
  mutable std::mutex mu;
  std::deque<Entry> entries;  // stable addresses
  std::unordered_map<std::string, uint32_t> by_name;
  uint64_t used[kNumTiers] = {};  // by Tier (kDevice unused)
  std::deque<std::shared_ptr<WriteBackRecord>> writes;  // write-backs not yet retired, oldest first
  Status first_failure;  // the first write-back that failed: its bytes exist nowhere else now
};

TieredStore::TieredStore(TieredStoreOptions options) : options_(std::move(options)), state_(std::make_unique<State>()) {
  if (!options_.cpu_pinner) options_.cpu_pinner = MakeMlockPinner();
}

TieredStore::~TieredStore() {
  FlushWrites().IgnoreError();  // failures were logged; the leases go back to their pools
  swap_file_ = nullptr;
  nvme_.reset();                // waits for in-flight I/O first (the swap file's destructor)
  for (Entry& e : state_->entries) {
    if (e.pinned) options_.cpu_pinner->Unpin(e.cpu, e.bytes);
    FreeHostMemory(e.cpu, e.bytes);
  }
}

StatusOr<std::unique_ptr<TieredStore>> TieredStore::Create(TieredStoreOptions options) {
  std::unique_ptr<TieredStore> store(new TieredStore(options));
  if (options.nvme_tier) {
    store->nvme_ = options.nvme_tier;
  } else if (options.enable_nvme) {
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<NvmeTier> swap, NvmeTier::Open(options.nvme));
    store->swap_file_ = swap.get();
    store->nvme_ = std::move(swap);
  }
  return store;
}

StatusOr<TensorHandle> TieredStore::Register(const std::string& name, uint64_t bytes, Tier home,
                                             HostPinning pinning, std::vector<uint64_t> parts) {
  State& st = *state_;
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.by_name.count(name)) return Error(StatusCode::kAlreadyExists, "tensor '{}' is already registered", name);
  if (bytes == 0) return InvalidArgument("tensor '{}' has 0 bytes", name);
  if (home == Tier::kDevice) return InvalidArgument("tensor '{}': the store keeps the cpu and nvme tiers only", name);
  const int tier = static_cast<int>(home);
  const uint64_t budget = budget_bytes(home);
  if (st.used[tier] + bytes > budget)
    return Error(StatusCode::kResourceExhausted,
                 "tensor '{}' ({} bytes) does not fit the {} tier: {} of its {} bytes budget are used", name, bytes,
                 TierName(home), st.used[tier], budget);
  for (size_t i = 0; i < parts.size(); ++i)
    if ((i == 0 && parts[0] != 0) || (i > 0 && parts[i] <= parts[i - 1]) || parts[i] >= bytes)
      return InvalidArgument("tensor '{}': its parts must begin at 0 and ascend within its {} bytes", name, bytes);
  Entry e;
  e.name = name;
  e.bytes = bytes;
  e.home = home;
  if (parts.size() > 1) e.parts = std::move(parts);
  if (home == Tier::kCpu) {
    STRATA_ASSIGN_OR_RETURN(e.cpu, AllocateHostMemory(bytes));
    if (options_.pin_cpu_tier && pinning == HostPinning::kPageLocked) {
      Status pin = options_.cpu_pinner->Pin(e.cpu, bytes);
      e.pinned = pin.ok();
      if (!e.pinned)
        LogOnce(LogLevel::kWarn, fmt::format("cpu tier memory is pageable: {} ({}); raise RLIMIT_MEMLOCK (ulimit -l) "
                                             "to pin it", pin.message(), options_.cpu_pinner->name()));
    }
  } else {
    if (!nvme_)
      return Error(StatusCode::kFailedPrecondition, "tensor '{}' has home nvme but the store has no NVMe tier "
                   "(set nvme_path)", name);
    for (int i = 0; i < e.num_parts(); ++i) {
      const auto [lo, hi] = e.part(i);
      const bool packed = e.num_parts() > 1;
      const std::string extent = packed ? fmt::format("{} part {}", name, i) : name;
      STRATA_ASSIGN_OR_RETURN(ExtentId id, nvme_->Allocate(extent, hi - lo, packed));
      e.extents.push_back(id);
    }
  }
  st.used[tier] += bytes;
  st.entries.push_back(std::move(e));
  const auto index = static_cast<uint32_t>(st.entries.size() - 1);
  st.by_name[name] = index;
  return TensorHandle{index};
}

TieredStore::Entry& TieredStore::Get(TensorHandle t) {
  std::lock_guard<std::mutex> lock(state_->mu);
  STRATA_CHECK(t.index < state_->entries.size()) << "unknown tensor handle " << t.index;
  return state_->entries[t.index];
}
const TieredStore::Entry& TieredStore::Get(TensorHandle t) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  STRATA_CHECK(t.index < state_->entries.size()) << "unknown tensor handle " << t.index;
  return state_->entries[t.index];
}

// Note [Write-backs]: a write-back's lease is released when it is retired, which happens
// on any later call that finds it done and no read copying from it (RetireFinished), when a
// write of the same tensor waits for it, or when AcquireBuffer or FlushWrites wait for it.
// A Read of a tensor whose write-back is in flight copies the lease (the very bytes being
// written) instead of waiting for the write and reading them back from the disk: the
// forward after an update reads the new working weights at memcpy speed, and the disk
// moves them once.
// Note [Known zero]: a registered tensor that was never written is all zeros, and the store
// knows it without storing anything: a Read fills the destination with zeros (no disk I/O,
// no bytes counted by the tier or traced); the first Write or WriteBack makes it a normal
// tensor. So Adam's moments, zero at creation, cost no writes then (8 of the 14 B/param of
// an engine's initial state with fp32 moments) and no reads at the first step. The kCpu
// tier's memory is zero-filled anonymous memory, so CpuMemory of such a tensor is zeros too
// (and from then on the memory is the tensor, whatever the caller writes there).
void TieredStore::Retire(WriteBackRecord& w) {  // with state_->mu held, w.event done
  Entry& e = state_->entries[w.tensor];
  if (Status s = w.event.Wait(); !s.ok()) {
    e.residency = Residency::kFailed;
    LogError("write-back of tensor '{}' failed; it will be refused on read: {}", e.name, s.message());
    if (state_->first_failure.ok())
      state_->first_failure = s.WithContext(fmt::format("write-back of tensor '{}'", e.name));
  }
  w.lease.Release();
  if (e.pending.get() == &w) e.pending.reset();
}

void TieredStore::RetireFinished() {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto& writes = state_->writes;
  for (auto it = writes.begin(); it != writes.end();) {
    if ((*it)->event.Ready() && (*it)->copying == 0) {
      Retire(**it);
      it = writes.erase(it);
    } else {
      ++it;
    }
  }
}

void TieredStore::WaitForWriteBack(TensorHandle t) {
  std::shared_ptr<WriteBackRecord> w;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    STRATA_CHECK(t.index < state_->entries.size()) << "unknown tensor handle " << t.index;
    w = state_->entries[t.index].pending;
  }
  if (w && !w->event.Ready()) {
    const auto start = std::chrono::steady_clock::now();
    w->event.Wait().IgnoreError();  // its outcome is recorded when retired, below
    if (options_.on_wait) options_.on_wait("write-back " + name(t), start, std::chrono::steady_clock::now());
  }
  if (w) RetireFinished();
}

Event TieredStore::Write(TensorHandle t, std::span<const std::byte> src) {
  WaitForWriteBack(t);
  Entry& e = Get(t);
  STRATA_CHECK(src.size() == e.bytes) << "write of " << src.size() << " bytes to tensor '" << e.name << "' of "
                                      << e.bytes;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    e.residency = Residency::kResident;  // a failure of an NVMe write is caught by the tier's own check
  }
  if (e.home == Tier::kCpu) {
    std::memcpy(e.cpu, src.data(), e.bytes);
    return Event();
  }
  return NvmeWrite(e, src);
}

Event TieredStore::NvmeWrite(const Entry& e, std::span<const std::byte> src) {
  EventList events;
  e.ForParts({}, [&](int i, uint64_t lo, uint64_t hi) {
    events.push_back(nvme_->Write(e.extents[i], src.subspan(lo, hi - lo)));
  });
  return AllOf(std::move(events));
}

Event TieredStore::NvmeRead(const Entry& e, std::span<std::byte> dst, std::span<const int> parts) {
  EventList events;
  e.ForParts(parts, [&](int i, uint64_t lo, uint64_t hi) {
    events.push_back(nvme_->Read(e.extents[i], dst.subspan(lo, hi - lo)));
  });
  return AllOf(std::move(events));
}

Event TieredStore::WriteBack(TensorHandle t, PinnedBuffer lease) {
  WaitForWriteBack(t);
  Entry& e = Get(t);
  STRATA_CHECK(lease.valid() && lease.size() >= e.bytes)
      << "write-back of tensor '" << e.name << "' (" << e.bytes << " bytes) from a buffer of " << lease.size();
  if (e.home == Tier::kCpu) {
    std::memcpy(e.cpu, lease.data(), e.bytes);
    std::lock_guard<std::mutex> lock(state_->mu);
    e.residency = Residency::kResident;
    return Event();  // the lease goes back now
  }
  auto w = std::make_shared<WriteBackRecord>();
  w->tensor = t.index;
  w->event = NvmeWrite(e, {lease.data(), e.bytes});
  w->lease = std::move(lease);
  std::lock_guard<std::mutex> lock(state_->mu);
  e.residency = Residency::kResident;
  e.pending = w;
  state_->writes.push_back(w);
  return w->event;
}

Event TieredStore::Read(TensorHandle t, std::span<std::byte> dst) { return ReadParts(t, dst, {}); }

Event TieredStore::ReadParts(TensorHandle t, std::span<std::byte> dst, std::span<const int> parts) {
  if (ReadFromWriteBack(t, dst, parts)) return Event();
  WaitForWriteBack(t);
  Entry& e = Get(t);
  STRATA_CHECK(dst.size() == e.bytes) << "read of " << dst.size() << " bytes from tensor '" << e.name << "' of "
                                      << e.bytes;
  for (int i : parts) STRATA_CHECK(i >= 0 && i < e.num_parts()) << "tensor '" << e.name << "' has no part " << i;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (e.residency == Residency::kFailed)
      return Event::Failed(Error(StatusCode::kDataLoss, "tensor '{}' holds no valid data: its last write failed",
                                  e.name));
    if (e.residency == Residency::kZero) {  // Note [Known zero]
      e.ForParts(parts, [&](int, uint64_t lo, uint64_t hi) { std::memset(dst.data() + lo, 0, hi - lo); });
      return Event();
    }
  }
  if (e.home == Tier::kCpu) {
    e.ForParts(parts, [&](int, uint64_t lo, uint64_t hi) { std::memcpy(dst.data() + lo, e.cpu + lo, hi - lo); });
    return Event();
  }
  return NvmeRead(e, dst, parts);
}

bool TieredStore::ReadFromWriteBack(TensorHandle t, std::span<std::byte> dst, std::span<const int> parts) {
  std::shared_ptr<WriteBackRecord> w;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    STRATA_CHECK(t.index < state_->entries.size()) << "unknown tensor handle " << t.index;
    const Entry& e = state_->entries[t.index];
    if (!e.pending || e.pending->event.Ready()) return false;  // done: read it back as usual
    STRATA_CHECK(dst.size() == e.bytes) << "read of " << dst.size() << " bytes from tensor '" << e.name << "' of "
                                        << e.bytes;
    w = e.pending;
    ++w->copying;
  }
  Get(t).ForParts(parts, [&](int, uint64_t lo, uint64_t hi) {
    std::memcpy(dst.data() + lo, w->lease.data() + lo, hi - lo);
  });
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    --w->copying;
  }
  RetireFinished();
  return true;
}

std::optional<PinnedBuffer> TieredStore::AcquireBuffer(PinnedPool& pool) {
  while (true) {
    RetireFinished();
    if (std::optional<PinnedBuffer> b = pool.TryAcquire()) return b;
    std::shared_ptr<WriteBackRecord> oldest;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      for (const auto& w : state_->writes)
        if (w->lease.pool() == &pool) {
          oldest = w;
          break;
        }
    }
    if (!oldest) return std::nullopt;
    if (oldest->event.Ready()) {  // written, but a read still copies from it: a moment
      std::this_thread::yield();
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    oldest->event.Wait().IgnoreError();  // recorded when retired
    if (options_.on_wait)
      options_.on_wait("write-back " + name(TensorHandle{oldest->tensor}) + " (buffers)", start,
                       std::chrono::steady_clock::now());
  }
}

bool TieredStore::WriteInFlight(TensorHandle t) {
  std::lock_guard<std::mutex> lock(state_->mu);
  STRATA_CHECK(t.index < state_->entries.size()) << "unknown tensor handle " << t.index;
  const auto& w = state_->entries[t.index].pending;
  return w && !w->event.Ready();
}

Status TieredStore::FlushWrites() {
  std::vector<std::shared_ptr<WriteBackRecord>> all;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    all.assign(state_->writes.begin(), state_->writes.end());
  }
  for (const auto& w : all) w->event.Wait().IgnoreError();  // Retire records the first failure
  RetireFinished();
  return WriteBackFailure();
}

Status TieredStore::WriteBackFailure() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->first_failure;
}

std::span<std::byte> TieredStore::CpuMemory(TensorHandle t) {
  Entry& e = Get(t);
  STRATA_CHECK(e.home == Tier::kCpu) << "tensor '" << e.name << "' does not live in the cpu tier";
  std::lock_guard<std::mutex> lock(state_->mu);
  if (e.residency == Residency::kZero) e.residency = Residency::kResident;  // zeros until the caller writes there
  return {e.cpu, e.bytes};
}

Status TieredStore::RegisterIoBuffers(std::span<const std::span<std::byte>> regions) {
  return nvme_ ? nvme_->RegisterBuffers(regions) : Status();
}

StatusOr<TensorHandle> TieredStore::Find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->by_name.find(name);
  if (it == state_->by_name.end()) return Error(StatusCode::kNotFound, "no tensor named '{}' in the store", name);
  return TensorHandle{it->second};
}

const std::string& TieredStore::name(TensorHandle t) const { return Get(t).name; }
uint64_t TieredStore::bytes(TensorHandle t) const { return Get(t).bytes; }
int TieredStore::num_parts(TensorHandle t) const { return Get(t).num_parts(); }
std::pair<uint64_t, uint64_t> TieredStore::part(TensorHandle t, int i) const { return Get(t).part(i); }
Tier TieredStore::home(TensorHandle t) const { return Get(t).home; }
uint64_t TieredStore::used_bytes(Tier tier) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->used[static_cast<int>(tier)];
}
uint64_t TieredStore::budget_bytes(Tier tier) const {
  return tier == Tier::kCpu ? options_.cpu_budget_bytes : options_.nvme_budget_bytes;
}

}  // namespace strata
