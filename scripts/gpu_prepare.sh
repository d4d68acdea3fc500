#!/usr/bin/env bash
# Prepares a GPU run (docs/DESIGN.md, "Running on a GPU machine"). The GPU machine has CUDA 13,
# PyTorch 2.11 with CUDA and Python 3.12 but no package registry, and gives 15 minutes of
# device time per use, its start included; so everything is made HERE, into the git-ignored
# .device/ folder, whose folders are carried along with the working tree:
#   .device/bin/     the GPU binaries (strata, strata-cuda-bench, the gpu-labelled test
#                    executables), built here with -DSTRATA_CUDA=ON against .venv's LibTorch
#                    when it is the GPU machine's build (torch 2.11.0+cu130): a build there
#                    would spend minutes of its device time. BUILT_FROM says from what.
#   .device/debs/    Debian packages: the binaries' libraries (liburing, oneDNN, xxhash) and
#                    fio, unpacked there with dpkg -x; the headers too, for a build there
#                    when the binaries cannot run (another torch, a library not found).
#   .device/wheels/  DeepSpeed (built here from PyPI's sdist) and those of its dependencies the
#                    machine lacks, for CPython 3.12 x86-64: only for the DeepSpeed peers and
#                    DeepSpeed's CPU Adam in `bench adam` (the peers' model is a plain-PyTorch
#                    LLaMA, bench/peers/llama.py, so no transformers).
# (ocl-icd-libopencl1: Debian's oneDNN links libOpenCL.so.1, which the GPU machine's image may lack.)
# At most 64 MiB travel with the working tree in all; this prints the sizes and the folders to carry.
# Then, on the GPU machine: bash scripts/gpu_run.sh OUT_DIR [STAGE ...]
#   scripts/gpu_prepare.sh              all three
#   scripts/gpu_prepare.sh --no-wheels  bin and debs only (no DeepSpeed peer)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=.device
want_wheels=1
[ "${1:-}" = "--no-wheels" ] && want_wheels=0
mkdir -p "$out/debs" "$out/bin"
rm -rf "$out/debs/fio"
log() { printf '[gpu_prepare] %s\n' "$*" >&2; }

debs=(liburing2 liburing-dev libdnnl2 libdnnl-dev libgtest-dev libgmock-dev googletest nlohmann-json3-dev libcli11-dev
      libxxhash0 libxxhash-dev libfmt9 libfmt-dev libaio1 libaio-dev fio ocl-icd-libopencl1)
log "downloading ${#debs[@]} Debian packages"
(cd "$out/debs" && apt-get download "${debs[@]}" >/dev/null)
# fio's whole library closure but the C and C++ runtimes (the image's are newer), as the .so
# files alone in one archive: an Ubuntu image lacks many of them (GlusterFS, Ceph, PMDK, RDMA,
# libtirpc), and gpu_run.sh gives them to fio alone through a wrapper, so they shadow nothing.
fio_pkgs=$(for l in $(ldd /usr/bin/fio | awk '$3 ~ /^\// {print $3}'); do
             r=$(readlink -f "$l"); dpkg -S "$r" 2>/dev/null || dpkg -S "${r#/usr}" 2>/dev/null
           done | cut -d: -f1 | sort -u | grep -vx -e libc6 -e 'libstdc++6' -e libgcc-s1)
fio_tmp=$(mktemp -d)
trap 'rm -rf "$fio_tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
(cd "$fio_tmp" && apt-get download $fio_pkgs >/dev/null 2>&1 && mkdir x && for f in *.deb; do dpkg -x "$f" x; done)
# Under a temporary name in the temporary folder, renamed into place once whole.
(cd "$fio_tmp/x" && find . -name '*.so*' \( -type f -o -type l \) -print0 | tar --null -T - -cJf "$fio_tmp/fio-libs.tar.xz")
mv "$fio_tmp/fio-libs.tar.xz" "$out/debs/fio-libs.tar.xz"
log "fio's libraries: $(echo $fio_pkgs | wc -w) packages, $(du -h "$out/debs/fio-libs.tar.xz" | cut -f1)"

# --- the GPU binaries, built here ---------------------------------------------------------
want_torch=2.11.0+cu130  # what the GPU machine's python3 has (docs/DESIGN.md, "Running on a GPU machine")
[ -x .venv/bin/python ] || bash scripts/setup.sh
have_torch=$(.venv/bin/python -c 'import torch; print(torch.__version__)')
rm -f "$out"/bin/*
if [ "$have_torch" != "$want_torch" ]; then
  log "not building the GPU binaries: .venv has torch $have_torch, the GPU machine $want_torch (gpu_run.sh builds there)"
elif ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  log "not building the GPU binaries: no nvcc here (gpu_run.sh builds there)"
else
  log "building the GPU binaries in build-gpu/ (STRATA_CUDA=ON, torch $have_torch)"
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true
  [ -f build-gpu/build.ninja ] || cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON \
    -DSTRATA_PYTHON="$root/.venv/bin/python" >/dev/null
  targets=(strata strata-cuda-bench cuda_tests engine_gpu_tests)
  cmake --build build-gpu -j "${STRATA_JOBS:-$(nproc)}" --target "${targets[@]}"
  cp build-gpu/strata build-gpu/strata-cuda-bench build-gpu/tests/cuda_tests build-gpu/tests/engine_gpu_tests "$out/bin/"
  strip --strip-debug "$out"/bin/*
  printf 'commit %s%s\ntorch %s\n' "$(git rev-parse HEAD)" "$(git diff --quiet HEAD || echo ' (with changes)')" \
    "$have_torch" > "$out/bin/BUILT_FROM"
fi

# --- wheels for the DeepSpeed peer ----------------------------------------------------------
if [ $want_wheels = 1 ]; then
  mkdir -p "$out/wheels"
  py=(--python-version 3.12 --implementation cp --abi cp312 --platform manylinux2014_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --only-binary=:all:)
  log "downloading wheels for CPython 3.12"
  pip download -q --no-deps -d "$out/wheels" "${py[@]}" hjson py-cpuinfo pydantic pydantic-core msgpack \
    einops nvidia-ml-py tqdm psutil packaging annotated-types typing-inspection
  if ! ls "$out/wheels"/deepspeed-*.whl >/dev/null 2>&1; then
    log "building a DeepSpeed wheel from PyPI's sdist (ops are built at first use on the GPU machine)"
    DS_BUILD_OPS=0 pip wheel -q --no-deps --no-build-isolation -w "$out/wheels" deepspeed
  fi
fi

du -sh "$out"/* | sed 's/^/[gpu_prepare] /' >&2
tree_mb=$(( $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) >> 20 ))
log "working tree ${tree_mb} MiB + .device $(du -sm "$out" | cut -f1) MiB (at most 64 MiB travel with the working tree)"
carry='".device/bin", ".device/debs"'
[ $want_wheels = 1 ] && carry="$carry, \".device/wheels\""
log "carry: [$carry]"
