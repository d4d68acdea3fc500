// Note [Delayed update]: strata.optimizer_overlap "delayed" is ZeRO-Offload's one-step
// delayed parameter update (Ren et al. 2021, "ZeRO-Offload", section 5), opt-in because it
// changes the arithmetic: the update of step s, launched when step s's backward is done,
// runs on the optimizer thread during step s+1, whose forward and backward use the weights
// from before it. So step s+1's gradient is taken at the weights of step s-1's update (one
// step stale); step 0 and the step after a Quiesce (a checkpoint, an evaluation: anything
// that reads the whole state) see the latest weights, as a resumed run does.
//
// Why: with the optimizer's states on NVMe its pass moves 18-28 B/param through the disk;
// the exact schedules wait for it after the backward ("forward": the next forward waits
// block by block), so a disk-bound step is backward + the whole pass. Delayed, the pass runs
// beside the next step's whole forward and backward.
//
// How, without a second copy of the weights on disk: the update goes from the last block
// down (the order the backward reaches them). Each block's new working weights go to a
// parking buffer (pools.park, ShardPlan::park_pool) instead of to NVMe, and are written home
// only once the step running beside the update has read the old ones for the last time
// (its last micro-batch's reduction of that block: DoneReading); the update writes them
// (ParkedWrites), and ends once every parked block is written. The step's reduced gradient
// of block b waits until the update has read and zeroed b's accumulator (BeforeAccumulate).
// With the parking pool full the update waits for the backward to release a block; the
// backward waits for the update only where the update is behind it. With gradient
// accumulation the first micro-batch's gradients of every block wait for the update while
// the old weights stay in use until the last one: the pool parks every block. Needs the
// working weights on NVMe (train_config.cc: CheckDelayedUpdate). The steps before
// strata.delayed_update_from run the exact "forward" schedule.
#include <algorithm>
#include <numeric>

#include "src/engine/update/parked_writes.h"
#include "src/engine/update/update_mode.h"

namespace strata {
namespace {

// The parking buffers of one update, as the window takes and fills them.
class Parking final : public ParkingLot {
 public:
  Parking(StateStore& state, std::shared_ptr<ParkedWrites> parked) : state_(state), parked_(std::move(parked)) {}
  StatusOr<PinnedBuffer> Take() override {
    parked_->WaitForRoom();
    std::optional<PinnedBuffer> got = state_.store->AcquireBuffer(*state_.pools.park);
    if (!got) got = state_.pools.park->AcquireFor(std::chrono::minutes(5));  // (a write retired as we looked)
    if (!got) return Status(StatusCode::kInternal, "no parking buffer for the working weights in 5 minutes");
    return std::move(*got);
  }
  void Put(int b, PinnedBuffer weights) override { parked_->Park(b, std::move(weights)); }  // home once the old ones are read

 private:
  StateStore& state_;
  std::shared_ptr<ParkedWrites> parked_;
};

class DelayedUpdate final : public UpdateMode {
 public:
  explicit DelayedUpdate(const UpdateModeParts& m) : m_(m) {}

  // Beside a delayed update the step reads the old weights: it waits for no block.
  bool ComputeWaits() const override { return parked_ == nullptr; }
  bool ReadsStatesEarly() const override { return false; }  // the update starts from the last block
  void DoneReading(int b, const MicroBatch& mb) override {
    if (parked_ && mb.last) parked_->Release(b);  // this step's last read of b is done
  }
  Status BeforeAccumulate(int b) override {  // the update still reading b's accumulator
    return parked_ ? m_.readiness.WaitForUpdate(b, "delayed update") : Status();
  }
  void MicroBatchesEnded() override {
    if (parked_) parked_->ReleaseAll();  // (any block this step did not release, or a failed step's)
  }
  Status Quiesce() override {  // nothing reads the old weights any more: every new one goes home
    if (!parked_) return Status();
    parked_->ReleaseAll();
    for (int b = 0; b < m_.num_blocks(); ++b) STRATA_RETURN_IF_ERROR(BeforeAccumulate(b));
    return Status();
  }

  std::function<Status(UpdateJob&)> Launch(int64_t step, const AdamHyperParams&) override {
    parked_.reset();
    if (step >= m_.delayed_update_from) {
      auto publish = [this](int b, PinnedBuffer buf) {
        (void)m_.state.store->WriteBack(m_.model.blocks[b].working, std::move(buf));  // failures: WriteBackFailure()
      };
      parked_ = std::make_shared<ParkedWrites>(m_.num_blocks(), static_cast<int>(m_.state.pools.park->buffer_count()),
                                               std::move(publish));
    }
    return [this, parked = parked_](UpdateJob& job) -> Status {
      std::vector<int> blocks(m_.num_blocks());
      std::iota(blocks.begin(), blocks.end(), 0);
      if (!parked) {  // before delayed_update_from: the exact schedule
        Status s = m_.window.UpdateBlocks(job.hp, blocks, job.early, job.ready);
        DropStates(job.early);
        return s;
      }
      // From the last block down, the order in which the next backward needs them.
      std::reverse(blocks.begin(), blocks.end());
      Parking lot(m_.state, parked);
      Status s = m_.window.UpdateBlocks(job.hp, blocks, job.early, job.ready, &lot);
      DropStates(job.early);  // not consumed (not expected)
      STRATA_RETURN_IF_ERROR(s);
      parked->Drain();  // written as the next step releases them
      return Status();
    };
  }

 private:
  UpdateModeParts m_;
  std::shared_ptr<ParkedWrites> parked_;  // the latest update's, while it is delayed; else null
};

}  // namespace

std::unique_ptr<UpdateMode> MakeDelayedUpdate(const UpdateModeParts& m) { return std::make_unique<DelayedUpdate>(m); }

}  // namespace strata
