"""onnxruntime-training's forward/backward objects (``onnxruntime.capi._pybind_state``):
OrtModuleGraphBuilder with its configurations and GraphInfo, TrainingAgent, PartialGraphExecutionState,
OrtValueCache, GradientGraphBuilder. Gradients are checked against numpy float64 references written
from the math (and PyTorch's autograd for a two-layer network)."""
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain
from onnxtrain.capi import _pybind_state as C
from onnxtrain.capi.onnxruntime_inference_collection import InferenceSession
from alias_run import run_alias

CPU = C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0)


def _mlp(rng, n_in=5, hidden=4, n_out=3, extra_int_output=False, opset=15):
    """Y = tanh(X @ W1 + B1) @ W2 + B2 (plus Shape(Y) as a second, integer output)."""
    w1 = rng.standard_normal((n_in, hidden)).astype(np.float32)
    b1 = rng.standard_normal(hidden).astype(np.float32)
    w2 = rng.standard_normal((hidden, n_out)).astype(np.float32)
    b2 = rng.standard_normal(n_out).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["X", "W1"], ["h0"]), helper.make_node("Add", ["h0", "B1"], ["h1"]),
             helper.make_node("Tanh", ["h1"], ["h"]), helper.make_node("MatMul", ["h", "W2"], ["y0"]),
             helper.make_node("Add", ["y0", "B2"], ["Y"])]
    outputs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", n_out])]
    if extra_int_output:
        nodes.append(helper.make_node("Shape", ["Y"], ["S"]))
        outputs.append(helper.make_tensor_value_info("S", TensorProto.INT64, [2]))
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", n_in])],
                              outputs, [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(b1, "B1"),
                                        numpy_helper.from_array(w2, "W2"), numpy_helper.from_array(b2, "B2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString(), {"W1": w1, "B1": b1, "W2": w2, "B2": b2}


def _reference(x, w, dy):
    """Outputs and gradients of _mlp in float64: (Y, dX, {weight: grad})."""
    x, dy = x.astype(np.float64), dy.astype(np.float64)
    w = {k: v.astype(np.float64) for k, v in w.items()}
    h = np.tanh(x @ w["W1"] + w["B1"])
    y = h @ w["W2"] + w["B2"]
    dh = dy @ w["W2"].T
    dh1 = dh * (1 - h * h)
    grads = {"W2": h.T @ dy, "B2": dy.sum(0), "W1": x.T @ dh1, "B1": dh1.sum(0)}
    return y, dh1 @ w["W1"].T, grads


def _config(weights, train=None, inputs=("X",)):
    c = C.OrtModuleGraphBuilderConfiguration()
    c.initializer_names = list(weights)
    c.initializer_names_to_train = list(weights if train is None else train)
    c.input_names_require_grad = list(inputs)
    return c


def _build(model, config, shapes=None):
    b = C.OrtModuleGraphBuilder()
    b.initialize(model, config)
    b.build(shapes)
    return b


def _vector(arrays):
    v = C.OrtValueVector()
    for a in arrays:
        v.push_back(C.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(a), CPU))
    return v


class _Agent:
    """A TrainingAgent over a built training graph, as onnxcustom and ORTModule create it."""

    def __init__(self, builder):
        self.sess = InferenceSession(builder.get_model(), providers=["CPUExecutionProvider"])
        self.fw = [i.name for i in self.sess.get_inputs()]
        self.bw = [o.name for o in self.sess.get_outputs()]
        self.agent = C.TrainingAgent(self.sess._sess, self.fw, [CPU] * len(self.fw), self.bw, [CPU] * len(self.bw))
        self.cache = C.OrtValueCache()

    def forward(self, arrays):
        out, state = C.OrtValueVector(), C.PartialGraphExecutionState()
        self.agent.run_forward(_vector(arrays), out, state, self.cache)
        return [o.numpy() for o in out], state

    def backward(self, grads, state):
        out = C.OrtValueVector()
        self.agent.run_backward(_vector(grads), out, state)
        return dict(zip(self.bw, (o.numpy() for o in out)))


def _close(got, want, rtol=1e-5):
    err = np.linalg.norm(np.asarray(got, np.float64) - want) / max(np.linalg.norm(want), 1e-30)
    assert err < rtol, err


# ----------------------------------------------------------------------------------- the builder

def test_builder_graphs_and_info():
    rng = np.random.default_rng(1)
    model, w = _mlp(rng, extra_int_output=True)
    b = _build(model, _config(sorted(w)))
    info = b.get_graph_info()
    assert info.user_input_names == ["X"]
    assert info.user_input_grad_names == {"X": "X_grad"}
    assert info.initializer_names == ["B1", "B2", "W1", "W2"]
    assert info.initializer_names_to_train == ["B1", "B2", "W1", "W2"]
    assert info.initializer_grad_names_to_train == ["B1_grad", "B2_grad", "W1_grad", "W2_grad"]
    assert info.user_output_names == ["Y", "S"]
    assert info.output_grad_indices_non_differentiable == [1]
    assert info.output_grad_indices_require_full_shape == [0]
    assert info.module_output_gradient_name == ["Y_grad"]
    assert info.module_output_indices_requires_save_for_backward == []
    assert dict(info.frontier_node_arg_map) == {} and info.cached_node_arg_names == []

    train = onnx.load_from_string(b.get_model())
    onnx.checker.check_model(train)
    assert [i.name for i in train.graph.input] == ["X", "B1", "B2", "W1", "W2"]
    assert [o.name for o in train.graph.output] == ["X_grad", "B1_grad", "B2_grad", "W1_grad", "W2_grad"]
    assert not {t.name for t in train.graph.initializer} & set(w)  # weights are inputs (constants may remain)
    yields = [n for n in train.graph.node if n.op_type == "YieldOp"]
    assert len(yields) == 1 and yields[0].domain == "com.microsoft"
    assert list(yields[0].input) == ["Y", "S"] and list(yields[0].output) == ["Y_grad", ""]
    attrs = {a.name: list(a.ints) for a in yields[0].attribute}
    assert attrs == {"non_differentiable_outputs": [1], "full_shape_outputs": [0]}
    assert b.get_gradient_model() == b.get_model()

    fwd = onnx.load_from_string(b.get_inference_optimized_model())
    assert b.get_forward_model() == b.get_inference_optimized_model()
    assert [i.name for i in fwd.graph.input] == ["X", "B1", "B2", "W1", "W2"]
    assert [o.name for o in fwd.graph.output] == ["Y", "S"]
    # The forward model runs as an ordinary model and computes the module.
    x = rng.standard_normal((6, 5)).astype(np.float32)
    sess = onnxtrain.InferenceSession(fwd.SerializeToString())
    y, s = sess.run(None, {"X": x, **w})
    _close(y, _reference(x, w, np.zeros((6, 3)))[0])
    assert list(s) == [6, 3]


def test_builder_frozen_weights_and_inputs_without_grad():
    rng = np.random.default_rng(2)
    model, w = _mlp(rng)
    b = _build(model, _config(["B2", "W1", "W2"], train=["W2"], inputs=[]))
    info = b.get_graph_info()
    assert info.user_input_grad_names == {}
    assert info.initializer_grad_names_to_train == ["W2_grad"]
    train = onnx.load_from_string(b.get_model())
    assert [i.name for i in train.graph.input] == ["X", "B2", "W1", "W2"]
    assert [o.name for o in train.graph.output] == ["W2_grad"]
    assert {t.name for t in train.graph.initializer} & set(w) == {"B1"}  # not listed: stays a constant
    a = _Agent(b)
    x, dy = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((3, 3)).astype(np.float32)
    (y,), state = a.forward([x, w["B2"], w["W1"], w["W2"]])
    _close(y, _reference(x, w, dy)[0])
    grads = a.backward([dy], state)
    assert list(grads) == ["W2_grad"]
    _close(grads["W2_grad"], _reference(x, w, dy)[2]["W2"])


def test_builder_input_shapes():
    rng = np.random.default_rng(3)
    model, w = _mlp(rng)
    b = _build(model, _config(sorted(w)), shapes=[[7, 5]])
    x_decl = onnx.load_from_string(b.get_model()).graph.input[0]
    assert [d.dim_value for d in x_decl.type.tensor_type.shape.dim] == [7, 5]
    for shapes, message in [([[7, 5], [1]], "2 shapes for 1 user inputs"), ([[7]], "rank 2"),
                            ([[7, 4]], "dimension 1 fixed to 5"), ([[-1, 5]], "negative dimension")]:
        b = C.OrtModuleGraphBuilder()
        b.initialize(model, _config(sorted(w)))
        with pytest.raises(C.InvalidArgument, match=message):
            b.build(shapes)


def test_builder_errors():
    rng = np.random.default_rng(4)
    model, w = _mlp(rng)
    b = C.OrtModuleGraphBuilder()
    with pytest.raises(C.InvalidArgument, match="call initialize"):
        b.build()
    cases = [
        (_config(["W1", "nope"]), C.InvalidArgument, "initializer_names: 'nope' is not an initializer"),
        (_config(["W1"], train=["W2"]), C.InvalidArgument, "initializer_names_to_train: 'W2' is not in initializer_names"),
        (_config(["W1"], inputs=["Y"]), C.InvalidArgument, "input_names_require_grad: 'Y' is not an input"),
        (_config(["W1", "W1"]), C.InvalidArgument, "'W1' is listed twice"),
    ]
    for config, error, message in cases:
        with pytest.raises(error, match=message):
            C.OrtModuleGraphBuilder().initialize(model, config)
    for name in ("enable_caching", "use_memory_efficient_gradient"):
        c = _config(["W1"])
        setattr(c, name, True)
        with pytest.raises(C.NotImplemented, match=name):
            C.OrtModuleGraphBuilder().initialize(model, c)
    c = _config(["W1"])
    c.graph_transformer_config.enable_gelu_approximation = True
    c.graph_transformer_config.propagate_cast_ops_config.level = 1
    with pytest.raises(C.NotImplemented, match="enable_gelu_approximation, propagate_cast_ops_config.level"):
        C.OrtModuleGraphBuilder().initialize(model, c)
    with pytest.raises(TypeError, match="must be a list of strings"):
        c.initializer_names = "W1"
    with pytest.raises(TypeError, match="must be bool"):
        c.enable_caching = 1
    with pytest.raises(AttributeError, match="no attribute 'initializers'"):
        c.initializers = []
    with pytest.raises(TypeError, match="OrtModuleGraphBuilderConfiguration"):
        C.OrtModuleGraphBuilder().initialize(model, {})
    with pytest.raises(C.InvalidProtobuf):
        C.OrtModuleGraphBuilder().initialize(b"not a model", _config([]))
    # Forward model only.
    c = _config(sorted(w))
    c.build_gradient_graph = False
    b = _build(model, c)
    assert onnx.load_from_string(b.get_inference_optimized_model()).graph.output[0].name == "Y"
    with pytest.raises(C.InvalidArgument, match="build_gradient_graph is False"):
        b.get_model()
    b = C.OrtModuleGraphBuilder()
    b.initialize(model, _config(sorted(w)))
    with pytest.raises(C.InvalidArgument, match="call build"):
        b.get_model()


def test_builder_refuses_operators_without_gradient():
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Mul", ["X", "W"], ["m"]), helper.make_node("Round", ["m"], ["Y"])],
                              "g", [x], [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])],
                              [numpy_helper.from_array(np.ones((2, 3), np.float32), "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)]).SerializeToString()
    b = C.OrtModuleGraphBuilder()
    b.initialize(model, _config(["W"]))
    b.build()  # Round has a zero gradient: the weight's gradient is zeros, not an error
    a = _Agent(b)
    _, state = a.forward([np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)])
    grads = a.backward([np.ones((2, 3), np.float32)], state)
    assert not grads["W_grad"].any() and not grads["X_grad"].any()


# ------------------------------------------------------------------------------------- the agent

def test_agent_gradients_against_reference():
    rng = np.random.default_rng(5)
    model, w = _mlp(rng, extra_int_output=True)
    a = _Agent(_build(model, _config(sorted(w))))
    x, dy = rng.standard_normal((8, 5)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)
    (y, s), state = a.forward([x] + [w[k] for k in sorted(w)])
    assert state.pending
    y_ref, dx_ref, g_ref = _reference(x, w, dy)
    _close(y, y_ref)
    assert list(s) == [8, 3]
    grads = a.backward([dy], state)  # no gradient for the integer output
    assert not state.pending
    _close(grads["X_grad"], dx_ref)
    for k in w:
        _close(grads[k + "_grad"], g_ref[k])
    assert a.agent.forward_output_names == ["Y", "S"] and a.agent.differentiable_outputs == [0]


def test_agent_against_torch_autograd():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    model, w = _mlp(rng)
    a = _Agent(_build(model, _config(sorted(w))))
    x, dy = rng.standard_normal((4, 5)), rng.standard_normal((4, 3))
    tx = torch.tensor(x, requires_grad=True)
    tw = {k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in w.items()}
    ty = torch.tanh(tx @ tw["W1"] + tw["B1"]) @ tw["W2"] + tw["B2"]
    ty.backward(torch.tensor(dy))
    (y,), state = a.forward([x.astype(np.float32)] + [w[k] for k in sorted(w)])
    grads = a.backward([dy.astype(np.float32)], state)
    _close(y, ty.detach().numpy())
    _close(grads["X_grad"], tx.grad.numpy())
    for k in w:
        _close(grads[k + "_grad"], tw[k].grad.numpy())


def test_agent_several_forwards_in_flight():
    rng = np.random.default_rng(7)
    model, w = _mlp(rng)
    a = _Agent(_build(model, _config(sorted(w))))
    weights = [w[k] for k in sorted(w)]
    runs = []
    for batch in (2, 5, 3):  # different shapes, each with its own state
        x, dy = rng.standard_normal((batch, 5)).astype(np.float32), rng.standard_normal((batch, 3)).astype(np.float32)
        (y,), state = a.forward([x] + weights)
        runs.append((x, dy, y, state))
    for x, dy, y, state in reversed(runs):  # backwards in the opposite order
        y_ref, dx_ref, g_ref = _reference(x, w, dy)
        _close(y, y_ref)
        grads = a.backward([dy], state)
        _close(grads["X_grad"], dx_ref)
        _close(grads["W1_grad"], g_ref["W1"])


def test_agent_zero_copy_inputs_and_dlpack_outputs():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    model, w = _mlp(rng)
    a = _Agent(_build(model, _config(sorted(w))))
    x = torch.randn(4, 5)
    feeds = C.OrtValueVector()
    feeds.push_back(torch.utils.dlpack.to_dlpack(x), False)
    for k in sorted(w):
        feeds.push_back(C.OrtValue.ortvalue_from_numpy(w[k], CPU))
    assert feeds[0].data_ptr() == x.data_ptr()  # the agent reads torch's memory
    out, state = C.OrtValueVector(), C.PartialGraphExecutionState()
    a.agent.run_forward(feeds, out, state, None)
    y = torch.utils.dlpack.from_dlpack(out[0].to_dlpack())
    assert y.data_ptr() == out[0].data_ptr()
    _close(y.numpy(), _reference(x.numpy(), w, np.zeros((4, 3)))[0])
    grads = C.OrtValueVector()
    grads.push_back(torch.utils.dlpack.to_dlpack(torch.ones(4, 3)), False)
    res = C.OrtValueVector()
    a.agent.run_backward(grads, res, state)
    assert len(res) == 5


def test_agent_errors():
    rng = np.random.default_rng(9)
    model, w = _mlp(rng)
    b = _build(model, _config(sorted(w)))
    a = _Agent(b)
    weights = [w[k] for k in sorted(w)]
    x = rng.standard_normal((2, 5)).astype(np.float32)
    with pytest.raises(C.InvalidArgument, match="holds no forward run"):
        a.backward([np.ones((2, 3), np.float32)], C.PartialGraphExecutionState())
    _, state = a.forward([x] + weights)
    with pytest.raises(C.InvalidArgument, match="has not run yet"):
        a.agent.run_forward(_vector([x] + weights), C.OrtValueVector(), state, None)
    with pytest.raises(C.InvalidArgument, match="must be"):
        a.backward([np.ones((3, 3), np.float32)], state)  # shaped unlike the output
    with pytest.raises(C.InvalidArgument, match="expected 1 backward inputs, got 2"):
        a.backward([np.ones((2, 3), np.float32)] * 2, state)
    other = _Agent(b)
    with pytest.raises(C.InvalidArgument, match="belongs to another agent"):
        other.backward([np.ones((2, 3), np.float32)], state)
    a.backward([np.ones((2, 3), np.float32)], state)
    with pytest.raises(C.InvalidArgument, match="holds no forward run"):
        a.backward([np.ones((2, 3), np.float32)], state)
    with pytest.raises(C.InvalidArgument, match="4 feeds for 5 names"):
        a.forward([x] + weights[:3])
    with pytest.raises(C.InvalidArgument, match="X"):
        a.forward([x.astype(np.float64)] + weights)
    with pytest.raises(C.InvalidArgument, match="cache must be an OrtValueCache"):
        a.agent.run_forward(_vector([x] + weights), C.OrtValueVector(), C.PartialGraphExecutionState(), {})
    sess = a.sess._sess
    with pytest.raises(C.InvalidArgument, match="'nope' is not an input"):
        C.TrainingAgent(sess, ["nope"], [CPU], a.bw, [CPU])
    with pytest.raises(C.InvalidArgument, match="misses the input 'W2'"):
        C.TrainingAgent(sess, a.fw[:-1], [CPU], a.bw, [CPU])
    with pytest.raises(C.InvalidArgument, match="listed twice"):
        C.TrainingAgent(sess, a.fw + ["X"], [CPU], a.bw, [CPU])
    with pytest.raises(C.InvalidArgument, match="'nope' is not a value of the graph"):
        C.TrainingAgent(sess, a.fw, [CPU], ["nope"], [CPU])
    with pytest.raises(C.InvalidArgument, match="cuda"):
        C.TrainingAgent(sess, a.fw, [C.OrtDevice(C.OrtDevice.cuda(), 0, 0)], a.bw, [CPU])
    # A model without the cut.
    with pytest.raises(C.InvalidArgument, match="no com.microsoft YieldOp"):
        C.TrainingAgent(InferenceSession(b.get_inference_optimized_model())._sess, a.fw, [CPU], ["Y"], [CPU])
    # Running the training graph as a plain model names the YieldOp.
    with pytest.raises(C.InvalidArgument, match="YieldOp marks the cut"):
        a.sess.run(None, dict(zip(a.fw, [x] + weights)))


def test_agent_gradient_shapes_follow_full_shape_outputs():
    # onnxruntime's rule: YieldOp checks the shape of the gradients in full_shape_outputs only (those
    # the backward part reads as they are); the gradient of an output that also feeds the graph is
    # summed with the inner one and may be anything broadcastable (ORTModule passes a scalar 0).
    rng = np.random.default_rng(7)
    w = rng.standard_normal((5, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y1"]), helper.make_node("Tanh", ["Y1"], ["Y2"])], "two",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 5])],
        [helper.make_tensor_value_info("Y1", TensorProto.FLOAT, ["N", 3]),
         helper.make_tensor_value_info("Y2", TensorProto.FLOAT, ["N", 3])], [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    b = _build(model.SerializeToString(), _config(["W"]))
    info = b.get_graph_info()
    assert info.output_grad_indices_require_full_shape == [1]
    assert info.module_output_gradient_name == ["Y1_grad", "Y2_grad"]
    yields = [n for n in onnx.load_from_string(b.get_model()).graph.node if n.op_type == "YieldOp"]
    assert {a.name: list(a.ints) for a in yields[0].attribute}["full_shape_outputs"] == [1]

    x = rng.standard_normal((4, 5)).astype(np.float32)
    dy2 = rng.standard_normal((4, 3)).astype(np.float32)
    y1 = x.astype(np.float64) @ w

    def reference(dy1):
        g1 = np.broadcast_to(dy1, y1.shape) + dy2 * (1 - np.tanh(y1) ** 2)
        return {"X_grad": g1 @ w.T.astype(np.float64), "W_grad": x.T.astype(np.float64) @ g1}

    a = _Agent(b)
    for dy1 in (np.float32(0), np.full((1, 3), 0.5, np.float32), rng.standard_normal(3).astype(np.float32),
                rng.standard_normal((4, 3)).astype(np.float32)):
        _, state = a.forward([x, w])
        got = a.backward([np.asarray(dy1), dy2], state)
        for name, want in reference(dy1).items():
            _close(got[name], want)
    # The full-shape output's gradient must have its shape; a non-broadcastable one is refused too.
    for grads in ([np.float32(0), np.float32(0)], [np.zeros((4, 2), np.float32), dy2]):
        _, state = a.forward([x, w])
        with pytest.raises(Exception, match="backward input 'Y[12]_grad' must be"):
            a.backward([np.asarray(g) for g in grads], state)


def test_agent_feeds_of_other_dimensions():
    # onnxruntime's partial run (InferenceSession::PartialRun) does not compare feeds with the declared
    # inputs: a graph built for X [2, 5] runs a batch of 3, planned for the shapes given.
    rng = np.random.default_rng(12)
    model, w = _mlp(rng)
    a = _Agent(_build(model, _config(sorted(w)), [[2, 5]]))
    assert a.sess.get_inputs()[0].shape == [2, 5]
    weights = [w[k] for k in sorted(w)]
    for batch in (3, 2, 7):
        x = rng.standard_normal((batch, 5)).astype(np.float32)
        dy = rng.standard_normal((batch, 3)).astype(np.float32)
        (y,), state = a.forward([x] + weights)
        got = a.backward([dy], state)
        want_y, want_dx, want = _reference(x, w, dy)
        _close(y, want_y)
        _close(got["X_grad"], want_dx)
        for k in w:
            _close(got[k + "_grad"], want[k])
    # The gradient graph was derived for rank 2: another rank is refused before anything runs.
    with pytest.raises(C.InvalidArgument, match="feed 'X' has rank 3.*built for rank 2"):
        a.forward([np.zeros((1, 2, 5), np.float32)] + weights)
    # What the kernels cannot compute fails in the kernel, naming the node (onnxruntime's too).
    with pytest.raises(C.InvalidArgument, match="MatMul"):
        a.forward([np.zeros((2, 6), np.float32)] + weights)


def test_agent_refuses_gradients_shaped_unlike_their_input():
    # Built for X, Z [2, 5], the gradient graph reduces no axis for X; fed X [1, 5] (broadcast against
    # Z) its gradient would be [2, 5]: refused naming both shapes, not returned.
    w = np.full((1, 5), 0.5, np.float32)
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "Z"], ["s"]), helper.make_node("Mul", ["s", "W"], ["Y"])], "bcast",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 5]),
         helper.make_tensor_value_info("Z", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 5])], [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    a = _Agent(_build(model.SerializeToString(), _config(["W"], inputs=("X", "Z"))))
    z = np.arange(15, dtype=np.float32).reshape(3, 5)
    x = np.ones((3, 5), np.float32)
    (y,), state = a.forward([x, z, w])
    got = a.backward([np.ones((3, 5), np.float32)], state)
    _close(y, (x + z) * 0.5)
    _close(got["X_grad"], np.full((3, 5), 0.5))
    _close(got["W_grad"], (x + z).sum(0, keepdims=True))
    (y,), state = a.forward([x[:1], z[:2], w])
    with pytest.raises(C.InvalidArgument, match=r"'X_grad' has shape \[2, 5\] but its input 'X' was fed with "
                                                r"shape \[1, 5\]"):
        a.backward([np.ones((2, 5), np.float32)], state)


def test_agent_run_options_terminate():
    rng = np.random.default_rng(10)
    model, w = _mlp(rng)
    a = _Agent(_build(model, _config(sorted(w))))
    ro = C.RunOptions()
    ro.terminate = True
    with pytest.raises(C.Fail, match="terminate"):
        a.agent.run_forward(_vector([np.ones((2, 5), np.float32)] + [w[k] for k in sorted(w)]), C.OrtValueVector(),
                            C.PartialGraphExecutionState(), None, ro)


def test_ortvalue_cache():
    cache = C.OrtValueCache()
    v = C.OrtValue.ortvalue_from_numpy(np.arange(3, dtype=np.float32), CPU)
    cache.insert("a", v)
    assert cache.keys() == ["a"] and cache.count("a") == 1 and cache.count("b") == 0 and len(cache) == 1
    assert "a" in cache and np.array_equal(cache["a"].numpy(), [0, 1, 2])
    cache.remove("a")
    assert len(cache) == 0
    with pytest.raises(C.InvalidArgument, match="no value named 'a'"):
        cache.remove("a")
    with pytest.raises(KeyError):
        cache["a"]


def test_gradient_graph_builder_in_pybind_state(mlp_model):
    model, w, b = mlp_model
    assert C.GradientGraphBuilder is onnxtrain.GradientGraphBuilder
    builder = C.GradientGraphBuilder(model, {"y"}, {"W", "b"}, "z")
    builder.build()
    assert [o.name for o in onnx.load_from_string(builder.get_model()).graph.output] == ["y", "W_grad", "b_grad"]
    with pytest.raises(C.InvalidArgument, match="'nope' is not a value"):
        C.GradientGraphBuilder(model, {"y"}, {"W"}, "nope").build()


def test_under_the_onnxruntime_alias(tmp_path):
    script = tmp_path / "agent_script.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        from onnx import TensorProto, helper, numpy_helper
        import onnxruntime
        from onnxruntime.capi._pybind_state import (
            OrtModuleGraphBuilder, OrtModuleGraphBuilderConfiguration, TrainingGraphTransformerConfiguration,
            TrainingAgent, OrtValueCache, OrtValueVector, PartialGraphExecutionState, OrtDevice, OrtValue)
        w = np.full((2, 2), 0.5, np.float32)
        g = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["Y"])], "g",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 2])],
                              [numpy_helper.from_array(w, "W")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
        c = OrtModuleGraphBuilderConfiguration()
        c.initializer_names = ["W"]; c.initializer_names_to_train = ["W"]; c.input_names_require_grad = ["X"]
        c.build_gradient_graph = True; c.graph_transformer_config = TrainingGraphTransformerConfiguration()
        b = OrtModuleGraphBuilder(); b.initialize(m.SerializeToString(), c); b.build()
        sess = onnxruntime.InferenceSession(b.get_model(), providers=["CPUExecutionProvider"])
        dev = OrtDevice(OrtDevice.cpu(), OrtDevice.default_memory(), 0)
        agent = TrainingAgent(sess._sess, ["X", "W"], [dev, dev], ["X_grad", "W_grad"], [dev, dev])
        feeds = OrtValueVector()
        for a in (np.array([[1, 2]], np.float32), w):
            feeds.push_back(OrtValue.ortvalue_from_numpy(a, dev))
        out, state = OrtValueVector(), PartialGraphExecutionState()
        agent.run_forward(feeds, out, state, OrtValueCache())
        grads = OrtValueVector(); grads.push_back(OrtValue.ortvalue_from_numpy(np.ones((1, 2), np.float32), dev))
        res = OrtValueVector(); agent.run_backward(grads, res, state)
        print(out[0].numpy().tolist(), res[1].numpy().tolist())
    """))
    r = run_alias(script, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[[1.5, 1.5]] [[1.0, 1.0], [2.0, 2.0]]"
