#!/usr/bin/env bash
# Builds the libFuzzer targets (build-fuzz/, clang, ASan + UBSan) and runs each for SECONDS
# (default 60) from its corpus in tests/fuzz/corpus/<target>/, after replaying that corpus
# (every crash ever found is kept there as a regression input). New inputs go to a scratch
# folder, never into the repository. Exit 1 if any target crashes; the crashing input is
# left in build-fuzz/crashes/.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}; shift || true
targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(fuzz_config fuzz_safetensors fuzz_manifest fuzz_tokens fuzz_examples fuzz_hf_config fuzz_estimate)
command -v clang++ >/dev/null || { echo "[fuzz] clang++ is missing: run scripts/setup.sh --fuzz" >&2; exit 1; }
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
if [ ! -f build-fuzz/build.ninja ]; then
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DSTRATA_FUZZ=ON -DSTRATA_WITH_TORCH=OFF -DSTRATA_BUILD_TESTS=OFF \
    -DSTRATA_CUDA_COMPILE=OFF >/dev/null
fi
cmake --build build-fuzz -j "${STRATA_JOBS:-$(nproc)}" --target "${targets[@]}"
mkdir -p build-fuzz/crashes
# One target: replay its corpus, then fuzz; the outcome goes to build-fuzz/<target>.result,
# and build-fuzz/<target>.failed marks a failure.
fuzz_one() {
  local t=$1 corpus=tests/fuzz/corpus/${1#fuzz_} scratch=build-fuzz/scratch/$1
  mkdir -p "$scratch"; rm -f build-fuzz/$t.failed build-fuzz/$t.result
  if ! build-fuzz/tests/fuzz/$t -runs=0 "$corpus" >build-fuzz/$t.replay.log 2>&1; then
    { echo "== $t: replaying $corpus FAILED =="; tail -30 build-fuzz/$t.replay.log; } >build-fuzz/$t.result
    touch build-fuzz/$t.failed; return
  fi
  if build-fuzz/tests/fuzz/$t -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix=build-fuzz/crashes/$t- "$scratch" "$corpus" >build-fuzz/$t.log 2>&1; then
    { echo "== $t: replayed $corpus, then ${secs}s of fuzzing =="
      { grep -E "stat::number_of_executed_units|stat::peak_rss_mb" build-fuzz/$t.log || true; } | tr '\n' ' '; echo; } \
      >build-fuzz/$t.result
  else
    { echo "== $t: CRASHED (input in build-fuzz/crashes/) =="; tail -40 build-fuzz/$t.log; } >build-fuzz/$t.result
    touch build-fuzz/$t.failed
  fi
}
# Each target is one process on one core: run as many at once as there are cores.
parallel=${STRATA_JOBS:-$(nproc)}
echo "== fuzzing ${#targets[@]} targets, ${secs}s each, $parallel at a time =="
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
  fuzz_one "$t" &
done
wait
status=0
for t in "${targets[@]}"; do
  cat "build-fuzz/$t.result" 2>/dev/null || { echo "== $t: no result =="; status=1; }
  [ ! -e "build-fuzz/$t.failed" ] || status=1
done
exit $status
