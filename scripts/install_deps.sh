#!/usr/bin/env bash
# Installs every build and test dependency of onnxtrain from Debian 12 packages.
# Idempotent: packages already present are skipped without touching the network.
set -euo pipefail

PACKAGES=(
  g++ cmake make pkg-config
  libprotobuf-dev protobuf-compiler libonnx-dev
  libdnnl-dev zlib1g-dev libzip-dev
  pybind11-dev python3-dev python3-numpy python3-pytest python3-onnx
  python3-torch python3-sklearn
  libgtest-dev
  libcli11-dev nlohmann-json3-dev
  openmpi-bin libopenmpi-dev
  libflatbuffers-dev flatbuffers-compiler python3-flatbuffers
)
# scripts/fuzz.sh and scripts/tsan.sh only (`install_deps.sh --fuzz`): clang with libFuzzer and the
# sanitizer runtimes, LLVM's OpenMP runtime with its ThreadSanitizer support (archer).
if [ "${1:-}" = "--fuzz" ]; then
  PACKAGES+=(clang libclang-rt-dev libomp-dev llvm)
fi

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
