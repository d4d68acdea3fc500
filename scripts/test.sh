#!/usr/bin/env bash
# Installs, builds and runs the whole test suite: the main build, then the sanitizer build
# (AddressSanitizer + UBSan) of the store and kernel tests, which need no LibTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --all --asan "$@"
status=0
echo "== ctest build/ =="
ctest --test-dir build --output-on-failure -j 2 || status=1
echo "== ctest build-asan/ (ASan + UBSan) =="
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j 2 || status=1
exit $status
