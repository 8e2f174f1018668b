#!/usr/bin/env bash
# Packs what scripts/gpu_check.sh runs on a GPU machine: the CUDA build's test executable (built
# here with -DONNXTRAIN_CUDA=ON, stripped) and the shared libraries it needs that the GPU image
# lacks (oneDNN, ONNX, protobuf, libzip, ...; the CUDA libraries come from the GPU machine), as one
# xz archive under .gpu/ (ignored by git: .git/info/exclude) — at most 64 MiB travel to it.
#   BUILD_DIR (default build-cuda) must hold a CUDA build without MPI:
#   BUILD_DIR=build-cuda CMAKE_ARGS="-DONNXTRAIN_CUDA=ON -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON" bash scripts/build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-cuda}
# Kept out of git's view where this is a git checkout (CI may give a copy without .git/info).
if [ -d .git ]; then
  mkdir -p .git/info && { grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude; }
fi
rm -rf .gpu/pack && mkdir -p .gpu/pack/lib
for exe in onnxtrain_tests onnxtrain bench_cuda_step; do
  [ -f "$BUILD_DIR/$exe" ] && strip -o ".gpu/pack/$exe" "$BUILD_DIR/$exe"
done
# Every shared library outside glibc, libstdc++ and the CUDA driver that the executables load.
ldd .gpu/pack/onnxtrain_tests | awk '/=> \// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libcuda.so*) ;;
    libcublas*|libcudart*|libcudnn*) ;;  # the GPU machine's own CUDA 13 (cuDNN is opened at run time)
    *) cp -L "$lib" .gpu/pack/lib/ ;;
  esac
done
# What scripts/gpu_pymodule.sh builds the Python module from there: the static library (without
# its debug sections), the generated headers, the CUDA runtime this build was linked with.
strip --strip-debug -o .gpu/pack/libonnxtrain_static.a "$BUILD_DIR/libonnxtrain_static.a"
cp -r "$BUILD_DIR/generated" .gpu/pack/generated
CUDART=$(find /usr/local/cuda/lib /usr/local/cuda/lib64 -name libcudart_static.a 2>/dev/null | head -1)
cp "$CUDART" .gpu/pack/libcudart_static.a
# Which commit travels (safe.directory: a checkout owned by another user is still read).
{ git -c safe.directory="$PWD" rev-parse HEAD && git -c safe.directory="$PWD" status --short; } \
  > .gpu/pack/commit.txt 2>/dev/null || echo "not a git checkout: $PWD" > .gpu/pack/commit.txt
tar -C .gpu -cJf .gpu/pack.tar.xz pack && rm -rf .gpu/pack
ls -la .gpu/pack.tar.xz
