// What the blocks' collectives as autograd functions share (ulysses.cc, tensor_parallel.cc,
// tiled_loss.cc): a tensor's dtype as a Communicator's, a sum over a group, and a group carried
// in an autograd context from the forward to the backward (the group outlives the graph: it is
// the engine's).
#pragma once

#include <torch/autograd.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "strata/communicator.h"

namespace strata::model::group_autograd {

// `what`: the collective, for the error on a dtype no communicator carries.
inline DType CommType(const torch::Tensor& x, const char* what) {
  switch (x.scalar_type()) {
    case torch::kFloat32: return DType::kF32;
    case torch::kBFloat16: return DType::kBF16;
    case torch::kFloat16: return DType::kF16;
    default: throw std::invalid_argument(std::string(what) + " of a " + c10::toString(x.scalar_type()) + " tensor");
  }
}

// A copy of x summed over `group`, every member getting the same bits; an error names `what`.
inline torch::Tensor SumOverGroup(const torch::Tensor& x, Communicator& group, const char* what) {
  torch::Tensor sum = x.contiguous().clone();
  const Status s = group.AllReduce(sum.data_ptr(), static_cast<size_t>(sum.numel()), CommType(sum, what), ReduceOp::kSum);
  if (!s.ok()) throw std::runtime_error(std::string(what) + ": " + s.ToString());
  return sum;
}

inline int64_t Handle(Communicator& group) { return reinterpret_cast<int64_t>(&group); }
inline Communicator& FromHandle(int64_t handle) { return *reinterpret_cast<Communicator*>(handle); }

// The group a forward saved as saved_data["group"].
inline Communicator& GroupOf(torch::autograd::AutogradContext* ctx) {
  return FromHandle(ctx->saved_data["group"].toInt());
}

}  // namespace strata::model::group_autograd
