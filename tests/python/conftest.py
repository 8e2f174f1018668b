import os
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper


@pytest.fixture
def mlp_model():
    """y = relu(x @ W + b), as serialized ONNX bytes, with its weights."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "b"], ["z"], name="bias"),
        helper.make_node("Relu", ["z"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString(), w, b
