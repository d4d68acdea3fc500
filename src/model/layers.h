// Folder-private building blocks of the GPT-2 and LLaMA blocks: leaf modules that own
// parameters (Linear, Embedding, LayerNorm, RmsNorm), causal attention, RoPE, and the
// per-block initialisation.
//
// Note [Block parameters]
// The engine flattens a block's named_parameters() in registration order into one flat
// buffer and later re-points every parameter at a view of a gathered buffer
// (param.set_data(view)), possibly in bf16 or fp16. So:
//   * parameters are registered in a fixed order, that of execution (gpt2.cc, llama.cc);
//     the flat layout is that order, except that LoRA adapters (lora_A, lora_B) all go to
//     the end of it, after every base parameter: [frozen base | trainable adapters], so
//     that the trainable part of a block is one range (the optimizer's and the gradients');
//   * nothing else is state: RoPE tables and causal masks are recomputed in every Forward;
//   * every Forward reads its tensors through the registered handles (never a cached
//     copy) and computes in their dtype;
//   * leaves are created empty and filled by InitialiseBlock from draws keyed by (seed,
//     block index) only, never from the global RNG (nn::Linear's constructor would draw
//     from it, which is why these leaves exist).
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>

#include "src/model/block_context.h"
#include "src/model/model.h"
#include "src/model/packed_sequences.h"
#include "src/model/tensor_parallel.h"
#include "src/model/ulysses.h"
#include "strata/check.h"
#include "strata/normal.h"

namespace strata::model::detail {

// Where the parameters of the block being made go: consecutive ranges of a caller's fp32
// buffer (MakeBlock's `storage`), or fresh tensors when none is set. Per thread, so blocks
// can be made on several threads at once.
class ParameterArena {
 public:
  // Base parameters are taken from element 0 on, adapters from `adapters_begin` on.
  ParameterArena(torch::Tensor storage, int64_t adapters_begin)
      : storage_(std::move(storage)), adapter_offset_(adapters_begin), base_end_(adapters_begin) {}
  // The next numel(shape) elements as a plain tensor of that shape sharing the storage (not
  // an autograd view: the engine later re-points it with set_data).
  torch::Tensor Take(at::IntArrayRef shape) { return TakeAt(offset_, base_end_, shape); }
  torch::Tensor TakeAdapter(at::IntArrayRef shape) { return TakeAt(adapter_offset_, storage_.numel(), shape); }
  static ParameterArena*& Current() {
    static thread_local ParameterArena* current = nullptr;
    return current;
  }

 private:
  torch::Tensor TakeAt(int64_t& offset, int64_t end, at::IntArrayRef shape) {
    const int64_t numel = c10::multiply_integers(shape);
    STRATA_CHECK(offset + numel <= end) << "block parameters exceed their storage (" << end << " elements)";
    torch::Tensor t = torch::empty({0}, torch::kFloat32);
    t.set_(storage_.storage(), storage_.storage_offset() + offset, shape, c10::contiguous_strides(shape));
    offset += numel;
    return t;
  }
  torch::Tensor storage_;
  int64_t offset_ = 0, adapter_offset_ = 0, base_end_ = 0;
};

// A block's weight draws: each normally initialised tensor from a stream of its own, keyed
// by the block's seed and the tensor's order among the block's draws (strata/normal.h). A
// block's weights depend on (seed, index) only, and are drawn 2-3x faster than with
// LibTorch's normal_ (serial mt19937), which bound the start-up of billion-parameter models.
class WeightDraws {
 public:
  explicit WeightDraws(uint64_t block_seed) : seed_(block_seed) {}
  void Normal(const torch::Tensor& t, double std) {
    STRATA_CHECK(t.scalar_type() == torch::kFloat32 && t.is_contiguous() && t.device().is_cpu())
        << "weights are drawn into contiguous fp32 host tensors";
    FillNormal({t.data_ptr<float>(), static_cast<size_t>(t.numel())}, 0.0f, static_cast<float>(std),
               NormalStreamKey(seed_, next_++));
  }

 private:
  uint64_t seed_;
  uint64_t next_ = 0;
};

// A module that owns parameters and knows how to draw them.
class Leaf : public torch::nn::Module {
 public:
  virtual void Initialise(WeightDraws& draws) = 0;
  // LoRA adapters draw from a generator of their own, after the base: the base weights are
  // the same with adapters or without.
  virtual void InitialiseAdapters(at::Generator&) {}

