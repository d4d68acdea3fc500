// The load-balancing loss across blocks (Note [Router loss], router_loss.h).
#include "src/model/router_loss.h"

#include <torch/autograd.h>

#include <stdexcept>

#include "strata/check.h"

namespace strata::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Identity on the layer's output; its backward also hands the probabilities their gradient.
class RouterGradient : public torch::autograd::Function<RouterGradient> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& out, const torch::Tensor& probs,
                               int64_t loss) {
    ctx->saved_data["loss"] = loss;
    ctx->saved_data["rows"] = probs.size(0);
    return out.view_as(out);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto* loss = reinterpret_cast<const RouterLoss*>(ctx->saved_data["loss"].toInt());
    const int64_t rows = ctx->saved_data["rows"].toInt();
    const torch::Tensor g = loss->ProbGradient(grads[0].device());
    return {grads[0], g.expand({rows, g.size(1)}).contiguous(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor RouterLoss::Record(const torch::Tensor& out, const torch::Tensor& probs, const torch::Tensor& chosen) {
  if (!finished_) {  // the first forward of this micro-batch through the layer
    torch::NoGradGuard no_grad;
    const torch::Tensor t = torch::histc(chosen.reshape({-1}).to(torch::kFloat32), experts_, 0, experts_);
    const torch::Tensor p = probs.detach().to(torch::kFloat32).sum(0);
    tokens_ = tokens_.defined() ? tokens_ + t : t;
    probs_ = probs_.defined() ? probs_ + p : p;
    rows_ += static_cast<double>(probs.size(0));
  }
  if (!torch::GradMode::is_enabled() || !probs.requires_grad()) return out;
  return RouterGradient::apply(out, probs, reinterpret_cast<int64_t>(this));
}

double RouterLoss::Finish(double seed) {
  finished_ = true;
  seed_ = seed;
  if (rows_ == 0) return 0;
  torch::NoGradGuard no_grad;
  if (group_) {  // the rows' whole counts and sums, from every shard of them (equal shards: R x S rows)
    torch::Tensor all = torch::cat({tokens_.cpu(), probs_.cpu()}).contiguous();
    const Status s = group_->AllReduce(all.data_ptr(), static_cast<size_t>(all.numel()), DType::kF32, ReduceOp::kSum);
    if (!s.ok()) throw std::runtime_error("the load-balancing loss's sums over the sequence group: " + s.ToString());
    tokens_ = all.narrow(0, 0, experts_).to(tokens_.device());
    probs_ = all.narrow(0, experts_, experts_).to(probs_.device());
    rows_ *= group_->world_size();
    seed *= group_->world_size();
  }
  // As transformers: the fractions, then E * sum(T / R * P / R), in fp32.
  const torch::Tensor aux = (tokens_ / rows_ * (probs_ / rows_)).sum() * static_cast<double>(experts_);
  gradient_ = (tokens_ * (coef_ * static_cast<double>(experts_) / (rows_ * rows_) * seed)).unsqueeze(0);
  return coef_ * aux.item<double>();
}

torch::Tensor RouterLoss::ProbGradient(const torch::Device& device) const {
  STRATA_CHECK(finished_ && gradient_.defined()) << "a router's backward before its micro-batch's loss was finished";
  return gradient_.to(device);
}

}  // namespace strata::model
