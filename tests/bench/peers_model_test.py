"""The peers' plain-PyTorch LLaMA (bench/peers/llama.py) on the CPU, as the peer scripts call it:
targets sliced from the token batch at micro-batch > 1, gradients summed over an accumulation
loop, and its parameter count against the module's. The peers only run on the GPU machine, so
this is what checks them between its runs."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "peers"))
from llama import Llama, params_of  # noqa: E402


def main():
    torch.manual_seed(0)
    vocab, d, layers, heads, kv, ffn = 64, 32, 2, 4, 2, 48
    model = Llama(vocab, d, layers, heads, kv, ffn)
    n = sum(p.numel() for p in model.parameters())
    assert n == params_of(vocab, d, layers, heads, kv, ffn), (n, params_of(vocab, d, layers, heads, kv, ffn))
    micro_batch, seq, accumulation = 3, 16, 2
    toks = [torch.randint(0, vocab, (micro_batch, seq + 1)) for _ in range(accumulation)]
    total = 0.0
    for tok in toks:  # the scripts' accumulation loop
        loss = model(tok[:, :-1], tok[:, 1:]) / accumulation
        loss.backward()
        total += loss.item()
    assert abs(total - torch.log(torch.tensor(float(vocab))).item()) < 1.0, total  # near uniform at init
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    # The summed gradient equals one pass over both micro-batches stacked (the same mean loss).
    summed = [g.clone() for g in grads]
    model.zero_grad()
    both = torch.cat(toks)
    model(both[:, :-1], both[:, 1:]).backward()
    for a, b in zip(summed, (p.grad for p in model.parameters())):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    print("peers model: micro-batch 3, accumulation 2: ok")


if __name__ == "__main__":
    main()
