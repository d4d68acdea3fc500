"""The in-memory reference: the same LLaMA shape and batch as the offload peers, with every
weight, gradient and Adam state on the GPU (plain PyTorch, bf16 autocast over fp32 weights,
fused AdamW). Offloaded tokens/s over this one's is the figure offload systems are compared by.
Usage (GPU machine): python3 bench/peers/torch_in_memory.py --size 4.3b. Prints one JSON line."""
import argparse
import time

import torch

from llama import SIZES, Llama, add_args, params_of, report, step_tokens


def main():
    p = argparse.ArgumentParser()
    add_args(p)
    args = p.parse_args()
    d, layers, heads, kv, ffn = SIZES[args.size]
    n = params_of(args.vocab, d, layers, heads, kv, ffn)
    need = n * 16  # fp32 weights, gradients, m and v
    free, _ = torch.cuda.mem_get_info()
    if need > free:
        raise SystemExit(f"size {args.size}: {need / 2**30:.1f} GiB of weights, gradients and Adam states "
                         f"exceed the GPU's {free / 2**30:.1f} GiB free; choose a smaller --size")
    with torch.device("cuda"):
        model = Llama(args.vocab, d, layers, heads, kv, ffn)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    times = []
    for step in range(args.steps):
        toks = step_tokens(args, "cuda")
        torch.cuda.synchronize()
        t0 = time.time()
        for tok in toks:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(tok[:, :-1], tok[:, 1:]) / args.accumulation
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=False)
        torch.cuda.synchronize()
        times.append(time.time() - t0)
        print(f"step {step} loss {loss.item() * args.accumulation:.4f} {times[-1]:.2f}s "
              f"peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB", flush=True)
    report("torch-in-memory", args, times, n, 1)


if __name__ == "__main__":
    main()
