#!/usr/bin/env bash
# The sanitizer run (part of the README's test command): builds the GoogleTest suite and the
# conformance runner with AddressSanitizer + UndefinedBehaviorSanitizer into
# ${BUILD_DIR:-build-asan} and runs them through ctest. Any finding (invalid access, leak,
# undefined behaviour) aborts the test that hit it and fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-asan}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DONNXTRAIN_SANITIZE=ON -DONNXTRAIN_BUILD_PYTHON=OFF \
  ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" --target onnxtrain_tests onnxtrain_conformance fuzz_replays
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1${ASAN_EXTRA:+:$ASAN_EXTRA}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0"
cd "$BUILD_DIR"
ctest --output-on-failure -j "$JOBS" ${CTEST_ARGS:-}