 protected:
  torch::Tensor AddParameter(const std::string& name, at::IntArrayRef shape) {
    ParameterArena* arena = ParameterArena::Current();
    return register_parameter(name, arena ? arena->Take(shape) : torch::empty(shape, torch::kFloat32));
  }
  torch::Tensor AddAdapterParameter(const std::string& name, at::IntArrayRef shape) {
    ParameterArena* arena = ParameterArena::Current();
    return register_parameter(name, arena ? arena->TakeAdapter(shape) : torch::empty(shape, torch::kFloat32));
  }
};

// A layer's MLP, dense (SwiGLU) or a mixture of experts (moe.h).
class FeedForward : public torch::nn::Module {
 public:
  virtual torch::Tensor Forward(const torch::Tensor& x, const BlockContext& ctx) = 0;
};

// A projection's LoRA adapter: rank r, scale alpha / r and dropout on its input; r = 0 for none.
struct Adapter {
  int64_t r = 0;
  double scale = 0, dropout = 0;
};
inline Adapter AdapterFor(const LoraConfig& lora, const char* projection) {
  return lora.enabled() && lora.Targets(projection) ? Adapter{lora.r, lora.scale(), lora.dropout} : Adapter{};
}

// y = x W^T + b with W [out, in] (nn::Linear's layout; HF GPT-2's Conv1D stores [in, out]),
// plus, with an adapter, scale * (x A^T) B^T (PEFT's lora_A [r, in], lora_B [out, r]).
class Linear : public Leaf {
 public:
  Linear(int64_t in, int64_t out, bool bias, double init_std, Adapter adapter = {})
      : init_std_(init_std), scale_(adapter.scale), dropout_(adapter.dropout) {
    weight_ = AddParameter("weight", {out, in});
    if (bias) bias_ = AddParameter("bias", {out});
    if (adapter.r > 0) {
      lora_a_ = AddAdapterParameter("lora_A", {adapter.r, in});
      lora_b_ = AddAdapterParameter("lora_B", {out, adapter.r});
    }
  }
  // `ctx`: LoRA dropout's masks (Note [LoRA dropout]).
  torch::Tensor Forward(const torch::Tensor& x, const BlockContext& ctx) const {
    torch::Tensor y = torch::linear(x, weight_, bias_);
    if (!lora_a_.defined()) return y;
    const torch::Tensor xd = ctx.Dropout(x, dropout_);
    return y + torch::linear(torch::linear(xd, lora_a_), lora_b_) * scale_;
  }
  void Initialise(WeightDraws& draws) override {
    draws.Normal(weight_, init_std_);
    if (bias_.defined()) bias_.zero_();
  }
  // Column-parallel (Note [Tensor parallel]): output features `share` of y alone; with
  // `stack` > 1 (GPT-2's c_attn: q, k, v stacked along the output), those of each of the
  // `stack` equal parts, in order. An adapter adds its delta's rows `share`: B's rows, and A
  // whole, whose gradient here is only this share's part (so taken times the group's size too).
  torch::Tensor ForwardRows(const torch::Tensor& x, TensorShare share, double scale, const BlockContext& ctx,
                            int64_t stack = 1) const {
    const int64_t out = weight_.size(0) / stack, in = weight_.size(1);
    const torch::Tensor w = WeightSlice(weight_.view({stack, out, in}), 1, share.first, share.count, scale);
    torch::Tensor y;
    if (!bias_.defined()) {
      y = torch::linear(x, w.reshape({stack * share.count, in}));
    } else {
      const torch::Tensor b = WeightSlice(bias_.view({stack, out}), 1, share.first, share.count, scale);
      y = torch::linear(x, w.reshape({stack * share.count, in}), b.reshape({stack * share.count}));
    }
    if (!lora_a_.defined()) return y;
    STRATA_CHECK(stack == 1) << "a stacked projection with a LoRA adapter";
    const torch::Tensor a = WeightSlice(lora_a_, 0, 0, lora_a_.size(0), scale);
    const torch::Tensor b = WeightSlice(lora_b_, 0, share.first, share.count, scale);
    return y + torch::linear(torch::linear(ctx.Dropout(x, dropout_), a), b) * scale_;
  }
  // Row-parallel: x holds input features `share`; without the bias, which is added once after
  // the group's sum (AddBias). An adapter adds its part of the delta, summed with the rest by
  // the group: A's columns `share` (dropout's masks those of the whole width's), and B whole,
  // whose gradient here is only this share's part.
  torch::Tensor ForwardColumns(const torch::Tensor& x, TensorShare share, double scale, const BlockContext& ctx) const {
    const torch::Tensor y = torch::linear(x, WeightSlice(weight_, 1, share.first, share.count, scale));
    if (!lora_a_.defined()) return y;
    const torch::Tensor a = WeightSlice(lora_a_, 1, share.first, share.count, scale);
    const torch::Tensor b = WeightSlice(lora_b_, 0, 0, lora_b_.size(0), scale);
    const torch::Tensor xd = ctx.Dropout(x, dropout_, share.first, weight_.size(1));
    return y + torch::linear(torch::linear(xd, a), b) * scale_;
  }
  torch::Tensor AddBias(const torch::Tensor& y) const { return bias_.defined() ? y + bias_ : y; }
  const torch::Tensor& weight() const { return weight_; }  // (LmHead's: no bias, no adapter)
  // As PEFT: A kaiming-uniform (a = sqrt(5): bound 1 / sqrt(in)), B zero, so the adapted
  // model starts as the base.
  void InitialiseAdapters(at::Generator& gen) override {
    if (!lora_a_.defined()) return;
    const double bound = 1.0 / std::sqrt(static_cast<double>(lora_a_.size(1)));
    lora_a_.uniform_(-bound, bound, gen);
    lora_b_.zero_();
  }

