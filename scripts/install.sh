#!/usr/bin/env bash
# Installs the built library, CLI and Python package under /usr/local (needs root).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO cmake --install "$BUILD_DIR" >/dev/null
$SUDO ldconfig
echo "[onnxtrain] installed: $(command -v onnxtrain), Python package in $(cd / && /usr/bin/python3 -c 'import onnxtrain, os; print(os.path.dirname(onnxtrain.__file__))')"
