#!/usr/bin/env bash
# ThreadSanitizer run of the threaded C++ tests (not part of the README's test command: a build of
# its own, ~15 min on 2 cores). Built with clang, whose OpenMP runtime (libomp) reports its
# synchronization to ThreadSanitizer through the archer tool, so kernels' parallel_for regions are
# checked without false positives from the runtime. oneDNN (Debian's build, libgomp, not
# instrumented) runs as a black box.
#
#   scripts/tsan.sh [gtest filter]
#
# The default filter: every test that runs kernels or the executor on 2+ threads, and the tests
# that use one session from several threads.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-tsan}
FILTER=${1:-"Executor.*:Conv.BlockedLayouts:Index.ScatterElementsParallelDuplicatesAdd:Linalg.MatMulLarge:Norm.DropoutTrainingStatisticsAndRuns:Pool.ResNetShapes:Reduce.LargeShapesAllLayouts:Rnn.HiddenUnitsSplitAcrossThreads:OptimizerOps.*:Image.*:*Concurrent*:*Thread*"}
bash scripts/install_deps.sh --tests --fuzz >/dev/null
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
    -DCMAKE_CXX_FLAGS="-fsanitize=thread -g1" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" -DONNXTRAIN_BUILD_PYTHON=OFF ${CMAKE_ARGS:-} >/dev/null
fi
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target onnxtrain_tests >/dev/null
ARCHER=$(ls /usr/lib/llvm-*/lib/libarcher.so 2>/dev/null | tail -1)
export OMP_TOOL_LIBRARIES="$ARCHER"
export TSAN_OPTIONS="suppressions=$PWD/scripts/tsan.supp:halt_on_error=1:second_deadlock_stack=1:history_size=4${TSAN_EXTRA:+:$TSAN_EXTRA}"
echo "[tsan] archer: ${ARCHER:-none}; filter: $FILTER"
"$BUILD_DIR/onnxtrain_tests" --gtest_filter="$FILTER" --gtest_brief=1
echo "[tsan] no data race reported"
