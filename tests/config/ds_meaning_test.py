"""A DeepSpeed config means what the pinned DeepSpeed (0.19.8) makes of it: for every config in
the corpus (configs/, tests/config/ds_configs/, the cases in tests/config/ds_meaning/ written
to hit each default, and the DeepSpeedExamples configs both accept, tests/config/ds_examples/),
the fields that change what is trained, as `strata config check` resolves them, against DeepSpeed's own parser (DeepSpeedConfig) and the
constructor defaults of the optimizer class DeepSpeed would build for that config (offloaded:
DeepSpeedCPUAdam; torch_adam: torch.optim.AdamW or Adam; else FusedAdam; Lamb: FusedLamb) and of its scheduler
class; for Muon, the two halves DeepSpeed's engine builds (_muon_param_groups) with MuonWithAuxAdam's defaults. The schedules' values are compared bit for bit by the LrSchedule tests.

Usage: ds_meaning_test.py STRATA_BINARY. One world (1 rank). A config DeepSpeed's parser refuses
(Hugging Face's "auto" values, which the Trainer fills in first) is listed and not compared;
a config Strata refuses fails the test. Exits 77 where deepspeed cannot be imported, unless
STRATA_REQUIRE_PEERS=1 (CI), where that fails.
"""
import glob
import inspect
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from peer_env import ensure_library_path, missing_peers  # noqa: E402  (scripts/peer_env.py)

ensure_library_path()
try:
    import deepspeed
    import torch
    from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad
    from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam
    from deepspeed.ops.lamb import FusedLamb
    from deepspeed.ops.lion import DeepSpeedCPULion, FusedLion
    from deepspeed.runtime import lr_schedules
    from deepspeed.runtime.config import DeepSpeedConfig
except Exception as e:  # noqa: BLE001 - any import failure means: not here
    missing_peers(f"deepspeed not importable: {e}")

PINNED = "0.19.8"


def corpus():
    files = sorted(glob.glob(os.path.join(ROOT, "configs", "*.json")))
    files += sorted(f for f in glob.glob(os.path.join(HERE, "ds_configs", "*.json")) if not f.endswith(".strata.json"))
    files += sorted(glob.glob(os.path.join(HERE, "ds_meaning", "*.json")))  # written to hit each default
    files += sorted(glob.glob(os.path.join(HERE, "ds_examples", "*.json")))  # DeepSpeedExamples' (README.md)
    return files


