"""A plain-PyTorch LLaMA-style decoder (RMSNorm, RoPE, SwiGLU, GQA) for the peer benchmarks,
the same shape Strata builds from strata.model (arch "llama"), so DeepSpeed, FSDP2 and Strata
train the same model on the same data shape. No transformers dependency (the GPU machine
has no registry)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from sizes import SIZES  # noqa: F401 (the peers import it from here)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def reset_parameters(self):  # FSDP2 materialises from the meta device through this
        nn.init.ones_(self.weight)

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rope(x, theta):
    # x: [B, H, T, D]; rotate-half convention.
    T, D = x.shape[-2], x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, device=x.device, dtype=torch.float32) / D))
    ang = torch.outer(torch.arange(T, device=x.device, dtype=torch.float32), inv)
    cos, sin = torch.cat([ang, ang], -1).cos().to(x.dtype), torch.cat([ang, ang], -1).sin().to(x.dtype)
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Layer(nn.Module):
    def __init__(self, d, heads, kv_heads, ffn, theta):
        super().__init__()
        self.h, self.kv, self.hd, self.theta = heads, kv_heads, d // heads, theta
        self.input_layernorm = RMSNorm(d)
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.post_attention_layernorm = RMSNorm(d)
        self.gate_proj = nn.Linear(d, ffn, bias=False)
        self.up_proj = nn.Linear(d, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, d, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.kv, self.hd).transpose(1, 2)
        q, k = rope(q, self.theta), rope(k, self.theta)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != self.h)
        x = x + self.o_proj(a.transpose(1, 2).reshape(B, T, C))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, vocab, d, layers, heads, kv_heads, ffn, theta=10000.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Layer(d, heads, kv_heads, ffn, theta) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        for layer in self.layers:
            x = torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=False)  # as Strata recomputes
        logits = self.lm_head(self.norm(x)).float()
        # reshape: the peers pass targets as tokens[:, 1:], a strided view once the micro-batch is > 1
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def params_of(vocab, d, layers, heads, kv_heads, ffn):
    hd = d // heads
    per_layer = 2 * d + d * d * 2 + 2 * d * kv_heads * hd + 3 * d * ffn
    return vocab * d * 2 + layers * per_layer + d




def step_tokens(args, device):
    """One step's micro-batches of random tokens (inputs and targets, seq + 1 each)."""
    return [torch.randint(0, args.vocab, (args.micro_batch, args.seq + 1), device=device)
            for _ in range(args.accumulation)]


def add_args(p):
    p.add_argument("--size", default="7b", choices=sorted(SIZES))
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--accumulation", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--nvme-path", default="/tmp/peers-nvme")


def report(name, args, step_times, n_params, world):
    import json
    import statistics

    t = statistics.median(step_times[1:]) if len(step_times) > 1 else step_times[0]
    tokens = args.micro_batch * args.accumulation * args.seq * world
    print(json.dumps({"peer": name, "size": args.size, "params": n_params, "micro_batch": args.micro_batch,
                      "accumulation": args.accumulation, "seq": args.seq, "step_s": t, "tokens_per_s": tokens / t,
                      "model_tflops": 6 * n_params * tokens / t / 1e12}))
