#include "support/faulty_io_engine.h"

#include <chrono>
#include <thread>

namespace strata::testing {

const Fault* FaultyIoEngine::Match(IoOp op, long index) const {
  for (const Fault& f : faults_)
    if (f.op == op && (f.nth < 0 || f.nth == index)) return &f;
  return nullptr;
}

Status FaultyIoEngine::Submit(std::span<const IoRequest> reqs) {
  std::vector<IoRequest> pass;
  for (const IoRequest& r : reqs) {
    const long index = count_[static_cast<int>(r.op)]++;
    const Fault* f = Match(r.op, index);
    if (!f) {
      pass.push_back(r);
      continue;
    }
    ++injected_;
    switch (f->kind) {
      case FaultKind::kError: synthetic_.push_back({r.tag, -static_cast<int64_t>(f->err)}); break;
      case FaultKind::kEagain: synthetic_.push_back({r.tag, -EAGAIN}); break;
      case FaultKind::kSlow:
        std::this_thread::sleep_for(std::chrono::microseconds(f->delay_us));
        pass.push_back(r);
        break;
      case FaultKind::kShort: {
        IoRequest half = r;
        half.len = r.len / 2 / 4096 * 4096;  // keep O_DIRECT alignment
        if (half.len == 0) pass.push_back(r);
        else pass.push_back(half);
        break;
      }
    }
  }
  return pass.empty() ? Status() : inner_->Submit(pass);
}

Status FaultyIoEngine::Reap(unsigned min_complete, std::vector<IoCompletion>* out) {
  const unsigned have = static_cast<unsigned>(synthetic_.size());
  out->insert(out->end(), synthetic_.begin(), synthetic_.end());
  synthetic_.clear();
  return inner_->Reap(have >= min_complete ? 0 : min_complete - have, out);
}

}  // namespace strata::testing