 private:
  torch::Tensor weight_, bias_, lora_a_, lora_b_;
  double init_std_, scale_, dropout_;
};

// PEFT's LoRA adapter of one fused tensor of `stack` matrices [out, in]: lora_A [r * stack, in]
// and lora_B [out, r * stack], matrix e's delta weight being scale * B_e A_e with A_e the rows
// e*r .. e*r + r-1 of A and B_e the columns e, stack + e, ..., (r-1)*stack + e of B. Stack E:
// transformers' fused experts (Note [Expert adapters] in moe.h); stack 1: a fused projection
// that Strata keeps apart (Phi-3's qkv_proj, gate_up_proj), its outputs split by the caller.
class StackedAdapter final : public Leaf {
 public:
  StackedAdapter(int64_t stack, int64_t in, int64_t out, Adapter adapter)
      : stack_(stack), r_(adapter.r), out_(out), scale_(adapter.scale), dropout_(adapter.dropout) {
    lora_a_ = AddAdapterParameter("lora_A", {adapter.r * stack, in});
    lora_b_ = AddAdapterParameter("lora_B", {out, adapter.r * stack});
  }
  // Matrix e's delta scale * (x A_e^T) B_e^T ([..., out], with dropout on x: Note [LoRA
  // dropout]) added to `outputs`, each taking as many of its columns as it has, in order.
  void AddTo(const torch::Tensor& x, std::initializer_list<torch::Tensor*> outputs, const BlockContext& ctx,
             int64_t e = 0) const {
    const torch::Tensor a = lora_a_.narrow(0, e * r_, r_);                 // [r, in]
    const torch::Tensor b = lora_b_.view({out_, r_, stack_}).select(2, e);  // [out, r]
    const torch::Tensor d = torch::linear(torch::linear(ctx.Dropout(x, dropout_), a), b) * scale_;
    int64_t at = 0;
    for (torch::Tensor* y : outputs) {
      const int64_t n = y->size(-1);
      *y = *y + d.narrow(-1, at, n);
      at += n;
    }
  }
  void Initialise(WeightDraws&) override {}
  // As PEFT's: A kaiming-uniform (bound 1 / sqrt(in)), B zero.
  void InitialiseAdapters(at::Generator& gen) override {
    const double bound = 1.0 / std::sqrt(static_cast<double>(lora_a_.size(1)));
    lora_a_.uniform_(-bound, bound, gen);
    lora_b_.zero_();
  }

