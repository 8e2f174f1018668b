"""Generates the bundled example: a small MLP (ONNX) and an input batch (.npz).

Usage: /usr/bin/python3 examples/make_examples.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_mlp(rng, n_in=8, hidden=16, n_out=3):
    w1 = (rng.standard_normal((n_in, hidden)) / np.sqrt(n_in)).astype(np.float32)
    b1 = np.zeros(hidden, np.float32)
    w2 = (rng.standard_normal((hidden, n_out)) / np.sqrt(hidden)).astype(np.float32)
    b2 = np.zeros(n_out, np.float32)
    nodes = [
        helper.make_node("MatMul", ["X", "W1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "B1"], ["h1"], name="fc1_bias"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("MatMul", ["h2", "W2"], ["h3"], name="fc2"),
        helper.make_node("Add", ["h3", "B2"], ["logits"], name="fc2_bias"),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", n_in])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", n_out]),
         helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", n_out])],
        [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(b1, "B1"),
         numpy_helper.from_array(w2, "W2"), numpy_helper.from_array(b2, "B2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="onnxtrain-examples")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "examples/generated"
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    onnx.save(make_mlp(rng), os.path.join(out, "mlp.onnx"))
    np.savez(os.path.join(out, "mlp_input.npz"), X=rng.standard_normal((4, 8)).astype(np.float32))
    print(f"[onnxtrain] wrote {out}/mlp.onnx and {out}/mlp_input.npz")


if __name__ == "__main__":
    main()
