#!/usr/bin/env bash
# Set-up of the benchmarks against PyTorch, numpy and scikit-learn (not needed by the tests):
# the project's dependencies plus an optimized BLAS. Without libopenblas0-pthread, Debian's numpy,
# scikit-learn and PyTorch load the netlib reference BLAS and run up to 20x slower: a comparison
# against that would flatter onnxtrain. Each benchmark reports the BLAS the references loaded.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh --tests
if ! dpkg-query -W -f='${Status}' libopenblas0-pthread 2>/dev/null | grep -q "install ok installed"; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends libopenblas0-pthread
fi
echo "[bench] BLAS behind libblas.so.3: $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)"
