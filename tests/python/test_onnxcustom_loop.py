"""onnxcustom's OrtGradientOptimizer loop over onnxruntime-training's TrainingSession, run unchanged
in its own style under the onnxruntime alias: ``io_binding()._iobinding`` (the C SessionIOBinding),
inputs bound by pointer, ``_sess.run_with_iobinding(bind, None)``, ``copy_outputs_to_cpu()``; and
``get_state()`` as onnxruntime's GetStateTensors (trained weights and optimizer state, no other
constant). Weights and losses are checked against SGD computed with numpy in float64."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain
from onnxtrain import _C

from test_ort_scripts import run_script


def _linear_with_loss(with_reshape=False):
    """pred = X @ W + B (W [4, 1], B [1]), loss = sum((pred - label)^2) as onnxcustom's
    add_loss_output writes it; with_reshape adds a Reshape whose shape is an initializer."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 1)).astype(np.float32)
    b = rng.standard_normal(1).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["X", "W"], ["XW"]), helper.make_node("Add", ["XW", "B"], ["P0"])]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")]
    if with_reshape:
        nodes.append(helper.make_node("Reshape", ["P0", "shape"], ["variable"]))
        inits.append(numpy_helper.from_array(np.array([-1, 1], np.int64), "shape"))
    else:
        nodes.append(helper.make_node("Identity", ["P0"], ["variable"]))
    nodes += [helper.make_node("Sub", ["variable", "label"], ["diff"]),
              helper.make_node("Mul", ["diff", "diff"], ["sq"]),
              helper.make_node("ReduceSum", ["sq"], ["loss"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "lin", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 4]),
                       helper.make_tensor_value_info("label", TensorProto.FLOAT, [None, 1])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("variable", TensorProto.FLOAT, [None, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    return model, w, b


def _session(model, optimizer="SGDOptimizer"):
    p = onnxtrain.TrainingParameters()
    p.loss_output_name = "loss"
    p.weights_to_train = {"W", "B"}
    p.training_optimizer_name = optimizer
    return onnxtrain.TrainingSession(model.SerializeToString(), p)


def _numpy_sgd(w, b, X, y, lr, batch):
    """onnxcustom's step: lr / batch_size on the summed squared error, in float64."""
    w, b = w.astype(np.float64), b.astype(np.float64)
    losses = []
    for i in range(0, len(X), batch):
        xb, yb = X[i:i + batch].astype(np.float64), y[i:i + batch].astype(np.float64)
        r = xb @ w + b - yb
        losses.append((r ** 2).sum())
        w = w - lr / batch * 2 * xb.T @ r
        b = b - lr / batch * 2 * r.sum(0)
    return w, b, losses


ONNXCUSTOM_LOOP = """
    import sys
    import numpy
    import onnx
    from onnxruntime import OrtValue, SessionOptions, TrainingParameters, TrainingSession
    from onnxruntime.capi._pybind_state import OrtDevice as C_OrtDevice, OrtValue as C_OrtValue
    from onnxruntime.capi._pybind_state import SessionIOBinding as C_IOBinding

    model = onnx.load(sys.argv[1])
    X, y = numpy.load(sys.argv[2]), numpy.load(sys.argv[3])
    p = TrainingParameters()
    p.loss_output_name = 'loss'
    p.use_mixed_precision = False
    p.weights_to_train = {'W', 'B'}
    p.training_optimizer_name = 'SGDOptimizer'
    p.optimizer_attributes_map = {n: {} for n in ['W', 'B']}
    p.optimizer_int_attributes_map = {n: {} for n in ['W', 'B']}
    so = SessionOptions()
    so.log_severity_level = 4
    sess = TrainingSession(model.SerializeToString(), p, so, providers=['CPUExecutionProvider'])
    names = [i.name for i in sess.get_inputs()]
    assert names[2] == 'Learning_Rate', names
    device = C_OrtDevice(C_OrtDevice.cpu(), C_OrtDevice.default_memory(), 0)
    bind = sess.io_binding()._iobinding
    assert isinstance(bind, C_IOBinding)
    X_ort = C_OrtValue.ortvalue_from_numpy(X, device)
    y_ort = C_OrtValue.ortvalue_from_numpy(y, device)
    batch = 10
    lr_alive = numpy.array([0.01 / batch], dtype=numpy.float32)
    bind.bind_input(names[2], device, lr_alive.dtype, lr_alive.shape, lr_alive.__array_interface__['data'][0])
    bind.bind_output('loss', device)
    losses = []
    for i in range(0, X.shape[0], batch):
        bind.bind_input(names[0], device, X.dtype, (batch, 4), X_ort.data_ptr() + i * 4 * 4)
        bind.bind_input(names[1], device, y.dtype, (batch, 1), y_ort.data_ptr() + i * 4)
        sess._sess.run_with_iobinding(bind, None)
        outputs = bind.copy_outputs_to_cpu()
        losses.append(float(outputs[0]))
    state = sess.get_state()
    print(sorted(state))
    numpy.savez(sys.argv[4], losses=numpy.array(losses), **state)
"""


def test_onnxcustom_training_loop_runs_unchanged(tmp_path):
    model, w, b = _linear_with_loss(with_reshape=True)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 4)).astype(np.float32)
    y = (X @ np.array([[1.0], [-2.0], [0.5], [3.0]]) + 0.25).astype(np.float32)
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    out = run_script(tmp_path, ONNXCUSTOM_LOOP, tmp_path / "m.onnx", tmp_path / "X.npy", tmp_path / "y.npy",
                     tmp_path / "r.npz")
    # GetStateTensors: the trained weights, not the Reshape's shape constant
    assert out.strip().splitlines()[-1] == "['B', 'W']"
    got = np.load(tmp_path / "r.npz")
    ref_w, ref_b, ref_losses = _numpy_sgd(w, b, X, y, 0.01, 10)
    np.testing.assert_allclose(got["losses"], ref_losses, rtol=1e-5)
    np.testing.assert_allclose(got["W"], ref_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["B"], ref_b, rtol=1e-5, atol=1e-6)


def test_bound_outputs_and_errors():
    model, w, b = _linear_with_loss()
    s, other = _session(model), _session(model)
    bind = s.io_binding()
    X = np.ones((2, 4), np.float32)
    y = np.zeros((2, 1), np.float32)
    bind.bind_cpu_input("X", X)
    bind.bind_cpu_input("label", y)
    bind.bind_cpu_input("Learning_Rate", np.array([0.0], np.float32))
    loss = np.empty((), np.float32)
    bind.bind_output("loss", "cpu", 0, np.float32, [], loss.__array_interface__["data"][0])
    bind.bind_output("variable")
    s.run_with_iobinding(bind)
    pred = (X @ w + b).astype(np.float64)
    np.testing.assert_allclose(loss, (pred ** 2).sum(), rtol=1e-6)  # written into the bound buffer
    np.testing.assert_allclose(bind.copy_outputs_to_cpu()[1], pred, rtol=1e-6)
    with pytest.raises(onnxtrain.InvalidArgument, match="belongs to another session"):
        other._sess.run_with_iobinding(bind._iobinding, None)
    with pytest.raises(onnxtrain.InvalidArgument, match="expected a SessionIOBinding"):
        s._sess.run_with_iobinding(object(), None)
    with pytest.raises(onnxtrain.InvalidArgument, match="expected an InferenceSession or a TrainingSession"):
        _C.SessionIOBinding(object())
    ro = onnxtrain.RunOptions()
    ro.terminate = True
    with pytest.raises(RuntimeError, match="terminated"):
        s.run_with_iobinding(bind, ro)


def test_get_state_is_onnxruntimes_state_tensors():
    model, w, b = _linear_with_loss(with_reshape=True)
    sgd = _session(model)
    assert sorted(sgd.get_state()) == ["B", "W"]
    assert "shape" in sgd._initializers()
    adam = _session(model, "AdamOptimizer")
    feed = {"X": np.ones((3, 4), np.float32), "label": np.zeros((3, 1), np.float32),
            "Learning_Rate": np.array([0.1], np.float32)}
    for _ in range(2):
        adam.run(["loss"], feed)
    st = adam.get_state()
    assert sorted(st) == ["B", "Moment_1_B", "Moment_1_W", "Moment_2_B", "Moment_2_W", "Update_Count_B",
                          "Update_Count_W", "W"]
    # onnxruntime's update count: int64 [1], 1 before the first update, so 3 after two
    assert st["Update_Count_W"].dtype == np.int64 and st["Update_Count_W"].tolist() == [3]
    # load_state(get_state()) restores weights and optimizer state: the next step matches
    twin = _session(model, "AdamOptimizer")
    twin.load_state(st)
    np.testing.assert_array_equal(twin.run(["loss"], feed)[0], adam.run(["loss"], feed)[0])
    for k, v in adam.get_state().items():
        np.testing.assert_array_equal(twin.get_state()[k], v, err_msg=k)
    with pytest.raises(ValueError, match="has none"):
        sgd.load_state({"Update_Count_W": np.array([2], np.int64)})
