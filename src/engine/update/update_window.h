// Folder-private: the optimizer's read / update / write window (cf. DeepSpeed's pipelined
// optimizer swapper, but exact): AdamW over blocks, sub-group by sub-group, as one pipeline
// across block boundaries. With the states on NVMe the reads of the next sub-group and the
// write-backs of the previous ones are in flight while one is updated; each block's new
// working weights go home (the cpu tier in place, NVMe or the device through a pinned
// buffer), or to a ParkingLot where the update mode holds them back. Runs on the optimizer
// thread, but for the early reads (ReadStatesEarly), which the compute thread starts during
// the last micro-batch so that the update does not begin by waiting for the disk.
#pragma once

#include <array>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "src/engine/engine_parts.h"
#include "src/engine/update/muon_matrices.h"
#include "src/engine/update/tensor_pieces.h"
#include "strata/cpu_adam.h"
#include "strata/event.h"
#include "strata/pinned_pool.h"

namespace strata {

// One optimizer sub-group's states (master, m, v) being read into pinned buffers. Dropped on
// an error path while its reads are in flight, it waits for them before its buffers go back to
// their pool (a read finishing into a buffer someone else holds would write over their data).
struct LoadedStates {
  const SubGroup* sub = nullptr;
  PinnedBuffer buf[3];
  Event read[3];
  LoadedStates() = default;
  LoadedStates(const LoadedStates&) = delete;
  LoadedStates& operator=(const LoadedStates&) = delete;
  ~LoadedStates() {
    for (Event& t : read) t.Wait().IgnoreError();
  }
};
// Sub-groups' states read before their update, in its order.
using EarlyStates = std::deque<std::unique_ptr<LoadedStates>>;
// Waits for the reads of `states` and returns their buffers.
void DropStates(EarlyStates& states);

// Where the update mode holds new working weights back from their home (the delayed update
// parks them until the step beside it has read the old ones).
class ParkingLot {
 public:
  virtual ~ParkingLot() = default;
  virtual StatusOr<PinnedBuffer> Take() = 0;          // a buffer for the next block's weights
  virtual void Put(int b, PinnedBuffer weights) = 0;  // block b's, complete
};

// What the window uses of the engine: the plan, where it runs (the tracer; the device, for a
// resident block's new weights), the blocks' sub-groups, handles and accumulators, the store
// and its pools, the device's resident weights, and the experts' steps in the update.
struct UpdateWindowParts {
  const ShardPlan& plan;
  const EngineIo& io;
  ModelBlocks& model;
  StateStore& state;
  DeviceBuffers& bufs;
  const ExpertState& experts;
};

class UpdateWindow {
 public:
  explicit UpdateWindow(const UpdateWindowParts& parts) : m_(parts) {}
  ~UpdateWindow() { DropEarlyStates(); }
  // The run's seed (the bf16 copy's stochastic rounding) and the CPU update's OpenMP threads.
  void Configure(uint64_t seed, int threads) {
    seed_ = seed;
    threads_ = threads;
  }

  // AdamW over `blocks` (in this order) with `hp`; `early`: states read ahead, consumed where
  // they are the next ones; ready[b] is set as block b is done; `park`: where the new working
  // weights go (null: home).
  Status UpdateBlocks(const AdamHyperParams& hp, const std::vector<int>& blocks, EarlyStates& early,
                      const std::vector<std::shared_ptr<HostEventState>>& ready, ParkingLot* park = nullptr);

  // The pieces, for modes that update a block their own way (the speculative update):
  // three optim-pool buffers for `sg`'s stored states (Load: and their reads; null where
  // they live in host memory, strata.host_blocks);
  std::unique_ptr<LoadedStates> LeaseStates(const SubGroup& sg);
  std::unique_ptr<LoadedStates> LoadStates(const SubGroup& sg);
  // the stored states of `sg` of block b, from `cur` (its reads waited for) or host memory;
  StatusOr<std::array<std::span<std::byte>, 3>> StateSpans(int b, const SubGroup& sg, LoadedStates* cur);
  // AdamW over one sub-group, its new working weights to `out`, its states written back;
  Status UpdateSubGroup(const AdamHyperParams& hp, int b, const SubGroup& sg, LoadedStates* cur, std::byte* out);
  // where block b's new working weights go, as the address of flat element *first (a lease
  // of `lease`, or in place), and the block done (its weights sent home, or parked).
  StatusOr<std::byte*> BlockOutput(int b, PinnedBuffer* lease, int64_t* first, ParkingLot* park = nullptr);
  Status FinishBlock(int b, PinnedBuffer lease, ParkingLot* park = nullptr);

  // LAMB (Note [LAMB trust ratio]). At creation: each block's tensors and their groups (the
  // model parameters a ratio is over). Compute thread, while no update runs: the norm pass,
  // this rank's sums of p^2 and u^2 per group of each block, read and computed as the update
  // with `hp` will and nothing written; then the ratios the update applies, per block and group.
  void SetTensorGroups(std::vector<TensorGroups> groups) { groups_ = std::move(groups); }
  StatusOr<std::vector<std::vector<LambSums>>> LambNorms(const AdamHyperParams& hp);
  void SetTrustRatios(std::vector<std::vector<float>> ratios) { trust_ = std::move(ratios); }

