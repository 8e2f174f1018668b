#!/usr/bin/env bash
# Installs onnxtrain's dependencies from Debian 12 packages: what the main job needs, plus with
# --tests what the test command needs and with --fuzz what fuzzing and ThreadSanitizer need.
# Idempotent: packages already present are skipped without touching the network.
set -euo pipefail

# What the main job needs: the build (library, CLI, Python module) and the digits example, whose
# model is written with onnx (its data is bundled: examples/data).
PACKAGES=(
  g++ cmake make ninja-build pkg-config
  libprotobuf-dev protobuf-compiler libonnx-dev
  libdnnl-dev zlib1g-dev libzip-dev
  pybind11-dev python3-dev python3-numpy python3-onnx
  libcli11-dev nlohmann-json3-dev
  libflatbuffers-dev flatbuffers-compiler
)
for arg in "$@"; do
  case "$arg" in
    # The test command (scripts/test.sh) and the sanitizer run: GoogleTest, pytest, PyTorch (the
    # reference of the golden tests), MPI (distributed training and its tests), FlatBuffers' Python
    # module, scikit-learn (the estimators' reference), and the packaging tools the package tests use
    # (python3-build for the wheel, a venv to install it into, dpkg-dev and file for the .deb's dependencies).
    # xz-utils and binutils: the GPU pack (scripts/gpu_pack.sh) that the test command rehearses.
    --tests)
      PACKAGES+=(libgtest-dev python3-pytest python3-torch openmpi-bin libopenmpi-dev python3-flatbuffers python3-sklearn
                 python3-build python3-venv python3-pip dpkg-dev file xz-utils binutils) ;;
    # scripts/fuzz.sh and scripts/tsan.sh: clang with libFuzzer and the sanitizer runtimes, LLVM's
    # OpenMP runtime with its ThreadSanitizer support (archer).
    --fuzz) PACKAGES+=(clang libclang-rt-dev libomp-dev llvm) ;;
    *) echo "install_deps.sh: unknown option '$arg' (options: --tests, --fuzz)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "[onnxtrain] installing: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
else
  echo "[onnxtrain] all dependencies present"
fi
