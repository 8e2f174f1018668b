#!/usr/bin/env bash
# Set-up of the benchmarks against PyTorch, numpy, scikit-learn and onnxruntime (not needed by the
# tests): the project's dependencies plus an optimized BLAS, torchvision (the architectures of
# bench/vs_onnxruntime.py) and onnxruntime-node (its reference, from npm into .npm/). Without
# libopenblas0-pthread, Debian's numpy, scikit-learn and PyTorch load the netlib reference BLAS and run
# up to 20x slower: a comparison against that would flatter onnxtrain. Each benchmark reports the
# BLAS the references loaded.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh --tests
missing=()
for p in libopenblas0-pthread python3-torchvision; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
echo "[bench] BLAS behind libblas.so.3: $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)"
# onnxruntime-node for bench/vs_onnxruntime.py (needs node and npm: Debian's nodejs, npm).
if command -v npm >/dev/null; then
  echo "[bench] onnxruntime-node: $(bash scripts/install_onnxruntime_node.sh)"
else
  echo "[bench] npm not found: bench/vs_onnxruntime.py needs onnxruntime-node (apt-get install nodejs npm)" >&2
fi
