// Note [Loss mask]: with a loss mask the loss of a step is
//     sum of the cross-entropy over the trained targets of all micro-batches on all ranks
//     / the number N of those targets,
// not the mean of the micro-batches' means (a micro-batch that is mostly prompt would weigh
// as much as one that is all answer). The engine's gradient pipeline stays as it is: every
// micro-batch's gradient is added times 1 / (A x W) (A micro-batches, W ranks) and the
// reported loss is the sum of the micro-batch losses / (A x W). So micro-batch i's loss is
// its masked mean m_i (n_i trained targets) times w_i = n_i x A x W / N, and
//     sum_i m_i w_i / (A x W) = sum_i (sum of its CE) / N.
// N must be known before the first backward: optimizer_overlap "speculative" updates a
// block as soon as its gradient of the last micro-batch is reduced, and clipping and fp16's
// overflow check read the accumulated gradient as it stands. Every rank holds the whole
// token file and the batches are a pure function of their index (data.h), so each rank
// counts N itself from the mask bytes of all W x A batches of the step (T bytes a row,
// negligible beside a forward), with no collective. The same rule weighs the eval batches.
// Without a mask the engine does not call this at all: the unmasked step is unchanged. A
// mask of all ones gives n_i x A x W == N, so w_i is exactly 1 and the result is bitwise
// the unmasked one. With rows split over sequence groups (Note [Ulysses]) each of the W ranks
// computes its positions' masked mean of a micro-batch that D = W / S data ranks read: its
// weight is its own count n_{i,s} x A x W / N, N over the A x D batches, and the sum over a
// group's ranks is the rows' sum of CE x A x W / N, as above. A tensor group's T ranks
// (Note [Tensor parallel]) each compute the whole batch's masked mean, counted T times in the
// engine's 1 / (A x W): their weights are n_i x A x W / (T x N).
#include "src/engine/loss_weights.h"

namespace strata {

StatusOr<std::vector<double>> BatchLossWeights(const data::TokenDataset& data, data::Split split, uint64_t first,
                                               const MeshPlace& seq, int world,
                                               const std::vector<data::Batch>& batches, int64_t batch_size,
                                               const std::string& what) {
  const auto per_rank = static_cast<int64_t>(batches.size());
  const int data_ranks = seq.data_ranks();
  // N over the A x D batches the data ranks read; each weight's share A x W / T (W = D with
  // whole rows and layers).
  const auto read = static_cast<uint64_t>(per_rank) * static_cast<uint64_t>(data_ranks);
  const auto shares = static_cast<uint64_t>(per_rank) * static_cast<uint64_t>(world / seq.tensor_size());
  const int64_t total = data.LossTokens(split, first, read, batch_size);
  if (total == 0) {
    return InvalidArgument(
        "{}: the loss mask trains no target in any of its {} batches of {} sequences ({}): every sequence drawn is "
        "prompt only. Use a larger batch, a longer seq_len, or data with more completion tokens",
        what, read, batch_size, data.description());
  }
  // This rank's trained targets in its k-th batch: the batch's own, or its positions' of it.
  const std::vector<int64_t> split_counts = seq.size() > 1 ? MeshPlace::TrainedTargets(batches)
                                                           : std::vector<int64_t>();
  std::vector<double> weights(static_cast<size_t>(per_rank));
  for (int64_t k = 0; k < per_rank; ++k) {
    const uint64_t index = first + static_cast<uint64_t>(k * data_ranks + seq.data_rank());
    const int64_t mine = seq.size() > 1 ? split_counts[k] : data.LossTokens(split, index, 1, batch_size);
    weights[k] = static_cast<double>(mine) * static_cast<double>(shares) / static_cast<double>(total);
  }
  return weights;
}

}  // namespace strata
