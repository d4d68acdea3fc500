"""DeepSpeed ZeRO-3 with parameter and optimizer offload (ZeRO-Infinity) on the same LLaMA
shape as Strata. Usage (GPU machine): deepspeed --num_gpus 1 bench/peers/ds_zero_infinity.py
--size 7b --offload nvme|cpu. Prints one JSON line with tokens/s."""
import argparse
import time

import deepspeed
import torch

from llama import SIZES, Llama, add_args, params_of, report, step_tokens


def main():
    p = argparse.ArgumentParser()
    add_args(p)
    p.add_argument("--offload", default="cpu", choices=["cpu", "nvme"])
    p.add_argument("--local_rank", type=int, default=0)
    args = p.parse_args()
    d, layers, heads, kv, ffn = SIZES[args.size]
    dev = {"device": args.offload, "pin_memory": True}
    param_dev = dict(dev)
    if args.offload == "nvme":
        dev["nvme_path"] = param_dev["nvme_path"] = args.nvme_path
        # Its swap buffers must hold the largest parameter (vocab x d_model), and be enough for
        # the parameters live at once (5 such buffers ran out: "Not enough buffers 0 for swapping 1").
        param_dev["buffer_size"] = max(int(1e8), args.vocab * d)
        param_dev["buffer_count"] = 32
    cfg = {
        "train_micro_batch_size_per_gpu": args.micro_batch, "gradient_accumulation_steps": args.accumulation,
        "gradient_clipping": 1.0, "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "weight_decay": 0.1}},
        "zero_optimization": {"stage": 3, "offload_param": param_dev, "offload_optimizer": dict(dev),
                              "sub_group_size": 1e8, "stage3_prefetch_bucket_size": 5e7,
                              "stage3_max_live_parameters": 1e9},
        "aio": {"block_size": 1048576, "queue_depth": 32},
    }
    with deepspeed.zero.Init(config_dict_or_path=cfg):
        model = Llama(args.vocab, d, layers, heads, kv, ffn)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    times = []
    for step in range(args.steps):
        toks = step_tokens(args, engine.device)
        torch.cuda.synchronize()
        t0 = time.time()
        for tok in toks:  # DeepSpeed's accumulation: step() updates at the last micro-batch
            loss = engine(tok[:, :-1], tok[:, 1:])
            engine.backward(loss)
            engine.step()
        torch.cuda.synchronize()
        times.append(time.time() - t0)
        print(f"step {step} loss {loss.item():.4f} {times[-1]:.2f}s", flush=True)
    report(f"deepspeed-zero-infinity-{args.offload}", args, times, params_of(args.vocab, d, layers, heads, kv, ffn),
           torch.distributed.get_world_size())


if __name__ == "__main__":
    main()
