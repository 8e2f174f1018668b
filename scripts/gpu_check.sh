#!/usr/bin/env bash
# The CUDA provider's proof on a GPU machine, in one call (docs/cuda.md). Unpacks the build made on
# a CPU machine (scripts/gpu_pack.sh -> .gpu/pack.tar.xz) and runs the stages named in STAGES
# (default: all), writing every log under $OUT (at most 8 files come back) and a summary last:
#   device     the device tests (CudaProvider.*: copies, inference and training steps vs the CPU)
#   suite      the whole GoogleTest suite, 16 shards: every kernel and gradient test reruns on the
#              CUDA provider against the CPU provider
#   sanitizer  the whole suite under compute-sanitizer (memcheck), 8 shards (SAN_FILTER narrows it)
#   golden     PyTorch golden runs: torch on CUDA vs `onnxtrain train --provider cuda` (and on the
#              CPU), scripts/gpu_golden.py
#   python     the Python module built there for its python3 (scripts/gpu_pymodule.sh), then
#              tests/python/test_cuda_values.py (OrtValues, IOBinding and sessions on "cuda") and
#              the CPU session and value tests under that Python
#   bench      BERT-base-like and ResNet-50 training steps vs PyTorch eager (bench/cuda_step.py), alone
#              on the GPU
# suite, sanitizer, golden and python run side by side; bench runs after them.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check_out}
STAGES=${STAGES:-device suite sanitizer golden python bench}
BENCH_ARGS=${BENCH_ARGS:---profile}
mkdir -p "$OUT"
PACK=${PACK:-.gpu/pack.tar.xz}
W=/tmp/onnxtrain_gpu
rm -rf "$W" && mkdir -p "$W" && tar -C "$W" -xJf "$PACK" || { echo "cannot unpack $PACK"; exit 2; }
B=$W/pack
has() { [[ " $STAGES " == *" $1 "* ]]; }
# Runs the test executable from $REPO/gpu-run.
tests() { (cd "$REPO/gpu-run" && "$@"); }
# The CUDA 13 libraries of the GPU image (cuBLASLt): the toolkit's, else PyTorch's wheels'.
LT=$(find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
CUDA_LIBS=$(dirname "${LT:-/nonexistent/x}")
# cuDNN 9 (Conv and ConvGrad; the provider opens libcudnn.so.9 at run time): PyTorch's wheel's,
# else one under the toolkit or /opt. Without it those nodes run on the CPU provider.
DNN=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib'))" 2>/dev/null)
[ -e "$DNN/libcudnn.so.9" ] || DNN=$(dirname "$(find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /opt -name 'libcudnn.so.9' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$B/lib:${CUDA_LIBS}:${DNN}:${LD_LIBRARY_PATH:-}"
# The tests find their data through the source path compiled in (the checkout's: /work/main) and
# some through ../tests from the build folder: they run in a folder beside tests/.
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
REPO=$PWD
mkdir -p "$REPO/gpu-run"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer /usr/local/cuda*/compute-sanitizer/compute-sanitizer \
      /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
{
  echo "pack: $(head -1 "$B/commit.txt")"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "cuBLASLt: ${LT:-not found}; cuDNN: $(ls "$DNN"/libcudnn.so.9 2>/dev/null || echo not found); stages: $STAGES"
  ldd "$B/onnxtrain_tests" | grep "not found" || echo "every library found"
  # What building the Python module there would need (its Python is not Debian's 3.11): headers,
  # pybind11 (PyTorch ships one), a host compiler.
  echo "python: $(python3 -c 'import sys, sysconfig, os; i = sysconfig.get_path("include"); print(sys.version.split()[0], i, "has Python.h" if os.path.exists(os.path.join(i, "Python.h")) else "no Python.h")' 2>&1 | tail -1)"
  echo "pybind11: $(python3 -c 'import os, torch; i = os.path.join(os.path.dirname(torch.__file__), "include"); print(i if os.path.isdir(os.path.join(i, "pybind11")) else "not in torch")' 2>&1 | tail -1)"
  echo "host compiler: $( (g++ --version || c++ --version) 2>/dev/null | head -1)"
} > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"

dev_rc=-
if has device; then
  tests timeout 90 "$B/onnxtrain_tests" --gtest_filter='CudaProvider.*' > "$OUT/device_tests.log" 2>&1
  dev_rc=$?
  tail -15 "$OUT/device_tests.log"
fi

start=$SECONDS
if has suite; then
  for i in $(seq 0 15); do
    GTEST_TOTAL_SHARDS=16 GTEST_SHARD_INDEX=$i tests timeout ${SUITE_TIMEOUT:-200} "$B/onnxtrain_tests" --gtest_brief=1 > "$W/shard_$i.log" 2>&1 &
  done
fi
if has sanitizer; then
  # The whole suite under memcheck, 8 shards (SAN_FILTER narrows it).
  for i in $(seq 0 7); do
    ( GTEST_TOTAL_SHARDS=8 GTEST_SHARD_INDEX=$i tests timeout ${SAN_TIMEOUT:-150} "${SAN:-compute-sanitizer}" --tool memcheck \
        --print-limit 30 "$B/onnxtrain_tests" --gtest_filter="${SAN_FILTER:-*}" --gtest_brief=1 > "$W/san_$i.log" 2>&1
      echo "rc $?" >> "$W/san_$i.log" ) &
  done
fi
if has golden; then
  ( timeout ${GOLDEN_TIMEOUT:-170} python3 scripts/gpu_golden.py --exe "$B/onnxtrain" --work "$W/golden" > "$OUT/golden.log" 2>&1; echo "rc $?" >> "$OUT/golden.log" ) &
fi
if has python; then
  ( set -o pipefail
    CUBLASLT="$LT" timeout ${PY_BUILD_TIMEOUT:-200} bash scripts/gpu_pymodule.sh "$B" "$W/py" 2>&1 | tail -30 > "$OUT/python.log"
    rc=$?
    echo "build rc $rc" >> "$OUT/python.log"
    if [ $rc -eq 0 ]; then
      PYTHONPATH="$W/py" timeout ${PY_TEST_TIMEOUT:-150} "${PYTHON:-python3}" -m pytest -q -p no:cacheprovider -rs \
        tests/python/test_cuda_values.py tests/python/test_ortvalue.py tests/python/test_ort_session.py 2>&1 | tail -40 >> "$OUT/python.log"
      echo "pytest rc $?" >> "$OUT/python.log"
    fi ) &
fi
wait
suite_s=$((SECONDS - start))
if has suite; then cat "$W"/shard_*.log > "$OUT/suite.log"; fi
if has sanitizer; then cat "$W"/san_*.log > "$OUT/sanitizer.log"; fi
if has bench; then
  timeout ${BENCH_TIMEOUT:-330} python3 bench/cuda_step.py --exe "$B/bench_cuda_step" --work "$W/bench" $BENCH_ARGS > "$OUT/bench.log" 2>&1
  echo "rc $?" >> "$OUT/bench.log"
fi

{
  echo "== device tests (rc $dev_rc)"
  grep -E '^\[  (PASSED|SKIPPED|FAILED) |^\[  FAILED  \]|Failure|error' "$OUT/device_tests.log" 2>/dev/null | head -20
  if has suite; then
    echo "== whole suite with the CUDA axis ($suite_s s with the parallel stages, 16 shards)"
    echo "passed $(grep -h -E '^\[  PASSED  \] [0-9]+' "$W"/shard_*.log | awk '{s+=$4} END {print s+0}')," \
         "skipped $(grep -h -E '^\[  SKIPPED \] [0-9]+ test' "$W"/shard_*.log | awk '{s+=$4} END {print s+0}')," \
         "failed $(grep -h -E '^\[  FAILED  \] [A-Za-z]' "$W"/shard_*.log | sort -u | wc -l)," \
         "shards finished $(grep -l -E '^\[  PASSED  \] [0-9]+' "$W"/shard_*.log | wc -l)/16"
    grep -h -o '\[cuda axis\].*' "$W"/shard_*.log | awk '{s+=$3} END {print "CUDA kernel launches:", s+0}'
    grep -h -E '^\[  FAILED  \] [A-Za-z]' "$W"/shard_*.log | sort -u | head -80
  fi
  if has sanitizer; then
    echo "== compute-sanitizer (memcheck, 8 shards)"
    grep -h -E 'ERROR SUMMARY' "$W"/san_*.log | sort | uniq -c
    echo "passed $(grep -h -E '^\[  PASSED  \] [0-9]+' "$W"/san_*.log | awk '{s+=$4} END {print s+0}')," \
         "shards finished $(grep -l -E '^\[  PASSED  \] [0-9]+' "$W"/san_*.log | wc -l)/8"
    grep -h -E '^\[  FAILED  \] [A-Za-z]' "$W"/san_*.log | sort -u | head -20
    grep -h -B2 -A6 'Invalid __global__\|Program hit' "$W"/san_*.log | head -40
  fi
  if has golden; then echo "== golden"; tail -12 "$OUT/golden.log"; fi
  if has python; then echo "== python"; grep -E 'gpu_pymodule|rc [0-9]|passed|failed|FAILED|Error' "$OUT/python.log" | head -30; fi
  if has bench; then echo "== bench"; tail -8 "$OUT/bench.log"; fi
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
