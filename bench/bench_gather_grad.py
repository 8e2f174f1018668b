"""Embedding backward: onnxtrain's Gather gradient (com.onnxtrain.GatherGrad, as the autodiff
builder emits it) vs PyTorch autograd (embedding_dense_backward), same process, 2 threads.

    OMP_WAIT_POLICY=PASSIVE PYTHONPATH=build/python /usr/bin/python3 bench/bench_gather_grad.py

The gradient model of loss = sum(Gather(table, ids) * dY) is built with GradientGraphBuilder; its
GatherGrad node (inputs shape(table), ids, dY) runs in an InferenceSession, once with dX as the
output (a fresh buffer per call) and once inside a graph (arena memory, as in a training step). torch runs
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
    axis = helper.get_attribute_value(node.attribute[0])
    inputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, [N]),
              helper.make_tensor_value_info("dy", TensorProto.FLOAT, [N, D])]
    inits = [numpy_helper.from_array(np.array([V, D], dtype=np.int64), "shape"),
             numpy_helper.from_array(np.array([0], dtype=np.int64), "zero"),
             numpy_helper.from_array(np.array([1], dtype=np.int64), "one")]

    def session(nodes):
        graph = helper.make_graph(nodes, "gather_grad", inputs,
                                  [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                        helper.make_opsetid("com.onnxtrain", 1)])
        opts = onnxtrain.SessionOptions()
        opts.intra_op_num_threads = THREADS
        return onnxtrain.InferenceSession(model.SerializeToString(), opts)

    grad = helper.make_node("GatherGrad", ["shape", "ids", "dy"], ["out"], domain="com.onnxtrain", axis=axis)
    # dX as the graph's output: a fresh 94 MB buffer per call (page faults), as torch allocates.
    as_output = session([grad])
    # dX inside a graph (its first row is the output): arena memory reused per call, as in a
    # training step where the gradient feeds the optimizer.
    inside = session([helper.make_node("GatherGrad", ["shape", "ids", "dy"], ["dx"], domain="com.onnxtrain", axis=axis),
                      helper.make_node("Slice", ["dx", "zero", "one"], ["out"])])

    tt = torch.from_numpy(table).requires_grad_()
    ti, tdy = torch.from_numpy(ids), torch.from_numpy(dy)
    y = torch.nn.functional.embedding(ti, tt)
    theirs = lambda: torch.autograd.grad(y, tt, tdy, retain_graph=True)[0]
    measure(f"Gather backward [{V},{D}] x {N} ids, dX output", lambda: as_output.run(None, {"ids": ids, "dy": dy})[0],
            theirs, lambda a, b: np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-4))
    measure(f"Gather backward [{V},{D}] x {N} ids, dX in graph", lambda: inside.run(None, {"ids": ids, "dy": dy})[0],
            theirs, lambda a, b: np.testing.assert_allclose(a, b[:1].numpy(), rtol=1e-5, atol=1e-4))

if __name__ == "__main__":
    main()
