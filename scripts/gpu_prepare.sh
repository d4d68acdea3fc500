#!/usr/bin/env bash
# Prepares a GPU run (DESIGN.md, "Running on a GPU machine"): the GPU machine has CUDA 13,
# PyTorch 2.11 with CUDA and Python 3.12 but no package registry, so everything else the
# build and the peer benchmarks need is fetched HERE into the git-ignored .device/ folder,
# which travels with the working tree (device tool: carry [".device"]):
#   .device/debs/    Debian packages the build needs (unpacked there with dpkg -x)
#   .device/wheels/  cmake, ninja, DeepSpeed (built here from PyPI's sdist) and its
#                    dependencies, for CPython 3.12 x86-64 (numpy and the rest of PyTorch's
#                    own dependencies are on the machine already; the peers' model is a
#                    plain-PyTorch LLaMA, bench/peers/llama.py, so no transformers). The
#                    device tool carries at most 64 MiB in all: this stays near 45 MiB.
# Then, on the GPU machine: bash scripts/gpu_run.sh OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
out=.device
mkdir -p "$out/debs" "$out/wheels"
log() { printf '[gpu_prepare] %s\n' "$*" >&2; }

debs=(liburing2 liburing-dev libdnnl2 libdnnl-dev libgtest-dev libgmock-dev googletest nlohmann-json3-dev libcli11-dev
      libxxhash0 libxxhash-dev libfmt9 libfmt-dev libaio1 libaio-dev fio)
log "downloading ${#debs[@]} Debian packages"
(cd "$out/debs" && apt-get download "${debs[@]}" >/dev/null)

py=(--python-version 3.12 --implementation cp --abi cp312 --platform manylinux2014_x86_64
    --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --only-binary=:all:)
log "downloading wheels for CPython 3.12"
pip download -q --no-deps -d "$out/wheels" "${py[@]}" cmake ninja hjson py-cpuinfo pydantic pydantic-core msgpack \
  einops nvidia-ml-py tqdm psutil packaging annotated-types typing-inspection

if ! ls "$out/wheels"/deepspeed-*.whl >/dev/null 2>&1; then
  log "building a DeepSpeed wheel from PyPI's sdist (ops are built at first use on the GPU machine)"
  DS_BUILD_OPS=0 pip wheel -q --no-deps --no-build-isolation -w "$out/wheels" deepspeed
fi
du -sh "$out" | sed 's/^/[gpu_prepare] .device: /' >&2