 private:
  torch::Tensor lora_a_, lora_b_;
  int64_t stack_, r_, out_;
  double scale_, dropout_;
};

// A lookup table [rows, dim].
class Embedding : public Leaf {
 public:
  Embedding(int64_t rows, int64_t dim, double init_std) : init_std_(init_std) {
    weight_ = AddParameter("weight", {rows, dim});
  }
  torch::Tensor Forward(const torch::Tensor& index) const { return torch::embedding(weight_, index); }
  const torch::Tensor& weight() const { return weight_; }
  void Initialise(WeightDraws& draws) override { draws.Normal(weight_, init_std_); }

 private:
  torch::Tensor weight_;
  double init_std_;
};

// LayerNorm with weight and bias over the last dimension (GPT-2). LibTorch's CPU kernel
// accumulates in fp32 for bf16/fp16 inputs and returns the input dtype.
class LayerNorm : public Leaf {
 public:
  LayerNorm(int64_t dim, double eps) : dim_(dim), eps_(eps) {
    weight_ = AddParameter("weight", {dim});
    bias_ = AddParameter("bias", {dim});
  }
  torch::Tensor Forward(const torch::Tensor& x) const { return torch::layer_norm(x, {dim_}, weight_, bias_, eps_); }
  void Initialise(WeightDraws&) override {
    weight_.fill_(1.0);
    bias_.zero_();
  }

 private:
  torch::Tensor weight_, bias_;
  int64_t dim_;
  double eps_;
};

// RMSNorm with a weight only (LLaMA). As Hugging Face's LlamaRMSNorm: the statistic and the
// normalisation in fp32, cast back to the input dtype, then scaled by the weight.
class RmsNorm : public Leaf {
 public:
  RmsNorm(int64_t dim, double eps) : eps_(eps) { weight_ = AddParameter("weight", {dim}); }
  torch::Tensor Forward(const torch::Tensor& x) const { return Normed(x, weight_); }
  // Over a tensor-parallel share of the heads (Qwen3's per-head norms, Note [Tensor parallel]):
  // the weight's gradient is this rank's heads' part of the sum, taken times `scale`.
  torch::Tensor ForwardOnShare(const torch::Tensor& x, double scale) const {
    return Normed(x, WeightSlice(weight_, 0, 0, weight_.size(0), scale));
  }
  void Initialise(WeightDraws&) override { weight_.fill_(1.0); }

 private:
  torch::Tensor Normed(const torch::Tensor& x, const torch::Tensor& weight) const {
    torch::Tensor x32 = x.to(torch::kFloat32);
    torch::Tensor normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps_);
    return weight * normed.to(x.scalar_type());
  }

  torch::Tensor weight_;
  double eps_;
};

// Causal self-attention core. q [B, H, T, D]; k, v [B, Hkv, T, D] with H % Hkv == 0
// (grouped-query attention: query head h reads key/value head h / (H / Hkv), as Hugging
// Face's repeat_kv). Returns [B, T, H * D]. LibTorch's CPU SDPA (flash kernel for fp32,
// bf16 and fp16) is deterministic: it splits work over batch and heads only.
// x [B, Hkv, S, D] -> [B, H, S, D]: each key/value head repeated for its H / Hkv query heads.
inline torch::Tensor RepeatKv(const torch::Tensor& x, int64_t H) {
  const int64_t B = x.size(0), Hkv = x.size(1), S = x.size(2), D = x.size(3);
  STRATA_CHECK(H % Hkv == 0) << "H " << H << " Hkv " << Hkv;
  if (Hkv == H) return x;
  return x.unsqueeze(2).expand({B, Hkv, H / Hkv, S, D}).reshape({B, H, S, D});
}

