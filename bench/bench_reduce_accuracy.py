"""Accuracy of float32 ReduceSum: onnxtrain, torch and numpy against a float64 reference.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/bench_reduce_accuracy.py
Prints the worst relative error of each in float32 ulps over rows (axis 1) and columns (axis 0).
"""
import numpy as np, onnxtrain as ot, torch
from onnx import TensorProto, helper
rng = np.random.default_rng(0)
def sess(shape, axis):
    node = helper.make_node("ReduceSum", ["x", "a"], ["y"], keepdims=0)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [helper.make_tensor("a", TensorProto.INT64, [1], [axis])])
    return ot.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
for name, x in [("normal", rng.standard_normal((64, 1 << 16), dtype=np.float32)), ("uniform01", rng.random((64, 1 << 16), dtype=np.float32)), ("const", np.full((64, 1 << 16), np.float32(1 + 2**-20)))]:
    for axis in (1, 0):
        xx = x if axis == 1 else np.ascontiguousarray(x.T)
        ref = xx.astype(np.float64).sum(axis)
        def err(y): 
            return float(np.max(np.abs(y.astype(np.float64) - ref) / np.maximum(np.abs(ref), 1e-30) / np.finfo(np.float32).eps * 2))
        ours = sess(xx.shape, axis).run(None, {"x": xx})[0]
        print(f"{name:10s} axis {axis}: max rel err in float32 ulps: ours {err(ours):8.2f}  torch {err(torch.from_numpy(xx).sum(axis).numpy()):8.2f}  numpy {err(xx.sum(axis)):8.2f}  f64-then-round {err(ref.astype(np.float32)):6.2f}")
