// ExtentTier: a tier that keeps tensors outside host memory, as extents it reads and writes
// asynchronously. The TieredStore's kNvme home is one: the rank's swap file (NvmeTier, the
// default); a tier of another kind (GPUDirect storage, a second drive, a remote store) plugs in
// as another implementation (TieredStoreOptions::nvme_tier), and the store's residency,
// write-backs, budgets and parts work over it unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "strata/event.h"
#include "strata/status.h"

namespace strata {

using ExtentId = uint32_t;

class ExtentTier {
 public:
  virtual ~ExtentTier() = default;
  // Reserves an extent for `bytes` (> 0); kResourceExhausted when the tier is full. `packed`:
  // one of many parts of a tensor (the tier may pack such extents more tightly).
  virtual StatusOr<ExtentId> Allocate(const std::string& name, uint64_t bytes, bool packed) = 0;
  // Host memory transfers will use (pinned pools), offered to the tier once (e.g. to register
  // it with the kernel); best effort.
  virtual Status RegisterBuffers(std::span<const std::span<std::byte>> regions) = 0;
  // Writes src (exactly the extent's bytes); `src` stays valid until the event completes.
  virtual Event Write(ExtentId id, std::span<const std::byte> src) = 0;
  // Reads the extent into dst (exactly its bytes); refused if it holds no valid data.
  virtual Event Read(ExtentId id, std::span<std::byte> dst) = 0;
};

}  // namespace strata
