"""DeepSpeed's CPU Adam as a persistent peer for `strata bench adam`.

The C++ bench starts this once and drives it over stdin/stdout so that its repetitions can
be interleaved with Strata's (the machine is noisy; back-to-back blocks would compare
different minutes). Protocol, one line each way:

  start:   python deepspeed_adam.py --params N --threads T [--optimizer adam|lion|adagrad]
  reply:   "ready <deepspeed version>"  or  "error <why>" (then exit 0)
  request: "step"       one DeepSpeedCPUAdam.step() (DeepSpeedCPULion, DeepSpeedCPUAdagrad)
                        over N fp32 parameters
           "step_copy"  the same step followed by a separate fp32 -> bf16 copy of the
                        weights (what a trainer must do when the optimizer cannot fuse it)
           "quit"
  reply:   the wall seconds of that request, e.g. "0.071234"

`--warmup` builds the JIT op once and exits (scripts/setup_peers.sh calls it for each).

`import torch` needs CUDA libraries that are not on the default search path (PyPI's wheel
is a CUDA build): this script re-executes itself once with LD_LIBRARY_PATH naming
/usr/local/cuda/lib64 and the nvidia wheels' lib folders (torch's own RPATH finds most of
the latter; the variable makes it explicit), because the dynamic loader reads that variable
only at process start.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from peer_env import ensure_library_path  # noqa: E402  (scripts/peer_env.py)


def _arg(name, default):
    if name in sys.argv:
        return sys.argv[sys.argv.index(name) + 1]
    return default


def main():
    ensure_library_path()
    n = int(_arg("--params", "100000000"))
    threads = int(_arg("--threads", "2"))
    name = _arg("--optimizer", "adam")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        import torch
        import deepspeed
        from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        from deepspeed.ops.lion import DeepSpeedCPULion
    except Exception as e:  # not installed, or import torch fails: the bench prints null
        print("error", type(e).__name__, str(e).replace("\n", " ")[:300], flush=True)
        return
    torch.set_num_threads(threads)
    if "--warmup" in sys.argv:
        n = 1024
    # Same data as Strata's bench: non-trivial weights and gradients, zero states.
    p = torch.nn.Parameter(torch.empty(n, dtype=torch.float32).uniform_(-1, 1))
    p.grad = torch.empty(n, dtype=torch.float32).uniform_(-1e-2, 1e-2)
    half = torch.empty(n, dtype=torch.bfloat16)
    try:
        if name == "lion":
            opt = DeepSpeedCPULion([p], lr=1e-4, betas=(0.9, 0.99), weight_decay=0.01)
        elif name == "adagrad":
            opt = DeepSpeedCPUAdagrad([p], lr=1e-2, eps=1e-10, weight_decay=0.01)
        else:
            opt = DeepSpeedCPUAdam([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                                   adamw_mode=True)
        opt.step()  # first step allocates m and v; not timed
    except Exception as e:
        print("error", type(e).__name__, str(e).replace("\n", " ")[:300], flush=True)
        return
    if "--warmup" in sys.argv:
        print(f"deepspeed cpu {name} ok", deepspeed.__version__, flush=True)
        return
    print("ready", deepspeed.__version__, flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "quit" or not cmd:
            break
        t0 = time.perf_counter()
        opt.step()
        if cmd == "step_copy":
            half.copy_(p.data)
        print(f"{time.perf_counter() - t0:.6f}", flush=True)


if __name__ == "__main__":
    main()
