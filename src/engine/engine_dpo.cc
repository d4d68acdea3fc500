// The engine's side of DPO (Note [DPO], src/model/dpo.h): the reference pass over every row of
// the data, the reference it is given, and the step's pairs summed over the ranks.
#include <algorithm>

#include "src/engine/engine_impl.h"

namespace strata {

void Engine::SetDpoReference(std::vector<double> logps) {
  STRATA_CHECK(impl_->dpo) << "strata.objective is not \"dpo\"";
  impl_->dpo->SetReference(std::move(logps));
}

// Every rank runs every forward (ZeRO-3 gathers each block from all of them), each data rank on
// rows of its own: batch i of a split on data rank r of D holds the split's rows (i * D + r) *
// B .., a rank past the end reading its split's first row with the others (its result unused).
// A tensor group's ranks (Note [Tensor parallel]) read the same rows; the first one's count. A
// sequence group's ranks (Note [Ulysses]) each sum their positions of the same rows: the world's
// sum adds the group's parts.
StatusOr<std::vector<double>> Engine::RowLogProbs(const data::TokenDataset& data,
                                                  const std::function<void(int64_t done, int64_t total)>& on_batch) {
  Impl& m = *impl_;
  STRATA_RETURN_IF_ERROR(m.Quiesce());
  STRATA_RETURN_IF_ERROR(m.FlushRestoringWorking());
  const int64_t world = m.seq.data_ranks(), rank = m.seq.data_rank();
  const int64_t B = m.cfg.micro_batch;
  const auto batches_of = [&](data::Split split) { return (data.rows(split) + B * world - 1) / (B * world); };
  const int64_t total = batches_of(data::Split::kTrain) + batches_of(data::Split::kEval);
  std::vector<float> logps(static_cast<size_t>(data.rows(data::Split::kTrain) + data.rows(data::Split::kEval)), 0.0f);
  int64_t done = 0;
  for (const data::Split split : {data::Split::kTrain, data::Split::kEval}) {
    const int64_t rows = data.rows(split), base = data.first_row(split);
    for (int64_t i = 0; i < batches_of(split); ++i) {
      const int64_t first = (i * world + rank) * B;
      const int64_t count = std::clamp<int64_t>(rows - first, 0, B);
      const data::Batch batch =
          m.seq.Slice(data.RowsInOrder(split, count > 0 ? first : 0, std::max<int64_t>(count, 1), B));
      if (StatusOr<double> ran = m.ForwardOnly(batch, 1.0, Pass::kLogProbs); !ran.ok())
        return ran.status().WithContext("the reference log-probabilities");
      const float* row = m.row_logps.data_ptr<float>();
      if (m.seq.tensor_index() == 0)
        for (int64_t b = 0; b < count; ++b) logps[static_cast<size_t>(base + first + b)] = row[b];
      if (on_batch) on_batch(++done, total);
    }
  }
  // Each row was taken by one rank: the sum is every rank's rows, exactly.
  STRATA_RETURN_IF_ERROR(m.io.comm->AllReduce(logps.data(), logps.size(), DType::kF32, ReduceOp::kSum));
  return std::vector<double>(logps.begin(), logps.end());
}

model::DpoTally Engine::LastEvalDpo() const { return impl_->eval_dpo; }

Status Engine::Impl::CheckDpoReference() const {
  if (dpo && !dpo->has_reference())
    return Error(StatusCode::kFailedPrecondition,
                 "strata.objective \"dpo\": no reference log-probabilities (Engine::SetDpoReference)");
  return Status();
}

StatusOr<model::DpoTally> Engine::Impl::SumOverRanks(const model::DpoTally& tally) {
  // A tensor or sequence group's pairs once (each member computes them alike).
  const model::DpoTally t = seq.tensor_index() == 0 && seq.sequence_index() == 0 ? tally : model::DpoTally{};
  float v[7] = {static_cast<float>(t.pairs),          static_cast<float>(t.chosen_rewards),
                static_cast<float>(t.rejected_rewards), static_cast<float>(t.margins),
                static_cast<float>(t.accuracies),     static_cast<float>(t.chosen_logps),
                static_cast<float>(t.rejected_logps)};
  STRATA_RETURN_IF_ERROR(io.comm->AllReduce(v, 7, DType::kF32, ReduceOp::kSum));
  return model::DpoTally{static_cast<int64_t>(v[0]), v[1], v[2], v[3], v[4], v[5], v[6]};
}

}  // namespace strata
