"""Gather (embedding rows) and bilinear Resize: onnxtrain vs PyTorch, same process, 2 threads.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_index_image.py

Prints per case, over interleaved samples (each the mean of a batch of calls), the median and best
wall time per call of each, and the median process CPU time per call (all threads) which a loaded machine distorts less; ratios are onnxtrain / torch
(below 1: onnxtrain is faster). Never part of pass/fail.
"""
import statistics
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
import torch

import onnxtrain

THREADS = 2
SAMPLES = 12  # interleaved samples per side
BATCH = 10    # calls per sample: per-call times on a loaded machine are scheduler-quantum noise


def session(node, inputs, outputs, initializers=(), opset=13):
    graph = helper.make_graph([node], "bench", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    opts = onnxtrain.SessionOptions()
    opts.intra_op_num_threads = THREADS
    return onnxtrain.InferenceSession(model.SerializeToString(), opts)


def measure(name, ours, theirs, check):
    a, b = ours(), theirs()
    check(a, b)
    t_ours, t_torch, c_ours, c_torch = [], [], [], []
    for _ in range(SAMPLES):  # interleaved so load from elsewhere hits both alike
        for f, wall, cpu in ((ours, t_ours, c_ours), (theirs, t_torch, c_torch)):
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(BATCH):
                f()
            wall.append((time.perf_counter() - t0) / BATCH)
            cpu.append((time.process_time() - c0) / BATCH)
    ms = lambda v: f"{v * 1e3:7.2f}"
    mo, mt = statistics.median(t_ours), statistics.median(t_torch)
    co, ct = statistics.median(c_ours), statistics.median(c_torch)
    print(f"{name:34s} wall median/best ms: onnxtrain {ms(mo)}/{ms(min(t_ours))} torch {ms(mt)}/{ms(min(t_torch))}"
          f"  ratio median {mo / mt:4.2f} best {min(t_ours) / min(t_torch):4.2f}"
          f" | cpu ms (all threads): {ms(co)} vs {ms(ct)} ratio {co / ct:4.2f}")


def main():
    torch.set_num_threads(THREADS)
    rng = np.random.default_rng(0)

    # Gather: embedding rows of a BERT-base vocabulary table.
    table = rng.standard_normal((30522, 768), dtype=np.float32)
    ids = rng.integers(0, 30522, size=8192, dtype=np.int64)
    s = session(helper.make_node("Gather", ["table", "ids"], ["y"], axis=0),
                [helper.make_tensor_value_info("table", TensorProto.FLOAT, table.shape),
                 helper.make_tensor_value_info("ids", TensorProto.INT64, ids.shape)],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    tt, ti = torch.from_numpy(table), torch.from_numpy(ids)
    with torch.no_grad():
        measure("Gather [30522,768] x 8192 ids",
                lambda: s.run(None, {"table": table, "ids": ids})[0],
                lambda: torch.nn.functional.embedding(ti, tt),
                lambda a, b: np.testing.assert_array_equal(a, b.numpy()))

    # Resize: bilinear 2x, half_pixel (= torch align_corners=False).
    x = rng.standard_normal((8, 64, 56, 56), dtype=np.float32)
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "scales")
    s = session(helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear"),
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [scales])
    tx = torch.from_numpy(x)
    with torch.no_grad():
        measure("Resize linear 2x [8,64,56,56]",
                lambda: s.run(None, {"x": x})[0],
                lambda: torch.nn.functional.interpolate(tx, scale_factor=2, mode="bilinear", align_corners=False),
                lambda a, b: np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-5))
        s2 = session(helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest",
                                      coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
                     [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [scales])
        measure("Resize nearest 2x [8,64,56,56]",
                lambda: s2.run(None, {"x": x})[0],
                lambda: torch.nn.functional.interpolate(tx, scale_factor=2, mode="nearest"),
                lambda a, b: np.testing.assert_array_equal(a, b.numpy()))


if __name__ == "__main__":
    main()
