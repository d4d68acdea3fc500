#!/usr/bin/env bash
# Installs what is missing (Debian packages, LibTorch from PyPI into .venv), then configures
# and builds Strata into build/. Idempotent: a second run with nothing changed takes seconds.
#   scripts/setup.sh            the main job's binary: build/strata (nothing else is compiled)
#   scripts/setup.sh --all      every target of build/: the test executables too (scripts/test.sh)
#   scripts/setup.sh --asan     also the AddressSanitizer + UBSan build of the store and kernels (build-asan/)
#   scripts/setup.sh --peers    also the Python peers for bench/ (DeepSpeed, transformers)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
want_asan=0; want_peers=0; want_all=0; want_fuzz=0
for a in "$@"; do
  case "$a" in
    --all) want_all=1 ;;
    --asan) want_asan=1 ;;
    --fuzz) want_fuzz=1 ;;
    --peers) want_peers=1 ;;
    *) echo "setup.sh: unknown option '$a' (known: --all --asan --fuzz --peers)" >&2; exit 2 ;;
  esac
done

log() { printf '[setup] %s\n' "$*" >&2; }

# --- Debian packages -------------------------------------------------------------------
debs=(build-essential cmake ninja-build ccache pkg-config python3-venv
      liburing-dev libdnnl-dev libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev
      libcli11-dev libxxhash-dev libfmt-dev libaio-dev fio zlib1g-dev)
[ $want_fuzz = 1 ] && debs+=(clang)  # libFuzzer (scripts/fuzz.sh)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- LibTorch from PyPI (torch==2.11.0, the GPU machine's version) ----------------------
# Only the C++ headers and libtorch_cpu/libc10 are used, so the wheel is installed without
# its CUDA dependencies (gigabytes that a CPU build never loads). pip's cache is reused.
py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  "$py" -m venv .venv || { log "python3 -m venv failed"; exit 1; }
fi
if [ ! -f .venv/torch.ok ]; then
  log "installing torch==2.11.0 (no CUDA dependencies) into .venv"
  .venv/bin/pip install -q --disable-pip-version-check --no-deps torch==2.11.0
  .venv/bin/python -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)'
  touch .venv/torch.ok
fi
if [ $want_peers = 1 ] && [ -x scripts/setup_peers.sh ]; then
  scripts/setup_peers.sh
fi

log "installing took ${SECONDS}s"
installed_at=$SECONDS

# --- configure and build ---------------------------------------------------------------
jobs=${STRATA_JOBS:-$(nproc)}
# ccache keyed on paths relative to the checkout, so a fresh clone reuses earlier builds.
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true
configure() {  # dir, extra cmake args...
  local dir=$1; shift
  if [ ! -f "$dir/build.ninja" ]; then
    log "configuring $dir"
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DSTRATA_PYTHON="$root/.venv/bin/python" "$@" >/dev/null
  fi
}
configure build
if [ $want_all = 1 ]; then
  log "building build/: every target ($jobs jobs)"
  cmake --build build -j "$jobs"
else
  # The main job needs only the binary; the tests are built by scripts/test.sh (--all).
  log "building build/strata ($jobs jobs)"
  cmake --build build -j "$jobs" --target strata
fi
if [ $want_asan = 1 ]; then
  # Unoptimised, with line tables only: the sanitizers catch the same faults and name the same
  # lines, and the suites compile in a quarter of -O2 -g's time.
  configure build-asan -DSTRATA_SANITIZE=ON -DSTRATA_WITH_TORCH=OFF -DSTRATA_CUDA_COMPILE=OFF \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG=-g1 -DCMAKE_CXX_FLAGS_DEBUG=-g1
  log "building build-asan/ (base, store, kernel and bench-report tests)"
  cmake --build build-asan -j "$jobs" --target base_tests offload_tests kernels_tests bench_tests
fi
log "building took $((SECONDS - installed_at))s"
