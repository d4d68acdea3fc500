"""Prints the learning rates DeepSpeed's own schedulers give, for lr_schedule_test.cc.

Usage: deepspeed_lr.py LR MIN_LR MAX_LR WARMUP TOTAL MIN_RATIO COS_MIN_RATIO STEP...
For WarmupLR, WarmupDecayLR and WarmupCosineLR with each warmup_type, one line per STEP:
"lr KIND TYPE STEP VALUE", VALUE the lr (repr: exact) that the optimizer update after STEP
applied ones runs with, as DeepSpeed's engine drives the scheduler: built before the first
update, stepped after each. Exits 77 where deepspeed (or torch) cannot be imported.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from peer_env import ensure_library_path  # noqa: E402  (scripts/peer_env.py)

ensure_library_path()  # torch is a CUDA build: name its libraries before importing it
try:
    import torch
    from deepspeed.runtime.lr_schedules import WarmupCosineLR, WarmupDecayLR, WarmupLR
except Exception as e:  # noqa: BLE001 - any import failure means: not here
    print(f"deepspeed not importable: {e}")
    sys.exit(77)


def rates(make, steps):
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=LR)
    sched = make(opt)
    out = {}
    for k in range(max(steps) + 1):
        out[k] = opt.param_groups[0]["lr"]
        opt.step()
        sched.step()
    return out


LR, MIN_LR, MAX_LR = (float(x) for x in sys.argv[1:4])
WARMUP, TOTAL = int(sys.argv[4]), int(sys.argv[5])
MIN_RATIO, COS_MIN = float(sys.argv[6]), float(sys.argv[7])
STEPS = [int(x) for x in sys.argv[8:]]
for wt in ("log", "linear"):
    kinds = {
        "WarmupLR": lambda o: WarmupLR(o, MIN_LR, MAX_LR, WARMUP, wt),
        "WarmupDecayLR": lambda o: WarmupDecayLR(o, TOTAL, MIN_LR, MAX_LR, WARMUP, wt),
        "WarmupCosineLR": lambda o: WarmupCosineLR(o, TOTAL, MIN_RATIO, WARMUP, COS_MIN, wt),
    }
    for kind, make in kinds.items():
        got = rates(make, STEPS)
        for k in STEPS:
            print(f"lr {kind} {wt} {k} {got[k]!r}")
