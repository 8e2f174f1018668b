"""Loads the trained digits model with onnxtrain.InferenceSession (the onnxruntime call shapes) and
prints a few held-out predictions against their labels, and the held-out accuracy.

Usage: /usr/bin/python3 examples/predict_digits.py TRAINED.onnx HELD_OUT.npz [N_SHOWN]
"""
import sys

import numpy as np

import onnxtrain


def main():
    model, data = sys.argv[1], sys.argv[2]
    shown = int(sys.argv[3]) if len(sys.argv) > 3 else 12
    held_out = np.load(data)
    X, y = held_out["X"], held_out["label"]
    sess = onnxtrain.InferenceSession(model)
    logits, = sess.run(["logits"], {sess.get_inputs()[0].name: X})
    pred = logits.argmax(axis=1)
    print(f"[onnxtrain] {model} loaded with onnxtrain.InferenceSession; the first held-out images:")
    art = 4
    for r in range(8):
        print("   " + "   ".join("".join(" .:-=+*#%@"[min(9, int(v * 9.99))] * 2 for v in X[i].reshape(8, 8)[r])
                                  for i in range(art)))
    print("   " + "   ".join(f"pred {pred[i]} label {y[i]}".ljust(16) for i in range(art)))
    print("[onnxtrain] more held-out predictions:")
    for i in range(art, min(shown, len(y))):
        print(f"  sample {i:3d}: predicted {pred[i]}, label {y[i]}  {'ok' if pred[i] == y[i] else 'WRONG'}")
    acc = float((pred == y).mean())
    print(f"[onnxtrain] held-out accuracy {100 * acc:.2f}% ({int((pred == y).sum())} of {len(y)})")
    if acc < 0.95:
        sys.exit(f"[onnxtrain] held-out accuracy {100 * acc:.2f}% is below 95%")


if __name__ == "__main__":
    main()
