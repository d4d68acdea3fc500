"""PyTorch FSDP2 (fully_shard) with CPUOffloadPolicy on the same LLaMA shape as Strata.
Usage (GPU machine): torchrun --nproc_per_node 1 bench/peers/fsdp2_offload.py --size 7b.
Prints one JSON line with tokens/s."""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

from llama import SIZES, Llama, add_args, params_of, report, step_tokens


def main():
    p = argparse.ArgumentParser()
    add_args(p)
    args = p.parse_args()
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    d, layers, heads, kv, ffn = SIZES[args.size]
    with torch.device("meta"):
        model = Llama(args.vocab, d, layers, heads, kv, ffn)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, offload_policy=CPUOffloadPolicy(pin_memory=True), mp_policy=mp)
    fully_shard(model, offload_policy=CPUOffloadPolicy(pin_memory=True), mp_policy=mp)
    model.to_empty(device="cpu")
    for m in model.modules():
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    times = []
    for step in range(args.steps):
        toks = step_tokens(args, "cuda")
        torch.cuda.synchronize()
        t0 = time.time()
        for tok in toks:  # gradients summed over the micro-batches, as Strata's accumulation does
            loss = model(tok[:, :-1], tok[:, 1:]) / args.accumulation
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        torch.cuda.synchronize()
        times.append(time.time() - t0)
        print(f"step {step} loss {loss.item():.4f} {times[-1]:.2f}s", flush=True)
    report("fsdp2-cpu-offload", args, times, params_of(args.vocab, d, layers, heads, kv, ffn), dist.get_world_size())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