  // Muon (Note [Muon] in update/muon_matrices.h). At creation: each block's tensors and
  // matrices. Compute thread, while no update runs: the matrices' hyper-parameters of this
  // step (rule kMuon); block by block, u over this rank's pieces of its matrices (the block's
  // flat elements, 0 elsewhere: a buffer of the window's), its states read and nothing
  // written; then this rank's o of the block (its optimizer range: 0 outside the matrices) is
  // written into MuonUpdates(b), which the update reads. Both buffers are the ledger's "Muon
  // updates" (ShardPlan::MuonBytes).
  void SetMuonTensors(std::vector<MuonTensors> tensors);
  const MuonTensors& muon_tensors(int b) const { return muon_[b]; }
  void SetMuonParams(const AdamHyperParams& hp) { muon_hp_ = hp; }
  StatusOr<std::span<float>> MuonDirections(int b);
  std::span<float> MuonUpdates(int b) { return muon_o_[b]; }
  uint64_t MuonBytes() const;  // what SetMuonTensors allocated

  // Compute thread, while no update runs: reads the states of the next NVMe sub-group in
  // update order into free optim-pool buffers (once as the last micro-batch starts, once per
  // block of its backward), best effort, never blocking; Take hands them to the update, Drop
  // returns them.
  void ReadStatesEarly();
  EarlyStates TakeEarlyStates() { return std::exchange(early_, {}); }
  void DropEarlyStates() { DropStates(early_); }

 private:
  struct OutputAhead;
  StatusOr<std::byte*> BlockOutput(int b, PinnedBuffer* lease, int64_t* first, OutputAhead* ahead, ParkingLot* park);
  // Block b's output buffer with the working weights the update replaces (and rebuilds the
  // master from) read into it a block ahead: best effort, only when a pinned buffer is free.
  void ReadOutputAhead(int b, OutputAhead* ahead);
  Event ReadWorkingInto(int b, const PinnedBuffer& buf);
  // A resident block's updated working weights (in `lease`) to the device, off the critical path.
  Status UpdateResident(int b, PinnedBuffer lease);
  // A param-pool buffer, waiting for one where copies to the device hold them all.
  StatusOr<PinnedBuffer> LeaseParamBuffer();
  // The hyper-parameters of sub-group `sg` of block b: `hp` with an expert's own step count
  // (Note [Expert updates]); none where its expert is left as it is this step.
  std::optional<AdamHyperParams> SubGroupParams(const AdamHyperParams& hp, int b, const SubGroup& sg) const;
  // LAMB: `spans` (sub-group `sg` of block b) stepped tensor piece by tensor piece, each with
  // its tensor's trust ratio.
  Status StepTensors(const AdamHyperParams& hp, int b, const SubGroup& sg, const AdamSpans& spans);
  // What AdamStep (and LAMB's norm pass) take for sub-group `sg` of block b: its stored
  // `states`, its working weights at `out`, its accumulated gradient, the rounding seed of
  // Adam step `step`, and strata.no_decay's ranges within it (in `no_decay`, which the spans view).
  AdamSpans SubGroupSpans(int b, const SubGroup& sg, const std::array<std::span<std::byte>, 3>& states, std::byte* out,
                          int64_t step, std::vector<std::pair<size_t, size_t>>* no_decay) const;
  // The norm pass's view of block b's working weights (where the master is read from them).
  StatusOr<std::byte*> WorkingForNorms(int b, PinnedBuffer* lease, int64_t* first);
  Status AddNorms(const AdamHyperParams& hp, int b, const SubGroup& sg, LoadedStates* cur, std::byte* working,
                  std::vector<LambSums>* sums);
  // Muon: `spans` (sub-group `sg` of block b) stepped tensor piece by tensor piece, a matrix's
  // with the matrices' rule and its o, the rest with AdamW (`hp`).
  Status StepMuon(const AdamHyperParams& hp, int b, const SubGroup& sg, const AdamSpans& spans);
  // The passes before an update: fn(b, sg, states) for each of `order`'s sub-groups in turn,
  // the next one's states read (from NVMe) while one is visited; `cur` null where they live in
  // host memory. The buffers go back to their pools unwritten (on an error too, once read).
  using StateVisit = std::function<Status(int b, const SubGroup& sg, LoadedStates* cur)>;
  Status VisitStates(const std::vector<std::pair<int, const SubGroup*>>& order, const StateVisit& fn);

  UpdateWindowParts m_;
  uint64_t seed_ = 0;
  int threads_ = 1;
  EarlyStates early_;
  std::vector<TensorGroups> groups_;         // LAMB: per block
  std::vector<std::vector<float>> trust_;    // LAMB: this step's ratio per block and group
  std::vector<MuonTensors> muon_;            // Muon: per block
  std::vector<std::vector<float>> muon_o_;   // Muon: this rank's o per block (its optimizer range)
  std::vector<float> muon_u_;                // Muon: one block's u (its padded flat elements)
  AdamHyperParams muon_hp_;                  // Muon: the matrices' hyper-parameters this step
};

}  // namespace strata
