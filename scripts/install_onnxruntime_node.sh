#!/usr/bin/env bash
# Installs onnxruntime-node 1.30.0 from npm (onnxruntime's native CPU library with Node bindings;
# the package carries the CPU binaries, its install script only fetches GPU ones, hence
# --ignore-scripts) into .npm/ of the checkout, the prefix install_onnxruntime_web.sh uses too:
# the reference bench/vs_onnxruntime.py times onnxtrain against. Never a runtime dependency of
# onnxtrain. Needs node and npm (Debian: nodejs, npm). Prints the folder to export as ONNXTRAIN_ORT_NODE.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="$PWD/.npm"
pkg="$prefix/node_modules/onnxruntime-node"
if [ ! -f "$pkg/package.json" ] || ! grep -q '"version": "1.30.0"' "$pkg/package.json"; then
  npm install --prefix "$prefix" --ignore-scripts --no-audit --no-fund onnxruntime-node@1.30.0 >&2
fi
echo "$pkg"
