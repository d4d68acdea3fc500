#!/usr/bin/env bash
# Python peers for the Hugging Face interop tests (tests/hf/hf_test.cc): transformers
# and safetensors in .venv, next to the torch that scripts/setup_peers.sh makes importable.
# Idempotent (a marker file skips finished work). Without them those tests skip, saying why.
# No network is needed by the tests themselves: the models are random-initialised from a
# small config and saved with save_pretrained at test time.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=$root/.venv/bin/python
log() { printf '[setup_hf] %s\n' "$*" >&2; }

[ -x "$py" ] || { log ".venv missing: run scripts/setup.sh first"; exit 1; }
marker=$root/.venv/hf.ok
if [ -f "$marker" ]; then log "transformers already installed ($marker)"; exit 0; fi
[ -f "$root/.venv/peers.ok" ] || bash "$root/scripts/setup_peers.sh"
log "installing transformers and safetensors (torch is not reinstalled: transformers does not require it)"
"$py" -m pip install -q --disable-pip-version-check transformers safetensors
"$py" "$root/tests/hf/hf_models.py" check
touch "$marker"
log "done"
