"""Embedding backward: onnxtrain's Gather gradient (com.onnxtrain.GatherGrad, as the autodiff
builder emits it) vs PyTorch autograd (embedding_dense_backward), same process, 2 threads.

    OMP_WAIT_POLICY=PASSIVE PYTHONPATH=build/python /usr/bin/python3 bench/bench_gather_grad.py

The gradient model of loss = sum(Gather(table, ids) * dY) is built with GradientGraphBuilder; its
GatherGrad node (inputs shape(table), ids, dY) runs alone in an InferenceSession. torch runs
torch.autograd.grad(y, table, dY) on a retained embedding graph: the backward only. Both produce
the dense [30522, 768] gradient. Prints what bench_index_image.measure prints: over interleaved
samples, the median and best wall time per call and the median process CPU time; ratios are
onnxtrain / torch (below 1: onnxtrain is faster). Never part of pass/fail.
"""
import numpy as np
import torch
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxtrain
from bench_index_image import THREADS, measure  # interleaved samples, wall and CPU time, ratios

V, D, N = 30522, 768, 8192


def gather_grad_node():
    """The GatherGrad node the builder emits for an embedding lookup."""
    nodes = [helper.make_node("Gather", ["table", "ids"], ["y"], axis=0),
             helper.make_node("Mul", ["y", "dy"], ["p"]),
             helper.make_node("ReduceSum", ["p"], ["loss"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "embedding",
        [helper.make_tensor_value_info("table", TensorProto.FLOAT, [V, D]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, [N]),
         helper.make_tensor_value_info("dy", TensorProto.FLOAT, [N, D])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    b = onnxtrain.GradientGraphBuilder(model, {"loss"}, {"table"}, "loss")
    b.build()
    gm = onnx.load_from_string(b.get_model())
    found = [n for n in gm.graph.node if n.op_type == "GatherGrad" and n.domain == "com.onnxtrain"]
    assert len(found) == 1, [n.op_type for n in gm.graph.node]
    return found[0]


def main():
    torch.set_num_threads(THREADS)
    rng = np.random.default_rng(0)
    table = rng.standard_normal((V, D), dtype=np.float32)
    ids = rng.integers(0, V // 8, size=N, dtype=np.int64)  # a skewed vocabulary: many repeats
    dy = rng.standard_normal((N, D), dtype=np.float32)

    node = gather_grad_node()
    gg = helper.make_node("GatherGrad", ["shape", "ids", "dy"], ["dtable"], domain="com.onnxtrain",
                          axis=helper.get_attribute_value(node.attribute[0]))
    graph = helper.make_graph(
        [gg], "gather_grad",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [N]),
         helper.make_tensor_value_info("dy", TensorProto.FLOAT, [N, D])],
        [helper.make_tensor_value_info("dtable", TensorProto.FLOAT, [V, D])],
        [numpy_helper.from_array(np.array([V, D], dtype=np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.onnxtrain", 1)])
    opts = onnxtrain.SessionOptions()
    opts.intra_op_num_threads = THREADS
    sess = onnxtrain.InferenceSession(model.SerializeToString(), opts)

    tt = torch.from_numpy(table).requires_grad_()
    ti, tdy = torch.from_numpy(ids), torch.from_numpy(dy)
    y = torch.nn.functional.embedding(ti, tt)

    ours = lambda: sess.run(None, {"ids": ids, "dy": dy})[0]
    theirs = lambda: torch.autograd.grad(y, tt, tdy, retain_graph=True)[0]

    measure(f"Gather backward [{V},{D}] x {N} ids", ours, theirs,
            lambda a, b: np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-4))

if __name__ == "__main__":
    main()
