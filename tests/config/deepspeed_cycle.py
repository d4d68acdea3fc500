"""Prints the learning rate and Adam's betas that DeepSpeed's own OneCycle or LRRangeTest gives
each update, for lr_schedule_test.cc.

Usage: deepspeed_cycle.py SCHEDULER_JSON UPDATES. SCHEDULER_JSON is a ds_config "scheduler"
section; the optimizer is torch.optim.Adam (lr 0.05, betas (0.9, 0.999)), as DeepSpeed's engine
drives a scheduler: built before the first update, stepped after each. One line per update k
in [0, UPDATES): "k LR BETA1 BETA2" (repr: exact). Exits 77 where deepspeed (or torch) cannot be
imported.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from peer_env import ensure_library_path  # noqa: E402  (scripts/peer_env.py)

ensure_library_path()
try:
    import torch
    from deepspeed.runtime import lr_schedules
except Exception as e:  # noqa: BLE001 - any import failure means: not here
    print(f"deepspeed not importable: {e}")
    sys.exit(77)

section = json.loads(sys.argv[1])
updates = int(sys.argv[2])
param = torch.nn.Parameter(torch.zeros(1))
opt = torch.optim.Adam([param], lr=0.05, betas=(0.9, 0.999))
sched = getattr(lr_schedules, section["type"])(opt, **section.get("params", {}))
for k in range(updates):
    group = opt.param_groups[0]
    beta1, beta2 = group["betas"]
    print(f"{k} {group['lr']!r} {float(beta1)!r} {float(beta2)!r}")
    sched.step()
