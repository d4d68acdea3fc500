#include "bench/libtorch_reference.h"

#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include "src/model/model.h"

namespace strata::bench {

struct LibTorchReference::State {
  TrainConfig cfg;
  std::shared_ptr<model::FullModel> model;
  std::unique_ptr<torch::optim::AdamW> adam;
};

LibTorchReference::LibTorchReference(std::unique_ptr<State> s) : s_(std::move(s)) {}
LibTorchReference::~LibTorchReference() = default;

StatusOr<std::unique_ptr<LibTorchReference>> LibTorchReference::Create(const TrainConfig& cfg) {
  if (cfg.compute_dtype != DType::kF32)
    return Status(StatusCode::kInvalidArgument, "the LibTorch reference trains in fp32: pass --set bf16.enabled=false");
  auto s = std::make_unique<State>();
  s->cfg = cfg;
  s->model = std::make_shared<model::FullModel>(model::ModelSpec(cfg.model));
  s->adam = std::make_unique<torch::optim::AdamW>(
      s->model->parameters(),
      torch::optim::AdamWOptions(cfg.lr).betas({cfg.beta1, cfg.beta2}).eps(cfg.eps).weight_decay(cfg.weight_decay));
  return std::unique_ptr<LibTorchReference>(new LibTorchReference(std::move(s)));
}

double LibTorchReference::Step(int64_t step, const data::TokenDataset& data) {
  const TrainConfig& c = s_->cfg;
  s_->adam->zero_grad();
  double loss_sum = 0;
  for (int64_t mb = 0; mb < c.grad_accum; ++mb) {
    data::Batch b = data.Get(data::Split::kTrain, static_cast<uint64_t>(step * c.grad_accum + mb), c.micro_batch);
    torch::Tensor loss = model::LanguageModelLoss(s_->model->Forward(b.inputs), b.targets) / c.grad_accum;
    loss.backward();
    loss_sum += loss.item<double>();
  }
  if (c.gradient_clipping > 0) torch::nn::utils::clip_grad_norm_(s_->model->parameters(), c.gradient_clipping);
  s_->adam->step();
  return loss_sum;
}

}  // namespace strata::bench
