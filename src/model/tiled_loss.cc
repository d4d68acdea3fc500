// Note [Tiled loss]: the untiled head builds the logits of the whole micro-batch, [B*T, V],
// casts them to fp32, and autograd keeps them, their softmax and their gradient: at 32 K tokens
// and a 32 K vocabulary 4.2 GB each, with Qwen's 152 K vocabulary 20 GB, far more than the
// blocks' own activations. Here the loss is one autograd node over `chunk` tokens at a time:
//   forward   per tile: logits = hidden_tile x W^T (compute dtype), in fp32 their logsumexp
//             and the target's logit; the loss sums (lse - picked) over unmasked targets.
//             Saved: hidden, W, the targets and the lse per token (4 B/token), no logits.
//   backward  per tile: the logits again, softmax = exp(logits - lse), minus one at the target,
//             times g / count (zero where masked), cast to the compute dtype as the untiled
//             path's cast does; grad_hidden_tile = that x W, grad_W += that^T x hidden_tile,
//             summed over the tiles in fp32 and cast to W's dtype once.
// With a final soft-cap (Gemma 2) each tile's logits are capped, cap * tanh(z / cap), before
// the fp32 softmax, and the backward multiplies by the cap's derivative, 1 - tanh(z / cap)^2.
// The same arithmetic as LanguageModelLoss except the order of the sums over tokens (the loss,
// and grad_W over tiles): in fp32 within rounding of the untiled loss (tiled_loss_test.cc:
// relative 1e-6 on the loss, 1e-5 on the gradients). In bf16 each tile's grad_W is rounded to
// bf16 before the fp32 sum, where the untiled product rounds once: within bf16 rounding. The
// backward's extra forward GEMM costs 2 x T x C x V more FLOPs per micro-batch (a third more
// for the head), the price of never holding the logits; the tile size is strata.loss_chunk.
//
// Over a tensor group (Note [Tensor parallel]) the head splits over the vocabulary: each rank
// computes its share of every tile's logits (rows first .. of W), the tile's logsumexp from the
// group's partial ones (all-gathered, combined in fp32 in rank order: the same bits on every
// rank) and the target's logit from the one rank whose share holds it (all-reduced); backward,
// each rank's share of grad_hidden is all-reduced, and its rows of grad_W, taken times the
// group's size, are its part of the world's sum.
#include "src/model/tiled_loss.h"

#include <torch/autograd.h>

#include <algorithm>
#include <stdexcept>

#include "src/model/group_autograd.h"
#include "src/model/tensor_parallel.h"
#include "strata/check.h"

