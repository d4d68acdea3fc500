#!/usr/bin/env bash
# Installs, builds and runs the whole test suite: the main build, then the sanitizer build
# (AddressSanitizer + UBSan) of the store and kernel tests, which need no LibTorch, then
# each parser's libFuzzer target for a bounded time (STRATA_FUZZ_SECONDS, default 30).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --all --asan --fuzz "$@"
status=0
echo "== ctest build/ =="
ctest --test-dir build --output-on-failure -j 2 || status=1
echo "== ctest build-asan/ (ASan + UBSan) =="
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j 2 || status=1
echo "== fuzzing (corpus replay + ${STRATA_FUZZ_SECONDS:-30} s per target) =="
scripts/fuzz.sh "${STRATA_FUZZ_SECONDS:-30}" || status=1
exit $status