def strata_resolved(binary, path, raw, nproc=1):
    # bf16.enabled "auto" follows this CPU (fp32 where bf16 is slow, STRATA_FORCE_ISA=avx2 too),
    # and a config that needs bf16 (split master weights) is then refused here: resolve such a
    # config as on the machines it is written for. The field itself is not compared ("auto").
    auto_bf16 = isinstance(raw.get("bf16"), dict) and raw["bf16"].get("enabled") == "auto"
    extra = ["--set", "bf16.enabled=true"] if auto_bf16 else []
    r = subprocess.run([binary, "config", "check", path, "--nproc", str(nproc)] + extra, capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise SystemExit(f"{path}: strata config check failed:\n{r.stdout}{r.stderr}")
    text = r.stdout.split("resolved configuration:", 1)[1]
    return json.JSONDecoder().raw_decode(text.strip())[0]


def optimizer_class(ds, params):
    offload = ds.zero_config.offload_optimizer
    offloaded = offload is not None and str(getattr(offload, "device", "none")).split(".")[-1].lower() in ("cpu", "nvme")
    if ds.optimizer_name == "lion":
        return DeepSpeedCPULion if offloaded else FusedLion
    if ds.optimizer_name == "adagrad":
        return DeepSpeedCPUAdagrad if offloaded else torch.optim.Adagrad
    if ds.optimizer_name == "lamb":
        return FusedLamb  # offloaded or not (DeepSpeed has no CPU LAMB)
    if params.get("torch_adam", False):
        adam_w = ds.optimizer_name == "adamw" or params.get("adam_w_mode", True)
        return torch.optim.AdamW if adam_w else torch.optim.Adam
    return DeepSpeedCPUAdam if offloaded else FusedAdam


# The hyper-parameters each optimizer's class takes, compared by value (Adam's decoupling and
# bias correction besides).
OPTIMIZER_FIELDS = {"adam": ("lr", "betas", "eps", "weight_decay"), "lion": ("lr", "betas", "weight_decay"),
                    "adagrad": ("lr", "eps", "weight_decay"),
                    "muon": ("lr", "betas", "eps", "weight_decay", "muon_lr", "momentum", "muon_weight_decay"),
                    "lamb": ("lr", "betas", "eps", "weight_decay", "eps_inside_sqrt", "bias_correction", "max_coeff",
                             "min_coeff")}


def optimizer_fields(rule, value):
    out = {"optimizer.rule": rule}
    for k in OPTIMIZER_FIELDS[rule]:
        out[f"optimizer.{k}"] = [float(b) for b in value(k)] if k == "betas" else float(value(k))
    return out


def muon_meaning(ds):
    """MuonWithAuxAdam's two halves as DeepSpeed's engine builds them: one parameter of each
    kind through _muon_param_groups, then the class's own defaults filled in."""
    from deepspeed.runtime.engine import DeepSpeedEngine
    from deepspeed.runtime.zero.muon.original_muon import MuonWithAuxAdam
    params = dict(ds.optimizer_params or {})
    adam_w = params.pop("adam_w_mode", True)
    matrix, vector = torch.nn.Parameter(torch.zeros(2, 2)), torch.nn.Parameter(torch.zeros(2))
    matrix.use_muon, vector.use_muon = True, False
    groups = DeepSpeedEngine._muon_param_groups([matrix, vector], params)
    MuonWithAuxAdam(groups)
    muon = next(g for g in groups if g["use_muon"])
    adam = next(g for g in groups if not g["use_muon"])
    out = {"optimizer.rule": "muon", "optimizer.lr": float(adam["lr"]), "optimizer.betas": [float(b) for b in adam["betas"]],
           "optimizer.eps": float(adam["eps"]), "optimizer.weight_decay": float(adam["weight_decay"]),
           "optimizer.muon_lr": float(muon["lr"]), "optimizer.momentum": float(muon["momentum"]),
           "optimizer.muon_weight_decay": float(muon["weight_decay"]), "optimizer.ns_method": muon["ns_method"],
           "optimizer.decoupled": bool(adam_w), "optimizer class": "MuonWithAuxAdam"}
    return out


def defaults(cls):
    return {k: v.default for k, v in inspect.signature(cls.__init__).parameters.items()
            if v.default is not inspect.Parameter.empty}


def deepspeed_meaning(path):
    ds = DeepSpeedConfig(path)
    out = {
        "gradient_clipping": float(ds.gradient_clipping),
        "train_batch_size": ds.train_batch_size,
        "train_micro_batch_size_per_gpu": ds.train_micro_batch_size_per_gpu,
        "gradient_accumulation_steps": ds.gradient_accumulation_steps,
        "zero stage": ds.zero_optimization_stage,
        "bf16.enabled": bool(ds.bfloat16_config.enabled),
        "fp16.enabled": bool(ds.float16_config.enabled),
    }
    if ds.float16_config.enabled:
        f = ds.float16_config
        out.update({"fp16.loss_scale": float(f.loss_scale), "fp16.initial_scale_power": f.initial_scale_power,
                    "fp16.loss_scale_window": f.loss_scale_window, "fp16.hysteresis": f.hysteresis,
                    "fp16.min_loss_scale": float(f.min_loss_scale)})
    if ds.scheduler_name:
        cls = getattr(lr_schedules, ds.scheduler_name)
        d = defaults(cls)
        given = dict(ds.scheduler_params or {})
        out["scheduler.type"] = ds.scheduler_name
        for key, default in d.items():
            if key in ("optimizer", "last_batch_iteration"):
                continue
            value = given.get(key, default)
            if value is None and key == "warmup_max_lr":  # WarmupLR: each group's lr (Muon: its two halves')
                value = dict(ds.optimizer_params or {}).get("lr", 1e-3)
                if ds.optimizer_name == "muon":
                    halves = muon_meaning(ds)
                    value = [halves["optimizer.muon_lr"], halves["optimizer.lr"]]
            if value is None and key.startswith("cycle_second_"):  # OneCycle: the first half's
                first = key.replace("second", "first")
                value = given.get(first, d.get(first))
            out[f"scheduler.{key}"] = value
        # A parameter without a default (total_num_steps of the decaying schedules): DeepSpeed
        # refuses to start without it, Strata takes the run's steps and says so.
        for key, v in inspect.signature(cls.__init__).parameters.items():
            if v.default is inspect.Parameter.empty and key not in ("self", "optimizer") and key in given:
                out[f"scheduler.{key}"] = given[key]
    if ds.optimizer_name in ("adam", "adamw", "lion", "adagrad", "lamb"):
        params = dict(ds.optimizer_params or {})
        cls = optimizer_class(ds, params)
        d = defaults(cls)
        value = lambda k: params.get(k, d.get(k))  # noqa: E731
        rule = "adam" if ds.optimizer_name == "adamw" else ds.optimizer_name
        out.update(optimizer_fields(rule, value))
        if rule == "adam":
            decoupled = ds.optimizer_name == "adamw" or params.get("adam_w_mode", True)
            out.update({"optimizer.decoupled": bool(decoupled),
                        "optimizer.bias_correction": bool(params.get("bias_correction", d.get("bias_correction", True)))})
        out["optimizer class"] = cls.__name__
    if ds.optimizer_name == "muon":
        out.update(muon_meaning(ds))
    return out


def model_parallel_meaning(path, world):
    """DeepSpeedConfig's batch keys for a config with sequence_parallel_size or
    tensor_parallel.autotp_size in a world of `world` ranks, and its data ranks (those that read
    different batches). Given the config as a dict (as the Hugging Face integration passes it; a
    path it reads without looking for the key) and no mpu, its parser divides the world by
    sequence_parallel_size, as an mpu's data-parallel world does in a Ulysses run, and counts
    every tensor rank; AutoTP's groups (groups._init_tp_mesh_device) make world // autotp_size
    data-parallel ranks."""
    import deepspeed.comm as dist
    saved = dist.get_rank, dist.get_world_size
    dist.get_rank, dist.get_world_size = (lambda group=None: 0), (lambda group=None: world)
    try:
        with open(path) as f:
            ds = DeepSpeedConfig(json.load(f))
    finally:
        dist.get_rank, dist.get_world_size = saved
    tp = max(1, ds.tensor_parallel_config.autotp_size)
    return {"train_batch_size": ds.train_batch_size, "train_micro_batch_size_per_gpu": ds.train_micro_batch_size_per_gpu,
            "gradient_accumulation_steps": ds.gradient_accumulation_steps, "autotp_size": tp,
            "data ranks": ds.world_size // tp}


def model_parallel_differences(binary, world=2):
    """The configs of ds_meaning/sequence_parallel/ and ds_meaning/tensor_parallel/ on `world`
    ranks: the batch keys as DeepSpeed resolves them, and its data ranks as Strata counts them
    (world / (sequence_parallel_size x autotp_size))."""
    differences, compared = [], 0
    for path in sorted(glob.glob(os.path.join(HERE, "ds_meaning", "*_parallel", "*.json"))):
        name = os.path.relpath(path, ROOT)
        with open(path) as f:
            raw = json.load(f)
        r = strata_resolved(binary, path, raw, nproc=world)
        tp = r["tensor_parallel"]["autotp_size"]
        mine = {"train_batch_size": r["train_batch_size"],
                "train_micro_batch_size_per_gpu": r["train_micro_batch_size_per_gpu"],
                "gradient_accumulation_steps": r["gradient_accumulation_steps"], "autotp_size": tp,
                "data ranks": world // (r["sequence_parallel_size"] * tp)}
        compared += 1
        for key, want in model_parallel_meaning(path, world).items():
            if not same(mine[key], want):
                differences.append(f"{name}: {key}: Strata {mine[key]!r}, DeepSpeed {PINNED} {want!r}")
    return compared, differences


def strata_meaning(r, with_optimizer):
    out = {
        "gradient_clipping": float(r["gradient_clipping"]),
        "train_batch_size": r["train_batch_size"],
        "train_micro_batch_size_per_gpu": r["train_micro_batch_size_per_gpu"],
        "gradient_accumulation_steps": r["gradient_accumulation_steps"],
        "zero stage": r["zero_optimization"]["stage"],
        "bf16.enabled": bool(r["bf16"]["enabled"]),
        "fp16.enabled": bool(r["fp16"]["enabled"]),
    }
    if r["fp16"]["enabled"]:
        f = r["fp16"]
        out.update({"fp16.loss_scale": float(f["loss_scale"]), "fp16.initial_scale_power": f["initial_scale_power"],
                    "fp16.loss_scale_window": f["loss_scale_window"], "fp16.hysteresis": f["hysteresis"],
                    "fp16.min_loss_scale": float(f["min_loss_scale"])})
    if r["scheduler"]["type"] != "constant":
        out["scheduler.type"] = r["scheduler"]["type"]
        for key, value in r["scheduler"]["params"].items():
            out[f"scheduler.{key}"] = value
    if with_optimizer:
        p = r["optimizer"]["params"]
        rule = r["optimizer"]["type"].lower().replace("adamw", "adam")
        out.update(optimizer_fields(rule, lambda k: p[k]))
        if rule == "adam":
            out.update({"optimizer.decoupled": r["optimizer"]["type"] == "AdamW",
                        "optimizer.bias_correction": bool(p["bias_correction"])})
        if rule == "muon":
            out.update({"optimizer.ns_method": p["ns_method"], "optimizer.decoupled": bool(p["adam_w_mode"])})
    return out


# Where each compared field is written in a config (DeepSpeed's keys).
RAW_PATHS = {
    "bf16.enabled": ("bf16", "enabled"), "fp16.enabled": ("fp16", "enabled"),
    "gradient_clipping": ("gradient_clipping",), "train_batch_size": ("train_batch_size",),
    "train_micro_batch_size_per_gpu": ("train_micro_batch_size_per_gpu",),
    "gradient_accumulation_steps": ("gradient_accumulation_steps",), "zero stage": ("zero_optimization", "stage"),
    "optimizer.lr": ("optimizer", "params", "lr"), "optimizer.betas": ("optimizer", "params", "betas"),
    "optimizer.eps": ("optimizer", "params", "eps"), "optimizer.weight_decay": ("optimizer", "params", "weight_decay"),
}


def raw_value(raw, key):
    node = raw
    for part in RAW_PATHS.get(key, ()):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if key in RAW_PATHS else None


def same(a, b):
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, str) or isinstance(b, str):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def main():
    binary = sys.argv[1]
    if deepspeed.__version__ != PINNED:
        print(f"deepspeed {deepspeed.__version__} is not the pinned {PINNED}")
        return 1
    compared, fields, refused, differences, autos = 0, 0, [], [], []
    for path in corpus():
        name = os.path.relpath(path, ROOT)
        with open(path) as f:
            raw = json.load(f)
        resolved = strata_resolved(binary, path, raw)
        try:
            ds = deepspeed_meaning(path)
        except Exception as e:  # noqa: BLE001 - DeepSpeed refuses it ("auto" values, Strata-only sections)
            refused.append(f"{name}: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:120]}")
            continue
        mine = strata_meaning(resolved, "optimizer.lr" in ds)
        compared += 1
        for key, want in ds.items():
            if key == "optimizer class":
                continue
            if raw_value(raw, key) == "auto":  # Strata resolves it and says how at start-up
                autos.append(f"{name}: {key}")
                continue
            fields += 1
            if key not in mine:
                differences.append(f"{name}: {key}: Strata has none, DeepSpeed {PINNED} {want!r}")
                continue
            if not same(mine[key], want):
                differences.append(f"{name}: {key}: Strata {mine[key]!r}, DeepSpeed {PINNED} {want!r}"
                                   + (f" ({ds['optimizer class']})" if key.startswith("optimizer.") else ""))
    sp_compared, sp_differences = model_parallel_differences(binary)
    differences += sp_differences
    print(f"{compared} config(s), {fields} fields, compared with DeepSpeed {PINNED}'s meaning; "
          f"{len(refused)} refused by DeepSpeed's parser; {sp_compared} sequence- and tensor-parallel config(s) on 2 ranks")
    for r in refused:
        print(f"  not compared: {r}")
    for a in autos:
        print(f"  \"auto\", resolved by Strata: {a}")
    for d in differences:
        print(f"DIFFERENT {d}")
    if compared == 0 or sp_compared == 0:
        print("nothing compared")
        return 1
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
