#!/usr/bin/env bash
# Installs, builds and runs the whole test suite: the main build (with the Hugging Face and
# PEFT peers installed, so that every interop comparison runs), then the sanitizer build
# (AddressSanitizer + UBSan) of the store and kernel tests, which need no LibTorch, then
# each parser's libFuzzer target for a bounded time (STRATA_FUZZ_SECONDS, default 15; two at a time).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --all --asan --fuzz "$@"
# The Hugging Face and PEFT comparisons need their Python peers; here they are required,
# so a comparison that could not run fails instead of skipping.
scripts/setup_hf.sh
export STRATA_REQUIRE_PEERS=1
status=0
echo "== ctest build/ =="
ctest --test-dir build --output-on-failure -j 2 || status=1
echo "== ctest build-asan/ (ASan + UBSan) =="
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j 2 || status=1
echo "== fuzzing (corpus replay + ${STRATA_FUZZ_SECONDS:-15} s per target) =="
scripts/fuzz.sh "${STRATA_FUZZ_SECONDS:-15}" || status=1
exit $status
