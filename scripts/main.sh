#!/usr/bin/env bash
# The README's main job: install dependencies, build, install onnxtrain, then run the bundled
# example model on its bundled input and print the outputs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
bash scripts/install.sh
/usr/bin/python3 examples/make_examples.py examples/generated
echo "[onnxtrain] running the bundled MLP on its bundled input"
onnxtrain run examples/generated/mlp.onnx --data examples/generated/mlp_input.npz --print 10
