"""Two nodes without a shared file system, simulated on one machine: torchrun --nnodes 2 (c10d
rendezvous), one rank per node, each node with a --save folder and a swap folder of its own and
checkpoint.use_node_local_storage true. The run trains, saves every 4 steps (each node's folder
holds its rank's file and the manifest of both), is killed (SIGKILL to both nodes, mid-run),
and is resumed by torchrun from each node's own folder: every step after the checkpoint has the
losses of an uninterrupted 2-rank run bit for bit. Then one node's newest checkpoint is removed
(a save cut short between the two nodes' commits): the resume takes, on both nodes, the newest
step both folders hold, again bit for bit.

Usage: node_local_test.py STRATA_BINARY. Exits 77 where torch (for torchrun) cannot be imported,
unless STRATA_REQUIRE_PEERS=1 (CI), where that fails.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from peer_env import ensure_library_path, missing_peers  # noqa: E402  (scripts/peer_env.py)

ensure_library_path()
try:
    import psutil
    import torch.distributed.run  # noqa: F401  (torchrun)
except Exception as e:  # noqa: BLE001 - any import failure means: not here
    missing_peers(f"torch (torchrun) or psutil not importable: {e}")

STEPS = 40
MODEL = ["--set", "strata.model.n_layer=4", "--set", "strata.model.d_model=128", "--set", "strata.model.n_head=4",
         "--set", "strata.save_interval=4", "--set", "strata.eval_interval=0"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def losses(path):
    out = {}
    if os.path.exists(path):
        for line in open(path):
            j = json.loads(line)
            if "loss" in j and "step" in j:
                out[j["step"]] = j["loss"]
    return out


def node_args(binary, folder, node, extra):
    return [binary, "train", "--steps", str(STEPS), *MODEL, "--set", "checkpoint.use_node_local_storage=true",
            "--set", f"zero_optimization.offload_param.nvme_path={folder}/{node}/swap",
            "--set", f"zero_optimization.offload_optimizer.nvme_path={folder}/{node}/swap",
            "--save", f"{folder}/{node}/ckpt", "--metrics", f"{folder}/{node}/metrics.jsonl", *extra]


STARTED = []  # every node started: killed on any way out, so no rank outlives the test's folder


def start_nodes(binary, folder, extra_of):
    """Both nodes under torchrun, each in a process group of its own (killed whole)."""
    port = free_port()
    procs = []
    for node in ("a", "b"):
        os.makedirs(f"{folder}/{node}", exist_ok=True)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"strata-{port}",
               "--max-restarts", "0", "--no-python", *node_args(binary, folder, node, extra_of(node))]
        log = open(f"{folder}/{node}/torchrun.log", "a")
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    STARTED.extend(procs)
    return procs


def kill_node(p):
    """SIGKILL to a node: torchrun and the ranks it started (in sessions of their own)."""
    family = [p.pid]
    try:
        family += [c.pid for c in psutil.Process(p.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        pass
    for pid in reversed(family):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.wait()


def wait_all(procs, folder, timeout=240):
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_node(p)
    for node, p in zip(("a", "b"), procs):
        if p.returncode != 0:
            sys.exit(f"node {node} exited {p.returncode}:\n" + open(f"{folder}/{node}/torchrun.log").read()[-4000:])


def resume(binary, folder, metrics):
    for node in ("a", "b"):  # the earlier run's metrics kept aside, under `metrics`
        if os.path.exists(f"{folder}/{node}/metrics.jsonl"):
            os.replace(f"{folder}/{node}/metrics.jsonl", f"{folder}/{node}/{metrics}")
    wait_all(start_nodes(binary, folder, lambda node: ["--resume", f"{folder}/{node}/ckpt"]), folder)
    logs = open(f"{folder}/a/torchrun.log").read() + open(f"{folder}/b/torchrun.log").read()
    return losses(f"{folder}/a/metrics.jsonl") or losses(f"{folder}/b/metrics.jsonl"), logs


def main():
    with tempfile.TemporaryDirectory(prefix="strata-test-nodes-") as folder:
        try:
            check(sys.argv[1], folder)
        finally:  # before the folder goes: no rank outlives it
            for p in STARTED:
                if p.poll() is None:
                    kill_node(p)


def check(binary, folder):
    # The uninterrupted run: 2 ranks on one machine, one shared folder.
    ref = subprocess.run([binary, "train", "--nproc", "2", "--steps", str(STEPS), *MODEL,
                          "--set", f"zero_optimization.offload_param.nvme_path={folder}/ref",
                          "--set", f"zero_optimization.offload_optimizer.nvme_path={folder}/ref",
                          "--metrics", f"{folder}/ref.jsonl"], capture_output=True, text=True)
    if ref.returncode != 0:
        sys.exit(f"the uninterrupted run failed:\n{ref.stdout}\n{ref.stderr}")
    want = losses(f"{folder}/ref.jsonl")

    # Two nodes, killed once both folders hold a checkpoint and the run has gone on past it.
    procs = start_nodes(binary, folder, lambda node: [])
    deadline = time.time() + 240
    while time.time() < deadline:
        done = losses(f"{folder}/a/metrics.jsonl")
        if all(os.path.exists(f"{folder}/{n}/ckpt/latest") for n in "ab") and done and max(done) >= 13:
            break
        if any(p.poll() is not None for p in procs):
            sys.exit("a node ended before it was killed:\n" + open(f"{folder}/a/torchrun.log").read()[-3000:])
        time.sleep(0.01)
    for p in procs:
        kill_node(p)
    killed_at = max(losses(f"{folder}/a/metrics.jsonl"))
    for node, other in (("a", "1"), ("b", "0")):
        step = open(f"{folder}/{node}/ckpt/latest").read().strip()
        held = sorted(os.listdir(f"{folder}/{node}/ckpt/{step}"))
        if len(held) != 2 or "manifest.json" not in held or f"rank{other}.safetensors" in held:
            sys.exit(f"node {node}'s {step} holds {held}: its own rank's file and the manifest expected")
    if killed_at >= STEPS - 1:
        sys.exit(f"the run was not killed before its end (step {killed_at})")

    got, logs = resume(binary, folder, "killed.jsonl")
    first = min(got)
    if first % 4 != 0 or first > killed_at or "resumed from" not in logs:
        sys.exit(f"resumed at step {first} after a kill at step {killed_at}:\n{logs[-3000:]}")
    bad = [s for s in got if got[s] != want[s]]
    if bad or max(got) != STEPS - 1:
        sys.exit(f"resumed steps {min(got)}..{max(got)} differ from the uninterrupted run at {bad[:5]}")
    print(f"killed at step {killed_at}, resumed from each node's folder at step {first}: steps {first}..{STEPS - 1} "
          "bit for bit the uninterrupted 2-rank run")

    # A save cut short between the nodes' commits: node b's newest step is gone.
    steps_b = sorted(d for d in os.listdir(f"{folder}/b/ckpt") if d.startswith("step_"))
    newest, before = steps_b[-1], steps_b[-2]
    shutil.rmtree(f"{folder}/b/ckpt/{newest}")
    with open(f"{folder}/b/ckpt/latest", "w") as f:
        f.write(before + "\n")
    got, logs = resume(binary, folder, "cut.jsonl")
    if "newest checkpoints differ" not in logs or min(got) != int(before[5:]):
        sys.exit(f"after a save cut short on node b (newest {newest}, before it {before}): resumed at "
                 f"{min(got) if got else None}\n{logs[-3000:]}")
    if any(got[s] != want[s] for s in got):
        sys.exit("the resume from the step both nodes hold differs from the uninterrupted run")
    print(f"a save cut short on one node: both resumed from {before}, bit for bit")


if __name__ == "__main__":
    main()
