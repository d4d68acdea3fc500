#!/usr/bin/env bash
# The Python peers the test suite compares with, in .venv: transformers, tokenizers,
# safetensors, peft and bitsandbytes (tests/hf, tests/data/prepare_data_test.py), DeepSpeed's schedulers
# (tests/config/deepspeed_lr.py) and pyarrow and datasets (scripts/prepare_data.py's Parquet and
# datasets folder inputs), pinned in scripts/hf-requirements.txt, next to the torch that
# scripts/setup_peers.sh --import-only makes importable. Run by scripts/test.sh, so that those
# comparisons run in CI; idempotent (a marker file naming the requirements' hash skips
# finished work) and cache-friendly (pip's cache is reused). No network is needed by the tests
# themselves: the models are random-initialised from a small config and saved at test time.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=$root/.venv/bin/python
log() { printf '[setup_hf] %s\n' "$*" >&2; }

[ -x "$py" ] || { log ".venv missing: run scripts/setup.sh first"; exit 1; }
reqs=$root/scripts/hf-requirements.txt
marker=$root/.venv/hf-$(sha256sum "$reqs" | cut -c1-12).ok
if [ -f "$marker" ]; then log "Hugging Face peers already installed ($marker)"; exit 0; fi
bash "$root/scripts/setup_peers.sh" --import-only
log "installing transformers, tokenizers, safetensors, peft, trl, bitsandbytes, deepspeed, pyarrow, datasets, tensorboard, wandb (scripts/hf-requirements.txt, no deps: torch is not reinstalled)"
"$py" -m pip install -q --disable-pip-version-check --no-deps -r "$reqs"
"$py" "$root/tests/hf/hf_models.py" check peft bitsandbytes
"$py" "$root/tests/config/deepspeed_lr.py" 0.1 0 0.1 10 20 0 0 1 >/dev/null
"$py" -c "import pyarrow.parquet, datasets"
touch "$marker"
log "done"
