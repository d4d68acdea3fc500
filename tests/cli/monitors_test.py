"""The tensorboard, csv_monitor and wandb sections of a DeepSpeed config, as a user sees them:
a 12-step run of the tiny built-in model writes an event file that TensorBoard's own reader
(EventAccumulator) reads back with the steps and values of the run's --metrics JSONL, CSV
files byte for byte what DeepSpeed 0.19.8's own csvMonitor writes for the same events, and an
offline W&B run, written by the official client, whose history (read back by the client's own
`wandb leet inspect --json`) holds the same steps and values; a monitor whose folder cannot be
created, or a wandb section without a client, stops the run at start-up, before any step; a
run stopped by Ctrl-C still leaves its W&B run finished (the client ends it once the trainer
is gone), with the steps it logged.

Usage: monitors_test.py STRATA_BINARY. Exits 77 (skipped) where tensorboard, deepspeed or
wandb cannot be imported, unless STRATA_REQUIRE_PEERS=1 (CI), where that fails.
"""
import glob
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from peer_env import ensure_library_path, missing_peers  # noqa: E402  (scripts/peer_env.py)

ensure_library_path()
try:
    import deepspeed.comm as ds_comm
    from deepspeed.monitor.config import CSVConfig
    from deepspeed.monitor.csv_monitor import csvMonitor
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    import wandb  # noqa: F401  (the client the run starts, with this Python)
except Exception as e:  # noqa: BLE001 - any import failure means: not here
    missing_peers(f"tensorboard, deepspeed or wandb not importable: {e}")

STEPS = 12
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def config(tmp, tb_path, csv_path, wandb_on=True):
    with open(os.path.join(ROOT, "configs", "tiny_cpu.json")) as f:
        c = json.load(f)
    c["tensorboard"] = {"enabled": True, "output_path": tb_path, "job_name": "run1"}
    c["csv_monitor"] = {"enabled": True, "output_path": csv_path, "job_name": "run1"}
    c["wandb"] = {"enabled": wandb_on, "project": "strata-test", "group": None}
    path = os.path.join(tmp, "cfg.json")
    with open(path, "w") as f:
        json.dump(c, f)
    return path


def train(binary, cfg, tmp, python=sys.executable):
    env = dict(os.environ, STRATA_PYTHON=python, WANDB_DIR=tmp)
    for key in ("WANDB_MODE", "WANDB_API_KEY"):  # offline, whatever the caller's environment says
        env.pop(key, None)
    return subprocess.run([binary, "train", "--config", cfg, "--steps", str(STEPS), "--metrics",
                           os.path.join(tmp, "m.jsonl")], capture_output=True, text=True, cwd=tmp, env=env)


def wandb_history(tmp):
    """The offline run's history records, as the wandb client's own reader prints them."""
    wandb_cli = os.path.join(os.path.dirname(sys.executable), "wandb")
    r = subprocess.run([wandb_cli, "leet", "inspect", "--json", os.path.join(tmp, "wandb", "latest-run")],
                       capture_output=True, text=True, timeout=120)
    records = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    return r.returncode, [x["history"] for x in records if x.get("type") == "history"], records


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

        # The offline W&B run the official client wrote, read back by the client itself.
        check("monitors: " in r.stdout + r.stderr and "wandb offline '" in r.stdout + r.stderr,
              "the start-up line names the offline W&B run folder")
        rc, history, records = wandb_history(tmp)
        runs = [x["run"] for x in records if x.get("type") == "run"]
        check(rc == 0 and runs and runs[0].get("project") == "strata-test",
              f"wandb reads the offline run back (rc {rc}, project {runs[0].get('project') if runs else None})")
        by_step = {}
        for h in history:
            by_step.setdefault(int(h.get("step", {}).get("num", 0)), {}).update(h["item"])
        for tag, key in [("Train/Samples/train_loss", "loss"), ("Train/Samples/lr", "lr"),
                         ("Train/Samples/grad_norm", "grad_norm")]:
            want = [((j["step"] + 1) * batch, j[key]) for j in steps]
            got = [(s, by_step[s][tag]) for s in sorted(by_step) if tag in by_step[s]]
            same = len(got) == len(want) and all(
                gs == s and math.isclose(g, v, rel_tol=1e-12, abs_tol=1e-30) for (gs, g), (s, v) in zip(got, want))
            check(same, f"the W&B history holds {tag}: {len(got)} steps, the JSONL's {len(want)}")
        got = [(s, by_step[s]["Train/Samples/eval_loss"]) for s in sorted(by_step)
               if "Train/Samples/eval_loss" in by_step[s]]
        check([s for s, _ in got] == [j["step"] * batch for j in evals] and
              all(math.isclose(g, j["eval_loss"], rel_tol=1e-12) for (_, g), j in zip(got, evals)),
              f"the W&B history holds the {len(got)} evaluations")

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
        # A wandb section with no client: an error at start-up that says how to mend it.
        r = train(binary, config(tmp, tb, csv), tmp, python=os.path.join(tmp, "no-such-python"))
        out = r.stdout + r.stderr
        check(r.returncode != 0 and "wandb: cannot start" in out and "STRATA_PYTHON" in out and "train step" not in out,
              f"a wandb section without a client stops the run at start-up (rc {r.returncode}) {out[-300:]}")
        stopped_run(binary, tmp)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


def stopped_run(binary, tmp):
    """Ctrl-C during a run with a wandb section: the stop (which kills this process's other
    children) leaves the client to finish its run."""
    folder = os.path.join(tmp, "stopped")
    os.makedirs(folder)
    metrics = os.path.join(folder, "m.jsonl")
    env = dict(os.environ, STRATA_PYTHON=sys.executable, WANDB_DIR=folder)
    env.pop("WANDB_MODE", None)
    p = subprocess.Popen([binary, "train", "--config", config(folder, os.path.join(folder, "tb"),
                          os.path.join(folder, "csv")), "--steps", "100000", "--metrics", metrics],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=folder, env=env)
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None:
        if os.path.exists(metrics) and sum(1 for line in open(metrics) if '"loss"' in line) >= 3:
            break
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    rc = p.wait(timeout=120)
    deadline = time.time() + 60  # the client finishes its run after the trainer is gone
    tmp_folder = os.path.join(folder, "wandb", "latest-run")
    while time.time() < deadline:
        _, history, records = wandb_history(folder)
        if any(x.get("type") == "exit" for x in records):
            break
        time.sleep(0.5)
    check(rc == 128 + signal.SIGINT and any(x.get("type") == "exit" for x in records) and len(history) >= 3,
          f"a run stopped by SIGINT (rc {rc}) leaves its W&B run finished with its {len(history)} logged steps "
          f"({os.path.basename(os.path.realpath(tmp_folder))})")


if __name__ == "__main__":
    sys.exit(main())
