// The all-to-alls of Note [Ulysses] as autograd functions.
#include "src/model/ulysses.h"

#include <torch/autograd.h>

#include <stdexcept>
#include <string>

#include "src/model/group_autograd.h"

namespace strata::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;
using namespace group_autograd;

// send [S, ...]: block j to rank j. Returns [S, ...]: block i from rank i.
torch::Tensor Exchange(const torch::Tensor& send, Communicator& group, const char* what) {
  torch::Tensor recv = torch::empty_like(send);
  const size_t count = static_cast<size_t>(send.numel() / group.world_size());
  const Status s = group.AllToAll(send.data_ptr(), recv.data_ptr(), count, CommType(send, "Ulysses all-to-all"));
  if (!s.ok()) throw std::runtime_error(std::string(what) + ": " + s.ToString());
  return recv;
}

torch::Tensor ToHeads(const torch::Tensor& x, Communicator& group) {
  const int64_t S = group.world_size(), B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  if (H % S != 0)
    throw std::invalid_argument("Ulysses: " + std::to_string(H) + " heads do not split over " + std::to_string(S) +
                                " sequence ranks");
  // Head chunk j goes to rank j; from rank i come its positions of this rank's heads.
  const torch::Tensor send = x.reshape({B, S, H / S, T, D}).permute({1, 0, 2, 3, 4}).contiguous();
  return Exchange(send, group, "sequence to heads").permute({1, 2, 0, 3, 4}).reshape({B, H / S, S * T, D});
}

torch::Tensor ToSequence(const torch::Tensor& x, Communicator& group) {
  const int64_t S = group.world_size(), B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  if (T % S != 0)
    throw std::invalid_argument("Ulysses: " + std::to_string(T) + " positions do not split over " + std::to_string(S) +
                                " sequence ranks");
  // Position chunk j goes to rank j; from rank i come its heads of this rank's positions.
  const torch::Tensor send = x.reshape({B, H, S, T / S, D}).permute({2, 0, 1, 3, 4}).contiguous();
  return Exchange(send, group, "heads to sequence").permute({1, 0, 2, 3, 4}).reshape({B, S * H, T / S, D});
}

struct SequenceToHeadsFn : torch::autograd::Function<SequenceToHeadsFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return ToHeads(x, FromHandle(group));
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grad) {
    return {ToSequence(grad[0], GroupOf(ctx)), torch::Tensor()};
  }
};

struct HeadsToSequenceFn : torch::autograd::Function<HeadsToSequenceFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return ToSequence(x, FromHandle(group));
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grad) {
    return {ToHeads(grad[0], GroupOf(ctx)), torch::Tensor()};
  }
};

struct RowTotalsFn : torch::autograd::Function<RowTotalsFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& partial, int64_t group) {
    ctx->saved_data["group"] = group;
    return SumOverGroup(partial, FromHandle(group), "per-row sums over the sequence group");
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grad) {
    return {grad[0] * static_cast<double>(GroupOf(ctx).world_size()), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor RowTotalsOverGroup(const torch::Tensor& partial, Communicator& group) {
  return RowTotalsFn::apply(partial, Handle(group));
}

torch::Tensor SequenceToHeads(const torch::Tensor& x, Communicator& group) {
  return SequenceToHeadsFn::apply(x, Handle(group));
}

torch::Tensor HeadsToSequence(const torch::Tensor& x, Communicator& group) {
  return HeadsToSequenceFn::apply(x, Handle(group));
}

}  // namespace strata::model
