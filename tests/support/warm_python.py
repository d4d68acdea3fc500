"""A warm Python for the suite's peer scripts (support/warm_python.h is its client).

  warm_python.py NAME IDLE_SECONDS

Binds the abstract Unix socket NAME (a second server of the same NAME exits at once), imports
torch, numpy, safetensors and transformers once, and then serves: each connection sends one
JSON line {"script", "args" (split as the shell splits words), "cwd", "env"}, which a forked
child runs as __main__ with that working folder, environment and argv, its stdout and stderr
captured; the reply is a JSON line {"rc": exit code, 128 + N for signal N as a shell says it}
and then the output.
Importing transformers costs seconds a run and the comparisons run the scripts over a hundred
times in a suite: forking a process that has imported them costs milliseconds. Exits after
IDLE_SECONDS without a connection, and never holds the terminal or the caller's pipes.
"""
import json
import os
import runpy
import select
import shlex
import signal
import socket
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
from peer_env import ensure_library_path  # noqa: E402  (scripts/peer_env.py)


def run_worker(request, out_fd):
    """In the forked worker: becomes `script args` and never returns."""
    try:
        os.chdir(request["cwd"])
        env = dict(request["env"])
        # Already on the library path the peers need (peer_env.py): no re-execution.
        for key in ("STRATA_PEER_ENV", "LD_LIBRARY_PATH"):
            if key in os.environ:
                env[key] = os.environ[key]
        os.environ.clear()
        os.environ.update(env)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        script = request["script"]
        sys.argv = [script] + shlex.split(request["args"])
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        rc = 0
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            if e.code is None:
                rc = 0
            elif isinstance(e.code, int):
                rc = e.code
            else:
                print(e.code, file=sys.stderr)
                rc = 1
        except BaseException:  # noqa: BLE001 - reported as the script's own failure would be
            traceback.print_exc()
            rc = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc & 0xFF)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


def serve(conn):
    """In the forked handler: one request, its worker, the reply."""
    with conn, tempfile.TemporaryFile() as out:
        request = json.loads(conn.makefile("rb").readline())
        pid = os.fork()
        if pid == 0:
            run_worker(request, out.fileno())
        _, status = os.waitpid(pid, 0)
        rc = os.waitstatus_to_exitcode(status)
        out.seek(0)
        conn.sendall(json.dumps({"rc": rc if rc >= 0 else 128 - rc}).encode() + b"\n" + out.read())


def main():
    ensure_library_path()
    name, idle = sys.argv[1], float(sys.argv[2])
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind("\0" + name)
    except OSError:
        return 0  # another server has this name
    server.listen(64)  # clients wait in the backlog while the imports below run
    try:  # where they are missing, the scripts find out themselves (and skip, or fail)
        import numpy  # noqa: F401
        import safetensors.torch  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
        from transformers import AutoConfig, AutoModelForCausalLM  # noqa: F401  (its lazy modules)
    except Exception:  # noqa: BLE001
        pass
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
    while True:
        ready, _, _ = select.select([server], [], [], idle)
        if not ready:
            return 0
        conn, _ = server.accept()
        if os.fork() == 0:
            server.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # (the handler waits for its worker)
            try:
                serve(conn)
            finally:
                os._exit(0)
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