// Note [Grouped-query attention]: with fewer key/value heads than query heads, the kernel
// reads each key/value head for its H / Hkv query heads (SDPA's enable_gqa), instead of the
// heads being copied H / Hkv times first: a [B, H, S, D] copy of k and of v per layer (and, in
// backward, their gradients summed back). LibTorch 2.11's CPU flash kernel takes grouped heads,
// with the same output and query gradient bit for bit, and key/value gradients within 2e-7
// (fp32: the group's sum in another order; in bf16 more exact, summed in fp32 before one
// rounding). Where the kernel SDPA would choose for grouped heads is its math fallback (which
// builds the [T, S] scores and repeats the heads itself; on CUDA in fp32, for one), the heads
// are repeated here and the fused kernel that takes them runs.
// `scale`: the scores' factor (none: 1 / sqrt(D)).
inline torch::Tensor Attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const std::optional<torch::Tensor>& mask, bool causal,
                            std::optional<double> scale = std::nullopt) {
  const int64_t H = q.size(1);
  if (k.size(1) == H) return at::scaled_dot_product_attention(q, k, v, mask, 0.0, causal, scale);
  constexpr int64_t kMathFallback = 0;  // sdp::SDPBackend::math
  if (at::_fused_sdp_choice(q, k, v, mask, 0.0, causal, scale, /*enable_gqa=*/true) != kMathFallback)
    return at::scaled_dot_product_attention(q, k, v, mask, 0.0, causal, scale, /*enable_gqa=*/true);
  return at::scaled_dot_product_attention(q, RepeatKv(k, H), RepeatKv(v, H), mask, 0.0, causal, scale);
}

// With a layout of packed examples, within each example only (Note [Packed sequences]).
inline torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const PackedLayout* packed) {
  if (packed) return PackedCausalAttention(q, k, v, *packed);
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  return Attend(q, k, v, std::nullopt, /*causal=*/true).transpose(1, 2).reshape({B, T, H * D});
}

// CausalAttention over a row split across a sequence group (Note [Ulysses]): q [B, H, T/S, D],
// k, v [B, Hkv, T/S, D] at this rank's positions -> [B, T/S, H * D]. Packed examples attend
// within themselves over the whole rows (`packed`: the whole rows' layout). `attend`: a
// family's own causal attention of whole rows ([B, H/S, T, D] in and out; none: SDPA's).
inline torch::Tensor ShardedCausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                            Communicator& group, const PackedLayout* packed,
                                            const SegmentAttention& attend = {}) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const torch::Tensor qh = SequenceToHeads(q, group), kh = SequenceToHeads(k, group), vh = SequenceToHeads(v, group);
  const torch::Tensor heads =
      packed   ? PackedCausalAttention(qh, kh, vh, *packed, attend).reshape({B, qh.size(2), qh.size(1), D}).transpose(1, 2)
      : attend ? attend(qh, kh, vh)
               : Attend(qh, kh, vh, std::nullopt, /*causal=*/true);
  return HeadsToSequence(heads, group).transpose(1, 2).reshape({B, T, H * D});
}

// CausalAttention for queries at positions past..past+T-1 (past = cache.length()): k, v
// [B, Hkv, T, D] are appended to `cache` and q attends to all of it. SDPA's is_causal aligns
// the mask top-left, which is wrong once keys outnumber queries, so with a past the mask is
// explicit: query i sees keys 0..past+i.
inline torch::Tensor CachedCausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                           KvCache& cache) {
  const int64_t past = cache.length();
  cache.k = past == 0 ? k : torch::cat({cache.k, k}, 2);
  cache.v = past == 0 ? v : torch::cat({cache.v, v}, 2);
  if (past == 0) return CausalAttention(q, k, v, /*packed=*/nullptr);
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  auto i64 = torch::TensorOptions().dtype(torch::kLong).device(q.device());
  torch::Tensor mask = torch::arange(past + T, i64).unsqueeze(0) <= (torch::arange(T, i64) + past).unsqueeze(1);
  return Attend(q, cache.k, cache.v, mask, /*causal=*/false).transpose(1, 2).reshape({B, T, H * D});
}

