"""The tensorboard and csv_monitor sections of a DeepSpeed config, as a user sees them: a
12-step run of the tiny built-in model writes an event file that TensorBoard's own reader
(EventAccumulator) reads back with the steps and values of the run's --metrics JSONL, and CSV
files byte for byte what DeepSpeed 0.19.8's own csvMonitor writes for the same events; a
monitor whose folder cannot be created stops the run at start-up, naming it, before any step.

Usage: monitors_test.py STRATA_BINARY. Exits 77 (skipped) where tensorboard or deepspeed
cannot be imported, unless STRATA_REQUIRE_PEERS=1 (CI), where that fails.
"""
import glob
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from peer_env import ensure_library_path  # noqa: E402  (scripts/peer_env.py)

ensure_library_path()
try:
    import deepspeed.comm as ds_comm
    from deepspeed.monitor.config import CSVConfig
    from deepspeed.monitor.csv_monitor import csvMonitor
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except Exception as e:  # noqa: BLE001 - any import failure means: not here
    print(f"tensorboard or deepspeed not importable: {e}")
    sys.exit(1 if os.environ.get("STRATA_REQUIRE_PEERS") == "1" else 77)

STEPS = 12
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def config(tmp, tb_path, csv_path):
    with open(os.path.join(ROOT, "configs", "tiny_cpu.json")) as f:
        c = json.load(f)
    c["tensorboard"] = {"enabled": True, "output_path": tb_path, "job_name": "run1"}
    c["csv_monitor"] = {"enabled": True, "output_path": csv_path, "job_name": "run1"}
    path = os.path.join(tmp, "cfg.json")
    with open(path, "w") as f:
        json.dump(c, f)
    return path


def train(binary, cfg, tmp):
    return subprocess.run([binary, "train", "--config", cfg, "--steps", str(STEPS), "--metrics",
                           os.path.join(tmp, "m.jsonl")], capture_output=True, text=True, cwd=tmp)


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="strata-test-monitors-") as tmp:
        tb, csv = os.path.join(tmp, "tb"), os.path.join(tmp, "csv")
        r = train(binary, config(tmp, tb, csv), tmp)
        check(r.returncode == 0, f"the run finishes (rc {r.returncode}) {r.stderr[-500:]}")
        with open(os.path.join(tmp, "m.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        steps = [j for j in lines if "loss" in j]
        evals = [j for j in lines if "eval_loss" in j]
        c = json.load(open(os.path.join(ROOT, "configs", "tiny_cpu.json")))
        batch = c["train_micro_batch_size_per_gpu"] * c.get("gradient_accumulation_steps", 1)  # (1 rank)

        # TensorBoard's own reader.
        ea = EventAccumulator(os.path.join(tb, "run1"))
        ea.Reload()
        for tag, key in [("Train/Samples/train_loss", "loss"), ("Train/Samples/lr", "lr"),
                         ("Train/Samples/grad_norm", "grad_norm"), ("Train/Samples/tokens_per_s", "tokens_per_s")]:
            got = ea.Scalars(tag)
            want = [((j["step"] + 1) * batch, j[key]) for j in steps]
            same = len(got) == len(want) and all(
                g.step == s and math.isclose(g.value, v, rel_tol=1e-6, abs_tol=1e-30) for g, (s, v) in zip(got, want))
            check(same, f"TensorBoard reads {tag}: {len(got)} events, the JSONL's {len(want)} steps and values")
        got = ea.Scalars("Train/Samples/eval_loss")
        check([g.step for g in got] == [j["step"] * batch for j in evals] and
              all(math.isclose(g.value, j["eval_loss"], rel_tol=1e-6) for g, j in zip(got, evals)),
              f"TensorBoard reads the {len(got)} evaluations")
        for tag in ["Train/Samples/exposed_io_ms", "Train/Samples/host_memory_bytes", "Train/Samples/tflops"]:
            check(len(ea.Scalars(tag)) == STEPS, f"TensorBoard reads {tag} each step")

        # DeepSpeed's own csvMonitor, fed the events Strata wrote (from Strata's files), writes
        # the same bytes.
        ds_comm.get_rank = lambda: 0  # (no process group: rank 0 writes)
        ds_dir = os.path.join(tmp, "ds")
        theirs = csvMonitor(CSVConfig(enabled=True, output_path=ds_dir, job_name="run1"))
        files = sorted(glob.glob(os.path.join(csv, "run1", "*.csv")))
        check(len(files) == 8, f"{len(files)} CSV files, one per scalar (7 a step, the evaluations)")
        for path in files:
            name = os.path.basename(path)[:-4]
            tag = name.replace("Train_Samples_", "Train/Samples/")
            with open(path, newline="") as f:
                rows = [line.rstrip("\r\n").split(",") for line in f][1:]
            theirs.write_events([(tag, float(v), int(s)) for s, v in rows])
            mine, ds = open(path, "rb").read(), open(os.path.join(ds_dir, "run1", name + ".csv"), "rb").read()
            check(mine == ds, f"{name}.csv is byte for byte DeepSpeed's csvMonitor's ({len(rows)} rows)")
        with open(os.path.join(csv, "run1", "Train_Samples_train_loss.csv"), newline="") as f:
            rows = [line.rstrip("\r\n").split(",") for line in f]
        check(rows[0] == ["step", "train_loss"] and
              [(int(s), float(v)) for s, v in rows[1:]] == [((j["step"] + 1) * batch, j["loss"]) for j in steps],
              "Train_Samples_train_loss.csv holds the JSONL's losses exactly")

        # A folder in the way: an error at start-up naming it, before any step.
        blocker = os.path.join(tmp, "a-file")
        open(blocker, "w").close()
        r = train(binary, config(tmp, os.path.join(blocker, "tb"), csv), tmp)
        out = r.stdout + r.stderr
        check(r.returncode != 0 and f"tensorboard: cannot create the folder '{blocker}/tb/run1'" in out and
              "train step" not in out, f"an unwritable tensorboard folder stops the run at start-up (rc {r.returncode})")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
