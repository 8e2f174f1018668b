#!/usr/bin/env bash
# Configures and builds onnxtrain (Release) into ${BUILD_DIR:-build}.
#   ONNXTRAIN_BUILD_TESTS=OFF  only the library, the CLI and the Python module (the main job)
#   ONNXTRAIN_WERROR=ON        compiler warnings in onnxtrain's own code fail the build (the test command)
# A new build folder uses Ninja where it is installed (it keeps both cores busy across targets,
# where make waits for each target's last file); an existing one keeps the generator it was made with.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
TESTS=${ONNXTRAIN_BUILD_TESTS:-ON}
GENERATOR=()
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ] && command -v ninja >/dev/null; then GENERATOR=(-G Ninja); fi
cmake -S . -B "$BUILD_DIR" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr/local \
  -DONNXTRAIN_BUILD_TESTS="$TESTS" -DONNXTRAIN_BUILD_BENCH="$TESTS" -DONNXTRAIN_WERROR="${ONNXTRAIN_WERROR:-OFF}" \
  ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