namespace strata::model {
namespace {

constexpr int64_t kIgnore = -100;  // as cross_entropy's ignore_index

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Gemma 2's final soft-capping, cap * tanh(logits / cap), in the logits' dtype as transformers
// computes it; cap 0: the logits.
torch::Tensor Capped(const torch::Tensor& logits, double cap) {
  return cap > 0 ? torch::tanh(logits / cap) * cap : logits;
}

// The vocabulary a rank's logits cover: all of it, or its share over a tensor group.
struct VocabShare {
  Communicator* group = nullptr;
  int64_t first = 0, count = 0;
  static VocabShare Of(int64_t vocab, Communicator* group) {
    if (!group) return {nullptr, 0, vocab};
    const TensorShare s = UnevenShareOf(vocab, *group);
    STRATA_CHECK(s.count > 0) << "a vocabulary of " << vocab << " split over " << group->world_size() << " ranks";
    return {group, s.first, s.count};
  }
  // The targets' columns in this share; kIgnore (masked, or another rank's) -> column 0, unused.
  torch::Tensor Local(const torch::Tensor& t) const {
    return group ? (t - first).clamp(0, std::max<int64_t>(count - 1, 0)) : t.clamp_min(0);
  }
  // Whether each target is a column of this share (and not masked).
  torch::Tensor Holds(const torch::Tensor& t) const {
    return group ? (t >= first).logical_and(t < first + count) : t != kIgnore;
  }
};

// x summed over the share's group, or x.
torch::Tensor SumOverVocab(const torch::Tensor& x, const VocabShare& v) {
  return v.group ? group_autograd::SumOverGroup(x, *v.group, "vocabulary-parallel loss") : x;
}

// logsumexp over the vocabulary of each row: this share's [len] combined with the group's.
torch::Tensor WholeLogSumExp(const torch::Tensor& mine, const VocabShare& v) {
  if (!v.group) return mine;
  torch::Tensor all = torch::empty({v.group->world_size(), mine.size(0)}, mine.options());
  const Status s = v.group->AllGather(mine.contiguous().data_ptr(), all.data_ptr(), static_cast<size_t>(mine.numel()),
                                      DType::kF32);
  if (!s.ok()) throw std::runtime_error("vocabulary-parallel loss: " + s.ToString());
  return all.logsumexp(0);
}

class TiledCrossEntropy : public torch::autograd::Function<TiledCrossEntropy> {
 public:
  // hidden [N, C], weight [V, C], targets [N] (kIgnore where masked); `count` the unmasked;
  // `group`: the tensor group the vocabulary splits over (0: none).
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, int64_t chunk, int64_t count, double softcap,
                               int64_t group) {
    const VocabShare v = VocabShare::Of(weight.size(0), reinterpret_cast<Communicator*>(group));
    const torch::Tensor w = v.group ? weight.narrow(0, v.first, v.count) : weight;
    const int64_t n = hidden.size(0);
    torch::Tensor lse = torch::empty({n}, hidden.options().dtype(torch::kFloat32));
    torch::Tensor total = torch::zeros({}, lse.options());
    for (int64_t at = 0; at < n; at += chunk) {
      const int64_t len = std::min(chunk, n - at);
      const torch::Tensor t = targets.narrow(0, at, len);
      const torch::Tensor logits = Capped(torch::linear(hidden.narrow(0, at, len), w), softcap).to(torch::kFloat32);
      const torch::Tensor l = WholeLogSumExp(logits.logsumexp(1), v);
      lse.narrow(0, at, len).copy_(l);
      torch::Tensor picked = logits.gather(1, v.Local(t).unsqueeze(1)).squeeze(1);
      if (v.group) picked = SumOverVocab(picked.masked_fill(v.Holds(t).logical_not(), 0), v);
      total += (l - picked).masked_fill(t == kIgnore, 0).sum();
    }
    ctx->save_for_backward({hidden, weight, targets, lse});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["count"] = count;
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["group"] = group;
    return count > 0 ? total / static_cast<double>(count) : total;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &hidden = saved[0], &weight = saved[1], &targets = saved[2], &lse = saved[3];
    const int64_t chunk = ctx->saved_data["chunk"].toInt(), count = ctx->saved_data["count"].toInt();
    const double softcap = ctx->saved_data["softcap"].toDouble();
    const VocabShare v =
        VocabShare::Of(weight.size(0), reinterpret_cast<Communicator*>(ctx->saved_data["group"].toInt()));
    const torch::Tensor w = v.group ? weight.narrow(0, v.first, v.count) : weight;
    const torch::Tensor g = count > 0 ? grads[0].to(torch::kFloat32) / static_cast<double>(count) : grads[0] * 0;
    torch::Tensor grad_hidden = torch::empty_like(hidden);
    torch::Tensor grad_w = torch::zeros(w.sizes(), w.options().dtype(torch::kFloat32));
    const int64_t n = hidden.size(0);
    for (int64_t at = 0; at < n; at += chunk) {
      const int64_t len = std::min(chunk, n - at);
      const torch::Tensor t = targets.narrow(0, at, len), h = hidden.narrow(0, at, len);
      const torch::Tensor z = torch::linear(h, w);
      torch::Tensor p = (Capped(z, softcap).to(torch::kFloat32) - lse.narrow(0, at, len).unsqueeze(1)).exp_();
      const torch::Tensor index = v.Local(t).unsqueeze(1);
      p.scatter_add_(1, index, v.group ? -v.Holds(t).to(torch::kFloat32).unsqueeze(1)  // minus one at a target here
                                       : torch::full(index.sizes(), -1.0, p.options()));
      p.mul_((t != kIgnore).to(torch::kFloat32).unsqueeze(1) * g);
      if (softcap > 0) p.mul_(1 - torch::tanh(z / softcap).to(torch::kFloat32).square());  // d cap*tanh(z/cap) / dz
      const torch::Tensor d = p.to(hidden.scalar_type());
      grad_hidden.narrow(0, at, len).copy_(SumOverVocab(torch::mm(d, w), v));
      grad_w += torch::mm(d.t(), h).to(torch::kFloat32);
    }
    torch::Tensor grad_weight = grad_w;
    if (v.group) {  // this share's rows of the whole gradient, times the group's size (Note [Tensor parallel])
      grad_weight = torch::zeros(weight.sizes(), grad_w.options());
      grad_weight.narrow(0, v.first, v.count).copy_(grad_w).mul_(static_cast<double>(v.group->world_size()));
    }
    return {grad_hidden,     grad_weight.to(weight.scalar_type()), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor TiledLanguageModelLoss(const torch::Tensor& hidden, const torch::Tensor& weight,
                                     const torch::Tensor& targets, const torch::Tensor& mask, int64_t chunk,
                                     double softcap, Communicator* vocab_group) {
  STRATA_CHECK(hidden.dim() == 3 && targets.dim() == 2 && hidden.sizes().slice(0, 2) == targets.sizes() &&
               weight.dim() == 2 && weight.size(1) == hidden.size(2) && chunk > 0)
      << "hidden " << hidden.sizes() << " weight " << weight.sizes() << " targets " << targets.sizes() << " chunk "
      << chunk;
  STRATA_CHECK(!mask.defined() || (mask.sizes() == targets.sizes() && mask.scalar_type() == torch::kBool))
      << "mask " << mask.sizes();
  const int64_t n = targets.numel();
  torch::Tensor t = targets.reshape({n});
  int64_t count = n;
  if (mask.defined()) {
    t = t.masked_fill(mask.reshape({n}).logical_not(), kIgnore);
    count = mask.sum().item<int64_t>();
  }
  return TiledCrossEntropy::apply(hidden.reshape({n, hidden.size(2)}), weight, t, chunk, count, softcap,
                                  reinterpret_cast<int64_t>(vocab_group));
}

}  // namespace strata::model
