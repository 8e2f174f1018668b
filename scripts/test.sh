#!/usr/bin/env bash
# The README's test command: install dependencies, build everything with the tests (compiler
# warnings as errors), install, then run the whole suite: GoogleTest + conformance through ctest,
# then pytest. Ends with the runners' own summaries (also kept in build/test_summary.txt).
# The sanitizer run is its own script (scripts/sanitize.sh), which CI runs after this one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh --tests
ONNXTRAIN_WERROR=ON bash scripts/build.sh
bash scripts/install.sh
status=0
summary=build/test_summary.txt
: > "$summary"
(cd build && ctest --output-on-failure -j "$(nproc)") 2>&1 | tee build/ctest.log || status=1
grep -E "tests passed|tests failed|Total Test time" build/ctest.log >> "$summary" || true
if [ -f build/conformance_report.md ]; then
  echo "[onnxtrain] conformance: $(sed -n 3p build/conformance_report.md) (table: build/conformance_report.md)" | tee -a "$summary"
fi
PYTHONPATH="$PWD/build/python" ONNXTRAIN_CLI="$PWD/build/onnxtrain" ONNXTRAIN_INSTALLED=1 \
  /usr/bin/python3 -m pytest -q tests/python 2>&1 | tee build/pytest.log || status=1
tail -n 1 build/pytest.log >> "$summary"
# The CUDA provider (docs/cuda.md): compiled for sm_90 with CUDA 13 where nvcc is installed; its
# device tests run (skipped without a GPU: the whole suite ran above) and its update rules are
# checked on the host against the CPU kernels.
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
if [ -x "$NVCC" ]; then
  echo "[onnxtrain] CUDA build (build-cuda, sm_90)"
  if cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DONNXTRAIN_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" \
       -DONNXTRAIN_WERROR=ON -DONNXTRAIN_BUILD_PYTHON=OFF -DONNXTRAIN_BUILD_BENCH=OFF \
       -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON >/dev/null &&
     cmake --build build-cuda --target onnxtrain_tests -j "$(nproc)"; then
    (cd build-cuda && ./onnxtrain_tests --gtest_filter='CudaProvider.*:CudaHostRules.*:OpCoverage.*') 2>&1 | tee build/cuda.log || status=1
    echo "[onnxtrain] CUDA build: compiled; $(grep -E '^\[  (PASSED|SKIPPED|FAILED)  ?\] [0-9]+ test' build/cuda.log | tr '\n' ' ')" | tee -a "$summary"
    # gpu_check.sh's python stage rehearsed with this machine's python3: the pack as it travels
    # (scripts/gpu_pack.sh), the bindings compiled against it (scripts/gpu_pymodule.sh), then the
    # device value tests (skipped without a GPU) and the session and value tests under that module.
    r=build/gpu_rehearsal
    log=build/gpu_rehearsal.log
    stage=pack
    if BUILD_DIR=build-cuda bash scripts/gpu_pack.sh > "$log" 2>&1 && stage=unpack && rm -rf "$r" && mkdir -p "$r" &&
       tar -C "$r" -xJf .gpu/pack.tar.xz >> "$log" 2>&1 && stage=build &&
       PYTHON=/usr/bin/python3 bash scripts/gpu_pymodule.sh "$r/pack" "$r/py" >> "$log" 2>&1 && stage=pytest &&
       LD_LIBRARY_PATH="$r/pack/lib" PYTHONPATH="$r/py" /usr/bin/python3 -m pytest -q -p no:cacheprovider -rs \
         tests/python/test_cuda_values.py tests/python/test_ortvalue.py tests/python/test_ort_session.py >> "$log" 2>&1; then
      echo "[onnxtrain] GPU Python module rehearsal: built from the pack; $(tail -n 1 "$log")" | tee -a "$summary"
    else
      status=1
      tail -n 30 "$log"
      # The stage and the log's last lines go into the summary, which is what CI's output ends with.
      echo "[onnxtrain] GPU Python module rehearsal: FAILED at the $stage stage ($log); its last lines:" | tee -a "$summary"
      tail -n 8 "$log" | sed 's/^/    /' | tee -a "$summary"
    fi
  else
    status=1
    echo "[onnxtrain] CUDA build: FAILED to compile" | tee -a "$summary"
  fi
else
  echo "[onnxtrain] CUDA build: skipped (no nvcc at $NVCC)" | tee -a "$summary"
fi
exit $status
