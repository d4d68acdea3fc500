// Folder-private: the working format, the twin of StateFormat for the working weights: how a
// block's parameters are laid out in its flat group and become the module's parameters again
// on the compute device. Plain weights are the group's elements in the compute dtype; a QLoRA
// base's projections are NF4 blobs (Note [NF4 base]): packed and placed at creation, decoded
// into decode buffers (ShardPlan::decode_slots of plan.max_decoded elements) as a block is
// bound. Everything NF4 of the engine lives here.
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "src/engine/engine_parts.h"
#include "src/model/nf4.h"
#include "strata/status.h"

namespace strata {

class WorkingFormat {
 public:
  // Creation: a block's NF4 weights quantised, by slot index, until its working range is stored.
  using Blobs = std::vector<std::pair<size_t, std::vector<std::byte>>>;

  // Block `br`'s parameters in `flat` (fp32, as MakeBlock laid them out) moved into the
  // group's layout: each NF4 weight quantised into `blobs` and its elements zeroed, its slot's
  // offset, stored elements and decode place set.
  static Status Pack(int b, BlockRuntime& br, const ShardPlan& plan, torch::Tensor& flat, Blobs* blobs);
  // The blobs' bytes copied into block b's working range's compute-dtype values (`working`,
  // from element plan.blocks[b].working.begin of the group).
  static void Place(int b, const BlockRuntime& br, const ShardPlan& plan, const Blobs& blobs, const torch::Tensor& working);

  // The decode buffers on the compute device (counted in `ledger`) and the NF4 code tables.
  Status Allocate(const ShardPlan& plan, torch::Device device, torch::ScalarType compute, MemoryLedger* ledger);
  // Block b's parameters (`br`) bound to its gathered group `full`: plain ones as views of it,
  // NF4 ones dequantised into the next decode buffer on the compute stream, traced (the
  // buffers turn over as the gather buffers do, so each lives until the compute that read it
  // is done).
  void Bind(int b, BlockRuntime& br, const torch::Tensor& full, Tracer* tracer);

 private:
  std::vector<torch::Tensor> decoded_;
  size_t next_decode_ = 0;
  model::Nf4Tables tables_;
};

}  // namespace strata
