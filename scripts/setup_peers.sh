#!/usr/bin/env bash
# Python peers for `strata bench adam`: DeepSpeed's CPU Adam (and `import torch` working).
# Idempotent and cache-friendly (pip's cache is reused; a marker file skips finished work).
# Called by `scripts/setup.sh --peers`; may also be run on its own.
#
# Why the extra wheels: .venv's torch==2.11.0 is PyPI's CUDA build installed without its
# dependencies (the C++ build needs only libtorch_cpu). `import torch` still dlopens the CUDA
# libraries. Most of them live in /usr/local/cuda/lib64; the three that do not are installed
# here as wheels: cuSPARSELt, NVSHMEM and cuFile (pinned to what cuda-toolkit==13.0.2 pins).
# Python must then run with LD_LIBRARY_PATH naming them and /usr/local/cuda/lib64;
# bench/deepspeed_adam.py sets that itself (it re-executes itself with the variable set).
#
# torch went in with --no-deps, so its pure-Python requirements (sympy, networkx, jinja2, ...)
# are installed here, with what DeepSpeed imports (numpy, pydantic, ...), all pinned in
# scripts/peers-requirements.txt. DeepSpeed itself is installed with --no-deps (its
# requirements would pull torch's CUDA stack again). Its CPU Adam op is JIT-built by ninja
# on first use (cached in ~/.cache/torch_extensions).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=$root/.venv/bin/python
pip=("$py" -m pip install -q --disable-pip-version-check)
deepspeed_version=0.19.8
log() { printf '[setup_peers] %s\n' "$*" >&2; }

# --import-only: only what `import torch` needs (the Hugging Face peers, scripts/setup_hf.sh),
# not DeepSpeed and its JIT-built op.
import_only=0
[ "${1:-}" = "--import-only" ] && import_only=1

[ -x "$py" ] || { log ".venv missing: run scripts/setup.sh first"; exit 1; }
marker=$root/.venv/peers-adam-lion-adagrad.ok  # named after the ops it builds: a new op, a new marker
import_marker=$root/.venv/import-torch.ok
if [ -f "$marker" ]; then log "peers already installed ($marker)"; exit 0; fi

if [ ! -f "$import_marker" ]; then
  log "installing the CUDA wheels that 'import torch' needs beyond /usr/local/cuda"
  "${pip[@]}" --no-deps nvidia-cusparselt-cu13==0.8.0 nvidia-nvshmem-cu13==3.4.5 nvidia-cufile==1.15.1.6
  log "installing torch's and DeepSpeed's Python requirements (scripts/peers-requirements.txt)"
  "${pip[@]}" --no-deps -r "$root/scripts/peers-requirements.txt"  # complete and pinned: no resolver
  touch "$import_marker"
fi
[ $import_only = 1 ] && exit 0
log "installing deepspeed==$deepspeed_version (no deps)"
"${pip[@]}" --no-deps "deepspeed==$deepspeed_version"

# Build DeepSpeed's CPU Adam, Lion and Adagrad once now, so that the first bench run does not
# pay for them.
for optimizer in adam lion adagrad; do
  log "JIT-building DeepSpeed's CPU $optimizer op (first time: about a minute)"
  out=$("$py" "$root/bench/deepspeed_adam.py" --warmup --threads 2 --optimizer $optimizer)
  log "$out"
  case "$out" in *"deepspeed cpu $optimizer ok"*) ;; *) exit 1 ;; esac
done
touch "$marker"
log "done"
