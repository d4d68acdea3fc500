// Communicator::AllToAll's transport-independent form (communicator.h): one all-gather of
// every rank's whole send buffer, from which each rank keeps the blocks addressed to it.
#include <cstring>
#include <vector>

#include "strata/communicator.h"

namespace strata {

Status Communicator::AllToAll(const void* in, void* out, size_t count, DType dtype) {
  const size_t n = static_cast<size_t>(world_size()), block = count * DTypeSize(dtype);
  std::vector<char> gathered(n * n * block);
  STRATA_RETURN_IF_ERROR(AllGather(in, gathered.data(), n * count, dtype).WithContext("all-to-all"));
  for (size_t r = 0; r < n && block > 0; ++r)
    std::memcpy(static_cast<char*>(out) + r * block, gathered.data() + (r * n + static_cast<size_t>(rank())) * block,
                block);
  return Status::Ok();
}

}  // namespace strata
