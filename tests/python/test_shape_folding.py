"""Load-time folding of Shape nodes whose input shape is fully known (runtime::fold_static_shapes,
src/runtime/fold.cpp), as onnxruntime's constant folding does: the outputs must equal numpy's
with and without graph optimizations, Shape-15's start / end must be applied, and symbolic
dimensions must stay computed at run time."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxtrain as ot


def model(x_shape, start=None, end=None, opset=17):
    """y = x reshaped to [prod(shape(x)[start:end]), -1] and the sliced shape itself as s."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)
    kw = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], **kw),
        helper.make_node("ReduceProd", ["shape"], ["rows"], keepdims=1),
        helper.make_node("Concat", ["rows", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
        helper.make_node("Identity", ["shape"], ["s"]),
    ]
    g = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                                            helper.make_tensor_value_info("s", TensorProto.INT64, None)],
                          [helper.make_tensor("minus1", TensorProto.INT64, [1], [-1])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def run(data, x, level):
    so = ot.SessionOptions()
    so.graph_optimization_level = level
    return ot.InferenceSession(data, so).run(None, {"x": x})


LEVELS = [ot.GraphOptimizationLevel.ORT_DISABLE_ALL, ot.GraphOptimizationLevel.ORT_ENABLE_ALL]


@pytest.mark.parametrize("start,end", [(None, None), (1, None), (-2, None), (0, -1), (-9, 9), (3, 1)])
def test_static_shape_slices_like_numpy(start, end):
    shape = [2, 3, 4, 5]
    x = np.arange(120, dtype=np.float32).reshape(shape)
    want = np.array(shape[slice(start, end)], np.int64)
    rows = int(np.prod(want)) if want.size else 1
    for level in LEVELS:
        y, s = run(model(shape, start, end), x, level)
        np.testing.assert_array_equal(s, want)
        np.testing.assert_array_equal(y, x.reshape(rows, -1))


def test_symbolic_dims_stay_run_time_values(tmp_path):
    data = model(["N", 3, 4], start=0, end=2)
    so = ot.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    sess = ot.InferenceSession(data, so)
    assert "Shape" in {n.op_type for n in onnx.load(str(tmp_path / "opt.onnx")).graph.node}
    for n in (1, 5):
        x = np.ones((n, 3, 4), np.float32)
        y, s = sess.run(None, {"x": x})
        np.testing.assert_array_equal(s, [n, 3])
        assert y.shape == (3 * n, 4)


def test_fixed_dims_fold_and_other_shapes_are_refused(tmp_path):
    so = ot.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    sess = ot.InferenceSession(model([2, 3, 4]), so)
    opt = onnx.load(str(tmp_path / "opt.onnx"))
    assert "Shape" not in {n.op_type for n in opt.graph.node}
    with pytest.raises(Exception, match="dimension 5 at axis 0"):
        sess.run(None, {"x": np.ones((5, 3, 4), np.float32)})


def test_shape_as_graph_output_stays():
    """A Shape node whose output is a graph output is not replaced (the output keeps its node)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7])
    g = helper.make_graph([helper.make_node("Shape", ["x"], ["s"])], "g", [x],
                          [helper.make_tensor_value_info("s", TensorProto.INT64, [2])])
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    for level in LEVELS:
        np.testing.assert_array_equal(run(data, np.zeros((2, 7), np.float32), level)[0], [2, 7])
