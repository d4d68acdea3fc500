"""The peers' plain-PyTorch LLaMA (bench/peers/llama.py) on the CPU, as the peer scripts call it:
targets sliced from the token batch at micro-batch > 1, gradients summed over an accumulation
loop, and its parameter count against the module's; and every peer size (bench/peers/sizes.py)
against the parameters Strata counts for configs/llama_7b_gpu.json given that shape, as the GPU
run's stage cmp gives it. The peers only run on the GPU machine, so this is what checks them
between its runs. Usage: peers_model_test.py STRATA_BINARY"""
import os
import re
import subprocess
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "peers"))
from llama import Llama, params_of  # noqa: E402
from sizes import SIZES  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def check_sizes_match_strata(strata):
    for name, (d, layers, heads, kv, ffn) in SIZES.items():
        sets = {"d_model": d, "n_layer": layers, "n_head": heads, "n_kv_head": kv, "ffn_hidden": ffn}
        cmd = [strata, "estimate", "--config", os.path.join(ROOT, "configs", "llama_7b_gpu.json"),
               "--set", "strata.data.path="]
        for k, v in sets.items():
            cmd += ["--set", f"strata.model.{k}={v}"]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
        m = re.search(r"([0-9.]+(?:e[+-]?[0-9]+)?) M parameters", out)
        assert m, f"{name}: no parameter count in\n{out}"
        want = params_of(32000, d, layers, heads, kv, ffn)
        assert abs(float(m.group(1)) * 1e6 - want) / want < 1e-3, (name, m.group(1), want)


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
    check_sizes_match_strata(sys.argv[1])
    print(f"peer sizes {sorted(SIZES)}: the parameters Strata counts for the same shape")


if __name__ == "__main__":
    main()