// RoPE inverse frequencies [D/2] (fp32): theta^(-2j/D), then, with LLaMA 3.1's scaling,
// wavelengths 2*pi/f above original/low_freq_factor divided by `factor`, those below
// original/high_freq_factor kept, and the band between blended linearly in
// original/wavelength (Hugging Face's _compute_llama3_parameters, same fp32 operations).
inline torch::Tensor RopeInverseFrequencies(int64_t D, double theta, const RopeScaling& scaling,
                                            const torch::TensorOptions& f32) {
  if (scaling.longrope()) {  // Phi's: each frequency divided by its factor (transformers' _compute_longrope_parameters)
    const torch::Tensor ext = torch::tensor(std::vector<float>(scaling.short_factor.begin(), scaling.short_factor.end()), f32);
    return 1.0 / (ext * torch::pow(theta, torch::arange(0, D, 2, f32) / static_cast<double>(D)));
  }
  torch::Tensor inv_freq = 1.0 / torch::pow(theta, torch::arange(0, D, 2, f32) / static_cast<double>(D));
  if (scaling.factor == 0) return inv_freq;
  const double original = static_cast<double>(scaling.original_max_positions);
  const double low_wavelen = original / scaling.low_freq_factor, high_wavelen = original / scaling.high_freq_factor;
  torch::Tensor wavelen = 2 * M_PI / inv_freq;
  torch::Tensor scaled = torch::where(wavelen > low_wavelen, inv_freq / scaling.factor, inv_freq);
  torch::Tensor smooth = (original / wavelen - scaling.low_freq_factor) /
                         (scaling.high_freq_factor - scaling.low_freq_factor);
  torch::Tensor blended = (1 - smooth) * scaled / scaling.factor + smooth * scaled;
  torch::Tensor medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
  return torch::where(medium, blended, scaled);
}

// cos and sin of RoPE's angles in the dtype of `like` (longrope: times its attention factor,
// resolved by the caller: RopeAttentionFactor).
inline std::pair<torch::Tensor, torch::Tensor> RopeCosSin(const torch::Tensor& angles, const RopeScaling& scaling,
                                                          const torch::Tensor& like) {
  if (scaling.longrope())
    return {(angles.cos() * scaling.attention_factor).to(like.scalar_type()),
            (angles.sin() * scaling.attention_factor).to(like.scalar_type())};
  return {angles.cos().to(like.scalar_type()), angles.sin().to(like.scalar_type())};
}

// RoPE tables for positions 0..T-1 and head dim D: cos, sin [T, D] with the dtype and
// device of `like`, laid out for the rotate-half convention (frequency j at columns j and
// j + D/2). Computed in fp32 like Hugging Face's LlamaRotaryEmbedding so that imported
// checkpoints behave as there.
// With `past`, the positions are past..past+T-1 (incremental decoding).
inline std::pair<torch::Tensor, torch::Tensor> RopeTables(int64_t T, int64_t D, double theta,
                                                          const torch::Tensor& like,
                                                          const RopeScaling& scaling = {}, int64_t past = 0) {
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(like.device());
  torch::Tensor inv_freq = RopeInverseFrequencies(D, theta, scaling, f32);
  torch::Tensor positions = past == 0 ? torch::arange(T, f32) : torch::arange(past, past + T, f32);
  torch::Tensor freqs = torch::outer(positions, inv_freq);  // [T, D/2]
  return RopeCosSin(torch::cat({freqs, freqs}, -1), scaling, like);  // [T, D]
}

// RopeTables at explicit positions [B, T] (int64, on the device): cos, sin [B, 1, T, D], which
// broadcast over the heads (packed examples, each from position 0: Note [Packed sequences]).
inline std::pair<torch::Tensor, torch::Tensor> RopeTablesAt(const torch::Tensor& positions, int64_t D, double theta,
                                                            const torch::Tensor& like, const RopeScaling& scaling = {}) {
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(like.device());
  torch::Tensor inv_freq = RopeInverseFrequencies(D, theta, scaling, f32);
  torch::Tensor freqs = positions.to(torch::kFloat32).unsqueeze(-1) * inv_freq;  // [B, T, D/2]
  return RopeCosSin(torch::cat({freqs, freqs}, -1).unsqueeze(1), scaling, like);  // [B, 1, T, D]
}

// The positions of T tokens of packed rows from token `first` on: the whole rows' (first 0, T
// their length), or a sequence shard's of them (Note [Ulysses]).
inline torch::Tensor PackedPositions(const PackedLayout& packed, const torch::Device& device, int64_t first,
                                     int64_t T) {
  const torch::Tensor& all = packed.PositionsOn(device);
  return first == 0 && T == packed.length() ? all : all.narrow(1, first, T);
}

