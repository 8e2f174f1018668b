#!/usr/bin/env bash
# Installs onnxruntime-web 1.19.2 from npm (onnxruntime's on-device training API compiled to
# WebAssembly; it runs under Node 20) into .npm/ of the checkout: the reference the on-device tests
# compare with (they skip, saying so, without it). Never a runtime dependency of onnxtrain.
# Needs node and npm (Debian: nodejs, npm). Prints the folder to export as ONNXTRAIN_ORT_WEB.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="$PWD/.npm"
if [ ! -f "$prefix/node_modules/onnxruntime-web/dist/ort.training.wasm.js" ]; then
  npm install --prefix "$prefix" --ignore-scripts --no-audit --no-fund onnxruntime-web@1.19.2 >&2
fi
echo "$prefix/node_modules/onnxruntime-web"
