"""Generates the bundled examples:

- mlp.onnx + mlp_input.npz: a small MLP and an input batch (for `onnxtrain run`);
- digits_mlp.onnx: an untrained MLP for the 8x8 handwritten digits (64 -> 128 -> 10: outputs
  `logits` and `probabilities`), initialized as torch.nn.Linear does, with a fixed seed;
- digits.npz (all 1,797 samples), digits_train.npz / digits_test.npz (a stratified 80/20 split):
  arrays X (float32 [N, 64], pixel values / 16) and label (int64 [N]), from the copy of the UCI
  digits bundled in examples/data/digits.npz (no download, no scikit-learn).

Usage: /usr/bin/python3 examples/make_examples.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp_model(name, w1, b1, w2, b2):
    """X [N, in] -> MatMul/Add -> Relu -> MatMul/Add -> logits [N, out] -> Softmax -> probabilities."""
    nodes = [
        helper.make_node("MatMul", ["X", "W1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "B1"], ["h1"], name="fc1_bias"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("MatMul", ["h2", "W2"], ["h3"], name="fc2"),
        helper.make_node("Add", ["h3", "B2"], ["logits"], name="fc2_bias"),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=-1),
    ]
    n_in, n_out = w1.shape[0], w2.shape[1]
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", n_in])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", n_out]),
         helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", n_out])],
        [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(b1, "B1"),
         numpy_helper.from_array(w2, "W2"), numpy_helper.from_array(b2, "B2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="onnxtrain-examples")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def make_mlp(rng, n_in=8, hidden=16, n_out=3):
    w1 = (rng.standard_normal((n_in, hidden)) / np.sqrt(n_in)).astype(np.float32)
    b1 = np.zeros(hidden, np.float32)
    w2 = (rng.standard_normal((hidden, n_out)) / np.sqrt(hidden)).astype(np.float32)
    b2 = np.zeros(n_out, np.float32)
    return mlp_model("mlp", w1, b1, w2, b2)


def make_digits_mlp(rng, n_in=64, hidden=128, n_out=10):
    def linear(fan_in, fan_out):
        # torch.nn.Linear's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases.
        bound = 1.0 / np.sqrt(fan_in)
        return (rng.uniform(-bound, bound, (fan_in, fan_out)).astype(np.float32),
                rng.uniform(-bound, bound, fan_out).astype(np.float32))
    w1, b1 = linear(n_in, hidden)
    w2, b2 = linear(hidden, n_out)
    return mlp_model("digits_mlp", w1, b1, w2, b2)


def write_digits(out):
    # The 8x8 digits and their held-out split, bundled (examples/data/README.md says where they
    # come from); tests/python/test_examples.py checks them against scikit-learn's copy.
    bundled = np.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "digits.npz"))
    X = (bundled["images"].reshape(-1, 64) / 16.0).astype(np.float32)
    y = bundled["label"].astype(np.int64)
    np.savez(os.path.join(out, "digits.npz"), X=X, label=y)
    train, test = bundled["train_index"], bundled["test_index"]
    np.savez(os.path.join(out, "digits_train.npz"), X=X[train], label=y[train])
    np.savez(os.path.join(out, "digits_test.npz"), X=X[test], label=y[test])
    return len(y), len(train), len(test)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "examples/generated"
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    onnx.save(make_mlp(rng), os.path.join(out, "mlp.onnx"))
    np.savez(os.path.join(out, "mlp_input.npz"), X=rng.standard_normal((4, 8)).astype(np.float32))
    print(f"[onnxtrain] wrote {out}/mlp.onnx and {out}/mlp_input.npz")
    onnx.save(make_digits_mlp(np.random.default_rng(0)), os.path.join(out, "digits_mlp.onnx"))
    n, ntr, nte = write_digits(out)
    print(f"[onnxtrain] wrote {out}/digits_mlp.onnx and the digits data ({n} samples: "
          f"digits_train.npz {ntr}, digits_test.npz {nte}, digits.npz all)")


if __name__ == "__main__":
    main()
