#!/usr/bin/env bash
# The README's main job: install dependencies, build, install onnxtrain, then train the bundled
# MLP on the 8x8 handwritten digits from scratch (held-out split, progress bar, metrics, curve)
# and load the trained model with onnxtrain.InferenceSession to print predictions.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
ONNXTRAIN_BUILD_TESTS=OFF bash scripts/build.sh  # the library, the CLI and the Python module only
bash scripts/install.sh
REPO="$(pwd)"
cd /tmp  # what follows uses the installed onnxtrain (CLI on PATH, Python package importable)
OUT="$REPO/examples/generated"
/usr/bin/python3 "$REPO/examples/make_examples.py" "$OUT"
echo "[onnxtrain] training the bundled digits MLP (64-128-10) from scratch"
onnxtrain train "$OUT/digits_mlp.onnx" --data "$OUT/digits_train.npz" --validation-data "$OUT/digits_test.npz" \
  --loss cross_entropy --score-output logits --optimizer adam --lr 0.01 --batch-size 32 --epochs 20 --seed 0 \
  --out "$OUT/digits/digits_mlp.trained.onnx"
/usr/bin/python3 "$REPO/examples/predict_digits.py" "$OUT/digits/digits_mlp.trained.onnx" "$OUT/digits_test.npz"
