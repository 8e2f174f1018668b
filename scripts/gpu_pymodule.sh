#!/usr/bin/env bash
# Builds onnxtrain's Python package for the python3 of the machine it runs on, against the CUDA
# build's static library that scripts/gpu_pack.sh packs: the GPU machines' Python (3.12, with
# PyTorch) is not Debian's 3.11 that the CPU machines build the module for, and they have no
# Debian packages, so the bindings (python/*.cpp, public headers only) are compiled there and
# linked with the pack's library and shared libraries.
#   scripts/gpu_pymodule.sh PACK_DIR DEST   ->  DEST/onnxtrain (the .py files and _C), then an
#                                               import check; PYTHONPATH=DEST uses it
# Needs: Python.h for that python3, pybind11's headers (the pybind11 package, else PyTorch's copy,
# else /usr/include), a C++20 compiler (CXX, default g++), cuBLASLt (CUBLASLT: a path to
# libcublasLt.so*; gpu_check.sh finds the GPU image's). Rehearsed on a CPU machine by
# scripts/test_gpu_scripts.sh (Debian's python3 and CUDA toolkit).
set -euo pipefail
B=$(realpath "$1")
DEST=$(realpath -m "$2")
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CXX=${CXX:-g++}
PYINC=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("include"))')
[ -e "$PYINC/Python.h" ] || { echo "gpu_pymodule: no Python.h under $PYINC: cannot build the module for $("$PY" -V 2>&1)"; exit 3; }
PB=
for dir in "$("$PY" -c 'import pybind11; print(pybind11.get_include())' 2>/dev/null)" \
           "$("$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "include"))' 2>/dev/null)" \
           /usr/include; do
  if [ -n "$dir" ] && [ -e "$dir/pybind11/pybind11.h" ]; then PB=$dir; break; fi
done
[ -n "$PB" ] || { echo "gpu_pymodule: no pybind11 headers (the pybind11 package, PyTorch's include, /usr/include)"; exit 3; }
EXT=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
LT=${CUBLASLT:-$(find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /opt -name 'libcublasLt.so*' 2>/dev/null | head -1)}
[ -n "$LT" ] || { echo "gpu_pymodule: no libcublasLt found (set CUBLASLT)"; exit 3; }
echo "gpu_pymodule: $("$PY" -V 2>&1) ($PYINC), pybind11 $PB, $($CXX --version | head -1), cuBLASLt $LT"

rm -rf "$DEST" && mkdir -p "$DEST/obj"
cp -r python/onnxtrain "$DEST/onnxtrain"
# Include folders beyond the compiler's own (-isystem /usr/include would break <cstdlib>'s include_next).
INCS=""
for dir in "$PYINC" "$PB"; do [ "$dir" = /usr/include ] || INCS="$INCS -isystem $dir"; done
export CXX B DEST INCS
# One object per binding file, all cores.
ls python/*.cpp | xargs -P "$(nproc)" -I{} sh -c '
  o="$DEST/obj/$(basename {} .cpp).o"
  $CXX -std=c++20 -O1 -fPIC -fvisibility=hidden -fopenmp -DONNX_ML=1 -DONNX_NAMESPACE=onnx \
    -Iinclude -Isrc -I"$B/generated" $INCS -c {} -o "$o" 2> "$o.log" ||
    { echo "gpu_pymodule: compiling {} failed:"; head -40 "$o.log"; exit 255; }'
# The static library, the pack's shared libraries (oneDNN, ONNX, protobuf, libzip, ...), the CUDA
# runtime (static, from the pack) and cuBLASLt.
$CXX -shared -o "$DEST/onnxtrain/_C$EXT" "$DEST"/obj/*.o "$B/libonnxtrain_static.a" "$B"/lib/*.so* \
  "$B/libcudart_static.a" "$LT" -fopenmp -ldl -lrt -lpthread -Wl,-rpath,"$B/lib"
rm -rf "$DEST/obj"
PYTHONPATH="$DEST" "$PY" -c 'import onnxtrain, sys; print("gpu_pymodule: built", onnxtrain._C.__file__, "providers:", onnxtrain.get_available_providers())'
