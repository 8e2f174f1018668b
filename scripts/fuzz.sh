#!/usr/bin/env bash
# A libFuzzer campaign against one fuzz target (tests/fuzz/fuzz_TARGET.cpp), built with clang,
# coverage instrumentation, AddressSanitizer and UBSan in build-fuzz/.
#
#   scripts/fuzz.sh TARGET SECONDS [libFuzzer options...]
#
# TARGET: model (bytes -> model -> plan -> run), gradient (model -> gradient graph -> run),
# structured (conformance models and feeds mutated as ONNX), checkpoint, odtc (onnxruntime's
# checkpoint format), npy, npz, csv.
# The corpus grows in build-fuzz/corpus/TARGET (seeded once by tests/fuzz/make_seeds.py or, for
# checkpoints of either format, by the binary itself); crashes land in build-fuzz/artifacts/TARGET/ and make the
# script fail. Each crash, once fixed, belongs in tests/fuzz/regressions/TARGET/ (replayed by ctest).
# The last line is the campaign's summary: executions, coverage, corpus size, findings.
# The structured target's seeds include graphs of the internal operators (com.onnxtrain,
# com.microsoft, ai.onnx.preview.training), made with onnxtrain's Python module from a normal
# build: build/python, or PYTHON_BUILD_DIR/python (without it, the conformance seeds only).
# CORPUS=DIR fuzzes another corpus folder and SEED_ARGS passes options to make_seeds.py, e.g. a
# campaign on the internal operators alone:
#   CORPUS=build-fuzz/corpus/structured-internal SEED_ARGS=--internal-only scripts/fuzz.sh structured 3600
# On several cores pass -fork=N: N child processes fuzz the shared corpus (the executions add up);
# the script passes -ignore_timeouts=0 -ignore_ooms=0 so that a hang or an allocation past
# -malloc_limit_mb stops a forked campaign as it stops a plain one (fork mode ignores them unless told).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  echo "usage: scripts/fuzz.sh TARGET SECONDS [libFuzzer options...]" >&2
  exit 2
fi
TARGET=$1
SECONDS_=$2
shift 2
if [ ! -f "tests/fuzz/fuzz_${TARGET}.cpp" ]; then
  echo "scripts/fuzz.sh: no fuzz target '${TARGET}' (tests/fuzz/fuzz_*.cpp: $(ls tests/fuzz/fuzz_*.cpp | sed 's/.*fuzz_//;s/\.cpp//' | grep -v common | tr '\n' ' '))" >&2
  exit 2
fi
BUILD_DIR=${BUILD_DIR:-build-fuzz}
bash scripts/install_deps.sh --tests --fuzz >/dev/null
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
    -DONNXTRAIN_FUZZ=ON -DONNXTRAIN_BUILD_TESTS=OFF -DONNXTRAIN_BUILD_PYTHON=OFF ${CMAKE_ARGS:-} >/dev/null
fi
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target "fuzz_${TARGET}" >/dev/null
CORPUS=${CORPUS:-"$BUILD_DIR/corpus/$TARGET"}
ARTIFACTS="$BUILD_DIR/artifacts/$TARGET"
mkdir -p "$CORPUS" "$ARTIFACTS"
if [ -z "$(ls -A "$CORPUS")" ]; then
  if [ "$TARGET" = checkpoint ] || [ "$TARGET" = odtc ]; then
    ONNXTRAIN_FUZZ_WRITE_SEEDS="$CORPUS" "$BUILD_DIR/fuzz_${TARGET}"
  else
    PYTHONPATH="${PYTHON_BUILD_DIR:-build}/python${PYTHONPATH:+:$PYTHONPATH}" \
      /usr/bin/python3 tests/fuzz/make_seeds.py "$TARGET" "$CORPUS" ${SEED_ARGS:-}
  fi
fi
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1:allocator_may_return_null=1${ASAN_EXTRA:+:$ASAN_EXTRA}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0"
LOG="$BUILD_DIR/fuzz_${TARGET}.log"
status=0
# max_len: models and structured cases are up to 256 KiB (the conformance seeds); binary data files
# 64 KiB; CSV 8 KiB (its parser's cases show in short texts, and long ones only slow the campaign).
case "$TARGET" in model|gradient|structured) MAXLEN=262144 ;; csv) MAXLEN=8192 ;; *) MAXLEN=65536 ;; esac
# -entropic=0: libFuzzer's entropic schedule updated per-input feature frequencies on every
# execution, 42 % of the structured target's time (perf; 70,000 features): the plain schedule runs
# 1.6x the executions per second. Pass -entropic=1 to have it back.
START=$(date +%s)
"$BUILD_DIR/fuzz_${TARGET}" "$CORPUS" -max_total_time="$SECONDS_" -max_len="$MAXLEN" -timeout=20 -entropic=0 \
  -rss_limit_mb=3072 -malloc_limit_mb=1024 -print_final_stats=1 -ignore_timeouts=0 -ignore_ooms=0 -artifact_prefix="$ARTIFACTS/" "$@" \
  >"$LOG" 2>&1 || status=$?
if grep -q '^INFO: -fork=' "$LOG"; then
  # Fork mode: the parent's running totals, "#N: cov: C ft: F ..." (a child's own stats may follow
  # when the campaign is interrupted, so those are not read); its cov, the union of the children's
  # coverage, is counted otherwise than a plain campaign's (larger: not comparable).
  last=$(grep '^#[0-9]*: cov' "$LOG" | tail -1 || true)
  execs=$(echo "$last" | grep -o '^#[0-9]*' | grep -o '[0-9]*' || true)
else
  last=$(grep -E '^#[0-9]+' "$LOG" | grep 'cov: ' | tail -1 || true)
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$LOG" | tail -1 | grep -o '[0-9]*$' || true)
fi
cov=$(echo "$last" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*' || true)
ft=$(echo "$last" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*' || true)
# slow-unit-* files are inputs over -report_slow_units seconds (10 by default; a loaded machine
# makes them), kept for a look but not findings.
crashes=$(ls "$ARTIFACTS" | grep -vc '^slow-unit-' || true)
echo "[fuzz] $TARGET: ${execs:-?} executions in $(( $(date +%s) - START )) s, coverage ${cov:-?} edges / ${ft:-?} features," \
  "corpus $(ls "$CORPUS" | wc -l) inputs, artifacts $crashes, exit $status (log: $LOG)"
if [ "$status" -ne 0 ]; then
  grep -E "ERROR|FINDING|SUMMARY|runtime error" "$LOG" | head -20 >&2 || true
fi
exit "$status"
