// Folder-private. IoPump: the thread that drives an IoEngine. It takes whole-tensor jobs,
// splits them into block-sized requests, keeps up to queue_depth in flight, resubmits short
// and EAGAIN completions, stages unaligned pieces through its own aligned buffers, and
// reports each job's outcome once through its callback (on the pump thread).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "strata/io_engine.h"
#include "strata/nvme_tier.h"

namespace strata {

struct IoJob {
  IoOp op = IoOp::kRead;
  std::byte* user = nullptr;  // caller's memory, any alignment
  uint64_t bytes = 0;
  uint64_t file_offset = 0;   // 4 KiB aligned
  std::string what;           // "tensor 'layer3.m'" for error messages
  std::function<void(const Status&)> on_done;
  // Reads only, optional: each block-sized piece [job_offset, job_offset + len) once it is in
  // the caller's memory, on the pump thread, before on_done (which comes after every piece).
  std::function<void(uint64_t job_offset, uint32_t len)> on_piece;
};

class IoPump {
 public:
  static constexpr size_t kAlign = 4096;  // O_DIRECT alignment of memory, offsets and lengths

  // `staging` holds staging_count buffers of block_size bytes, kAlign-aligned, owned by the caller.
  IoPump(std::unique_ptr<IoEngine> engine, std::string file_path, uint32_t block_size, std::byte* staging,
         size_t staging_count);
  ~IoPump();  // finishes every queued job, then stops

  void Enqueue(IoJob job);
  // Runs `f` on the pump thread (the ring's single issuer) once no request is in flight,
  // and returns its result; jobs queued meanwhile wait. For re-registering buffers, which
  // a single-issuer io_uring accepts only from its issuer.
  Status RunOnPumpThread(std::function<Status(IoEngine&)> f);
  const IoEngine& engine() const { return *engine_; }
  NvmeTierStats stats() const;

 private:
  struct Active;
  struct Slot;
  void Run();
  bool IssueOne(std::vector<IoRequest>* batch);
  void Complete(const IoCompletion& c, std::vector<IoRequest>* batch);
  void SubmitOrFail(std::vector<IoRequest>* batch);

  std::unique_ptr<IoEngine> engine_;
  std::string file_path_;
  uint32_t block_;
  unsigned qd_;
  std::vector<std::byte*> free_staging_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<IoJob> queue_;
  struct Control {
    std::function<Status(IoEngine&)> f;
    Status result;
    bool done = false;
  };
  std::deque<Control*> controls_;  // waiting for the pump to be idle
  std::condition_variable control_done_;
  bool stop_ = false;

  // Pump-thread state.
  std::deque<std::unique_ptr<Active>> active_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<int> free_slots_;
  unsigned in_flight_ = 0;

  std::atomic<uint64_t> bytes_written_{0}, bytes_read_{0}, requests_{0}, resubmissions_{0}, staged_{0};
  std::thread thread_;
};

}  // namespace strata