// The tables for one attention call on q [B, H, T, D] of tokens past..past+T-1: in a pass over
// packed examples at their own positions (Note [Packed sequences]), else at those.
inline std::pair<torch::Tensor, torch::Tensor> RopeTablesFor(const torch::Tensor& q, int64_t D, double theta,
                                                             const RopeScaling& scaling, int64_t past,
                                                             const PackedLayout* packed) {
  return packed ? RopeTablesAt(PackedPositions(*packed, q.device(), past, q.size(2)), D, theta, q, scaling)
                : RopeTables(q.size(2), D, theta, q, scaling, past);  // recomputed: not state to shard
}

// x [B, H, T, D] rotated by position: x * cos + rotate_half(x) * sin, where
// rotate_half(x) = [-x2, x1] for the halves x1 = x[..., :D/2], x2 = x[..., D/2:].
// With cos / sin narrower than x (partial rotary), its first cos.size(-1) dims only; the rest pass.
inline torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t rotated_dims = cos.size(-1);
  if (rotated_dims < x.size(-1))
    return torch::cat({ApplyRope(x.narrow(-1, 0, rotated_dims), cos, sin),
                       x.narrow(-1, rotated_dims, x.size(-1) - rotated_dims)}, -1);
  const int64_t half = x.size(-1) / 2;
  torch::Tensor rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

// The seed of block `index`: a local generator per block, so a block's weights depend on
// (seed, index) only, not on the global RNG nor on which blocks were made before.
inline uint64_t BlockSeed(uint64_t seed, int index) { return seed * 1000003ULL + static_cast<uint64_t>(index); }

// Fills every leaf of `block` in registration order from the block's own draws (the
// adapters from a generator of their own).
inline void InitialiseBlock(torch::nn::Module& block, uint64_t seed, int index) {
  torch::NoGradGuard no_grad;
  WeightDraws draws(BlockSeed(seed, index));
  at::Generator adapters = at::make_generator<at::CPUGeneratorImpl>(BlockSeed(seed, index) ^ 0x4c6f5241ULL);
  for (const auto& module : block.modules(/*include_self=*/true)) {
    if (auto* leaf = dynamic_cast<Leaf*>(module.get())) leaf->Initialise(draws);
  }
  for (const auto& module : block.modules(/*include_self=*/true)) {
    if (auto* leaf = dynamic_cast<Leaf*>(module.get())) leaf->InitialiseAdapters(adapters);
  }
}

// The head, shared by both architectures: final norm (registered as `norm_name`), then the
// LM head "lm_head.weight" [V, C] without bias, or, with tied embeddings, the embedding's
// table bound through BindTiedWeight (not a parameter of this block).
// `softcap` > 0 (Gemma 2's final_logit_softcapping): logits = cap * tanh(logits / cap).
template <typename Norm>
class LmHead final : public Block {
 public:
  LmHead(const ModelConfig& c, const std::string& norm_name, double softcap = 0)
      : tied_(c.tie_embeddings), softcap_(softcap) {
    norm_ = register_module(norm_name, std::make_shared<Norm>(c.d_model, c.norm_eps));
    if (!tied_) lm_head_ = register_module("lm_head", std::make_shared<Linear>(c.d_model, c.vocab_size, false, c.init_std));
  }
  BlockKind kind() const override { return BlockKind::kHead; }
  torch::Tensor Forward(const torch::Tensor& x, const BlockContext&) override {
    const torch::Tensor logits = torch::linear(HeadHidden(x), HeadWeight());
    return softcap_ > 0 ? torch::tanh(logits / softcap_) * softcap_ : logits;
  }
  double LogitSoftcap() const override { return softcap_; }
  torch::Tensor HeadHidden(const torch::Tensor& x) override { return norm_->Forward(x); }
  torch::Tensor HeadWeight() const override {
    if (!tied_) return lm_head_->weight();
    STRATA_CHECK(tied_weight_.defined()) << "tied head: BindTiedWeight(wte) must come before Forward";
    return tied_weight_;
  }
  void BindTiedWeight(const torch::Tensor& weight) override {
    STRATA_CHECK(tied_) << "BindTiedWeight on a head with its own lm_head";
    tied_weight_ = weight;  // shares the TensorImpl: later set_data on the owner is seen here
  }

 private:
  bool tied_;
  double softcap_;
  std::shared_ptr<Norm> norm_;
  std::shared_ptr<Linear> lm_head_;
  torch::Tensor tied_weight_;
};

}  // namespace strata::model::detail
