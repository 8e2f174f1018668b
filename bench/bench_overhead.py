"""Steady-state Python run() overhead of a one-node model, onnxtrain vs a numpy add and torch.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/bench_overhead.py
"""
import time

import numpy as np
from onnx import TensorProto, helper

import onnxtrain as ot


def per_call_us(fn, iters=20000):
    for _ in range(1000):
        fn()
    best = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        best.append((time.perf_counter() - t0) / iters * 1e6)
    return sorted(best)[3]


def main():
    node = helper.make_node("Add", ["a", "b"], ["y"])
    g = helper.make_graph([node], "one_node",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1]) for n in "ab"],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    so = ot.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ot.InferenceSession(m.SerializeToString(), so)
    a = np.ones(1, np.float32)
    b = np.ones(1, np.float32)
    feed = {"a": a, "b": b}
    ours = per_call_us(lambda: sess.run(None, feed))
    npy = per_call_us(lambda: np.add(a, b))
    print(f"one-node model, InferenceSession.run (Python): {ours:.2f} us/call; numpy add: {npy:.2f} us/call")
    try:
        import torch
        torch.set_num_threads(1)
        ta, tb = torch.ones(1), torch.ones(1)
        tt = per_call_us(lambda: torch.add(ta, tb))
        print(f"torch.add on 1-element tensors: {tt:.2f} us/call (ratio onnxtrain/torch {ours / tt:.2f})")
    except ImportError:
        pass


if __name__ == "__main__":
    main()
