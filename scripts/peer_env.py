"""`import torch` for the Python peers (the Hugging Face and DeepSpeed comparisons, bench/).

PyPI's torch in .venv is a CUDA build installed without its CUDA wheels (scripts/setup.sh: the
C++ build needs only libtorch_cpu), and it dlopens CUDA libraries even on a CPU machine: from
/usr/local/cuda/lib64 and from the few nvidia wheels scripts/setup_peers.sh installs.
ensure_library_path() re-executes the calling script once with LD_LIBRARY_PATH naming them.
"""
import glob
import os
import site
import sys


def ensure_library_path():
    if os.environ.get("STRATA_PEER_ENV") == "1":
        return
    dirs = ["/usr/local/cuda/lib64"]
    for packages in site.getsitepackages():  # the venv's, when run by .venv/bin/python
        dirs += sorted(glob.glob(os.path.join(packages, "nvidia", "*", "lib")))
    old = os.environ.get("LD_LIBRARY_PATH", "")
    env = dict(os.environ, STRATA_PEER_ENV="1", LD_LIBRARY_PATH=":".join(dirs + ([old] if old else [])))
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def missing_peers(why):
    """Ends a comparison whose peers cannot be imported: skipped (exit 77, ctest's skip), or
    failed where STRATA_REQUIRE_PEERS=1 (scripts/test.sh, so CI), where a skip would hide a check."""
    print(why)
    sys.exit(1 if os.environ.get("STRATA_REQUIRE_PEERS") == "1" else 77)
