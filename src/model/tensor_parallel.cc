// The collectives and slices of Note [Tensor parallel] as autograd functions.
#include "src/model/tensor_parallel.h"

#include <torch/autograd.h>

#include <stdexcept>
#include <string>

#include "src/model/group_autograd.h"

namespace strata::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;
using namespace group_autograd;

struct EnterFn : torch::autograd::Function<EnterFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x.view_as(x);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grad) {
    return {SumOverGroup(grad[0], GroupOf(ctx), "tensor-parallel input gradient"), torch::Tensor()};
  }
};

struct LeaveFn : torch::autograd::Function<LeaveFn> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x, int64_t group) {
    return SumOverGroup(x, FromHandle(group), "tensor-parallel output");
  }
  static tensor_list backward(AutogradContext*, tensor_list grad) { return {grad[0], torch::Tensor()}; }
};

struct SliceFn : torch::autograd::Function<SliceFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& w, int64_t dim, int64_t first,
                               int64_t count, double scale) {
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["first"] = first;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["sizes"] = w.sizes().vec();
    return w.narrow(dim, first, count);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grad) {
    const std::vector<int64_t> sizes = ctx->saved_data["sizes"].toIntVector();
    const int64_t dim = ctx->saved_data["dim"].toInt(), first = ctx->saved_data["first"].toInt();
    torch::Tensor whole = torch::zeros(sizes, grad[0].options());
    whole.narrow(dim, first, grad[0].size(dim)).copy_(grad[0]).mul_(ctx->saved_data["scale"].toDouble());
    return {whole, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor EnterTensorGroup(const torch::Tensor& x, Communicator& group) { return EnterFn::apply(x, Handle(group)); }

torch::Tensor LeaveTensorGroup(const torch::Tensor& x, Communicator& group) { return LeaveFn::apply(x, Handle(group)); }

torch::Tensor WeightSlice(const torch::Tensor& w, int64_t dim, int64_t first, int64_t count, double scale) {
  return SliceFn::apply(w, dim, first, count, scale);
}

}  // namespace strata::model
