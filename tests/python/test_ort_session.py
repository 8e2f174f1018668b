"""The session layer against numpy and onnxruntime's documented behaviour: InferenceSession.run and
its OrtValue / OrtValueVector / IOBinding variants, model metadata and providers, RunOptions,
SessionOptions (every property, optimization levels, memory options, profiling, config entries,
free dimensions, initializers, ort_config metadata), errors and the module functions of
onnxruntime_pybind11_state. Expected values come from numpy or from onnx itself, never from
onnxtrain."""
import json
import re
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain as ort
from onnxtrain.capi import onnxruntime_pybind11_state as C
from onnxtrain.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, NotImplemented  # noqa: A004

OPSET = 17
F = TensorProto.FLOAT


def make_model(nodes, inputs, outputs, initializers=(), opset=OPSET, **fields):
    graph = helper.make_graph(nodes, fields.pop("graph_name", "g"), inputs, outputs, list(initializers),
                              doc_string=fields.pop("graph_doc", None))
    metadata = fields.pop("metadata", None)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **fields)
    model.ir_version = 8
    if metadata:
        helper.set_model_props(model, metadata)
    return model.SerializeToString()


def tensor(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def mlp_reference(x, w, b):
    z = x.astype(np.float64) @ w.astype(np.float64) + b
    return np.maximum(z, 0), z


@pytest.fixture
def x54():
    return np.random.default_rng(7).standard_normal((5, 4)).astype(np.float32)


@pytest.fixture
def restore_seed():
    yield
    ort.set_seed(0x6F6E6E78)  # ExecOptions' default seed (kernel.h)


@pytest.fixture
def restore_logger():
    yield
    ort.set_default_logger_severity(2)
    ort.set_default_logger_verbosity(0)


# ---------------------------------------------------------------------------------------------------
# 1. run


def test_run_output_names_none_str_list(mlp_model, x54):
    data, w, b = mlp_model
    sess = ort.InferenceSession(data)
    y_ref, z_ref = mlp_reference(x54, w, b)
    y, z = sess.run(None, {"x": x54})
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(z, z_ref, rtol=1e-5, atol=1e-5)
    (only_z,) = sess.run("z", {"x": x54})
    np.testing.assert_allclose(only_z, z_ref, rtol=1e-5, atol=1e-5)
    z2, y2 = sess.run(["z", "y"], {"x": x54})
    np.testing.assert_allclose(y2, y_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(z2, z_ref, rtol=1e-5, atol=1e-5)
    assert len(sess.run([], {"x": x54})) == 2  # an empty list means every output, as None does


def test_run_with_ortvalue_feed_and_run_options(mlp_model, x54):
    data, w, b = mlp_model
    sess = ort.InferenceSession(data)
    ov = ort.OrtValue.ortvalue_from_numpy(x54)
    (y,) = sess.run(["y"], {"x": ov}, ort.RunOptions())
    np.testing.assert_allclose(y, mlp_reference(x54, w, b)[0], rtol=1e-5, atol=1e-5)
    (y_c,) = sess.run(["y"], {"x": ov._get_c_value()})
    np.testing.assert_array_equal(y_c, y)
    with pytest.raises(TypeError):
        sess.run(None, {"x": x54}, run_options="not options")


def seq_model():
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None))
    return make_model([helper.make_node("Identity", ["s"], ["t"])], [helper.make_value_info("s", seq)],
                      [helper.make_value_info("t", seq)])


def test_sequence_input_and_output():
    sess = ort.InferenceSession(seq_model())
    assert sess.get_inputs()[0].type == "seq(tensor(float))"
    assert sess.get_outputs()[0].type == "seq(tensor(float))"
    items = [np.arange(3, dtype=np.float32), np.full((2, 2), -1.5, np.float32)]
    (out,) = sess.run(None, {"s": items})
    assert isinstance(out, list) and len(out) == 2
    for got, want in zip(out, items):
        np.testing.assert_array_equal(got, want)
    (empty,) = sess.run(None, {"s": []})
    assert empty == []


def optional_model():
    opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2]))
    return make_model([helper.make_node("Identity", ["o"], ["p"])], [helper.make_value_info("o", opt)],
                      [helper.make_value_info("p", opt)])


def test_optional_input_and_output():
    sess = ort.InferenceSession(optional_model())
    assert sess.get_inputs()[0].type == "optional(tensor(float))"
    (full,) = sess.run(None, {"o": np.array([1.0, 2.0], np.float32)})
    np.testing.assert_array_equal(full, [1.0, 2.0])
    # onnxruntime skips None feeds ("to feed Optional inputs"): the output is an empty optional, None.
    (empty,) = sess.run(None, {"o": None})
    assert empty is None


def test_omitted_optional_node_input():
    # Clip(x, <no min>, max): the empty name is an omitted optional input.
    data = make_model([helper.make_node("Clip", ["x", "", "hi"], ["y"])], [tensor("x", [None]), tensor("hi", [])],
                      [tensor("y", [None])])
    x = np.array([-7.0, 0.5, 3.0, 9.0], np.float32)
    (y,) = ort.InferenceSession(data).run(None, {"x": x, "hi": np.float32(2.5)})
    np.testing.assert_array_equal(y, np.minimum(x, 2.5))


@pytest.mark.parametrize("arr", [np.array(["a", "", "héllo wörld"], dtype=object), np.array(["a", "", "héllo wörld"]),
                                 np.array([["x", "yy"], ["zzz", "w"]])])
def test_string_tensors_identity(arr):
    data = make_model([helper.make_node("Identity", ["s"], ["t"])], [tensor("s", None, TensorProto.STRING)],
                      [tensor("t", None, TensorProto.STRING)])
    sess = ort.InferenceSession(data)
    assert sess.get_inputs()[0].type == "tensor(string)"
    (out,) = sess.run(None, {"s": arr})
    assert out.dtype == object and out.shape == arr.shape  # onnxruntime returns str objects
    assert out.tolist() == arr.astype(object).tolist()


def test_string_inputs_given_as_bytes_or_void():
    # onnxruntime's test_input_bytes and test_input_void: bytes arrays and np.void arrays (raw bytes of
    # the item size) feed a string input; the outputs are str objects.
    data = make_model([helper.make_node("Identity", ["s"], ["t"])], [tensor("s", None, TensorProto.STRING)],
                      [tensor("t", None, TensorProto.STRING)])
    sess = ort.InferenceSession(data)
    x = np.array([b"this", b"is", b"identity", b"test"]).reshape((2, 2))
    np.testing.assert_equal(sess.run(None, {"s": x})[0].astype("|S8"), x)
    v = np.array([b"must", b"have", b"same", b"size"], dtype=np.void).reshape((2, 2))
    np.testing.assert_equal(sess.run(None, {"s": v})[0], np.array([["must", "have"], ["same", "size"]], dtype=object))
    # A structured type is not raw bytes: refused, naming the input.
    with pytest.raises(InvalidArgument, match="input 's'"):
        sess.run(None, {"s": np.zeros(2, dtype=[("a", "i4")])})


# ---------------------------------------------------------------------------------------------------
# 2. run_with_ort_values, run_with_ortvaluevector, IOBinding


def test_run_with_ort_values(mlp_model, x54):
    data, w, b = mlp_model
    sess = ort.InferenceSession(data)
    res = sess.run_with_ort_values(["z", "y"], {"x": ort.OrtValue.ortvalue_from_numpy(x54)})
    assert all(isinstance(v, ort.OrtValue) for v in res) and len(res) == 2
    y_ref, z_ref = mlp_reference(x54, w, b)
    np.testing.assert_allclose(res[0].numpy(), z_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res[1].numpy(), y_ref, rtol=1e-5, atol=1e-5)
    assert res[1].shape() == [5, 3] and res[1].data_type() == "tensor(float)"
    allres = sess.run_with_ort_values(None, {"x": ort.OrtValue.ortvalue_from_numpy(x54)})
    np.testing.assert_allclose(allres[0].numpy(), y_ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError):
        sess.run_with_ort_values(None, {"x": x54})


def test_run_with_ortvaluevector(mlp_model, x54):
    data, w, b = mlp_model
    sess = ort.InferenceSession(data)
    feeds = C.OrtValueVector()
    feeds.push_back(ort.OrtValue.ortvalue_from_numpy(x54)._ortvalue)
    fetches = C.OrtValueVector()
    cpu = C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0)
    sess.run_with_ortvaluevector(ort.RunOptions(), ["x"], feeds, ["y", "z"], fetches, [cpu, cpu])
    assert len(fetches) == 2
    y_ref, z_ref = mlp_reference(x54, w, b)
    np.testing.assert_allclose(fetches[0].numpy(), y_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fetches[1].numpy(), z_ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(InvalidArgument):
        sess.run_with_ortvaluevector(None, ["x", "extra"], feeds, ["y"], fetches, None)


def test_iobinding_cpu_input_and_allocated_output(mlp_model, x54):
    data, w, b = mlp_model
    sess = ort.InferenceSession(data)
    io = sess.io_binding()
    assert isinstance(io, ort.IOBinding)
    io.bind_cpu_input("x", x54)
    io.bind_output("y")
    io.synchronize_inputs()
    sess.run_with_iobinding(io)
    io.synchronize_outputs()
    y_ref = mlp_reference(x54, w, b)[0]
    (out,) = io.get_outputs()
    assert isinstance(out, ort.OrtValue) and out.device_name() == "cpu"
    np.testing.assert_allclose(out.numpy(), y_ref, rtol=1e-5, atol=1e-5)
    (copy,) = io.copy_outputs_to_cpu()
    np.testing.assert_allclose(copy, y_ref, rtol=1e-5, atol=1e-5)
    copy[...] = 123  # a copy: the bound output is not changed
    np.testing.assert_allclose(io.get_outputs()[0].numpy(), y_ref, rtol=1e-5, atol=1e-5)


def test_iobinding_by_pointer_input_and_output(mlp_model, x54):
    data, w, b = mlp_model
    sess = ort.InferenceSession(data)
    io = sess.io_binding()
    io.bind_input("x", "cpu", 0, np.float32, list(x54.shape), x54.ctypes.data)
    out = np.full((5, 3), np.nan, np.float32)
    io.bind_output("z", "cpu", 0, np.float32, [5, 3], out.ctypes.data)
    sess.run_with_iobinding(io)
    z_ref = mlp_reference(x54, w, b)[1]
    np.testing.assert_allclose(out, z_ref, rtol=1e-5, atol=1e-5)  # the caller's buffer was written
    np.testing.assert_allclose(io.get_outputs()[0].numpy(), z_ref, rtol=1e-5, atol=1e-5)
    assert io.get_outputs()[0].data_ptr() == out.ctypes.data
    # The input is read at run time, from the bound memory.
    x54 *= -1
    sess.run_with_iobinding(io)
    np.testing.assert_allclose(out, mlp_reference(x54, w, b)[1], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="element_type"):
        io.bind_output("z", "cpu", 0, None, None, out.ctypes.data)


def test_iobinding_ortvalue_input_and_output_in_place(mlp_model, x54):
    data, w, b = mlp_model
    sess = ort.InferenceSession(data)
    io = sess.io_binding()
    io.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x54))
    y_ov = ort.OrtValue.ortvalue_from_shape_and_type([5, 3], np.float32)
    ptr = y_ov.data_ptr()
    io.bind_ortvalue_output("y", y_ov)
    io.bind_output("z")
    sess.run_with_iobinding(io)
    y_ref, z_ref = mlp_reference(x54, w, b)
    assert y_ov.data_ptr() == ptr
    np.testing.assert_allclose(y_ov.numpy(), y_ref, rtol=1e-5, atol=1e-5)
    y_out, z_out = io.get_outputs()
    assert y_out.data_ptr() == ptr
    np.testing.assert_allclose(z_out.numpy(), z_ref, rtol=1e-5, atol=1e-5)
    ys, zs = io.copy_outputs_to_cpu()
    np.testing.assert_allclose(ys, y_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(zs, z_ref, rtol=1e-5, atol=1e-5)


def test_iobinding_output_bound_to_an_input_buffer():
    # The output bound to the input's own memory: the run must not write it while it reads the
    # input (Transpose would read what it wrote); the result is x's transpose as it was.
    model = make_model([helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])], [tensor("x", [48, 48])],
                       [tensor("y", [48, 48])])
    sess = ort.InferenceSession(model)
    x = np.random.default_rng(3).standard_normal((48, 48)).astype(np.float32)
    want = x.T.copy()
    io = sess.io_binding()
    io.bind_input("x", "cpu", 0, np.float32, [48, 48], x.ctypes.data)
    io.bind_output("y", "cpu", 0, np.float32, [48, 48], x.ctypes.data)
    sess.run_with_iobinding(io)
    np.testing.assert_array_equal(x, want)
    # Two outputs bound to halves of one array, and an output bound to an array the input views.
    model2 = make_model([helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Abs", ["x"], ["b"])],
                        [tensor("x", [4, 8])], [tensor("a", [4, 8]), tensor("b", [4, 8])])
    sess2 = ort.InferenceSession(model2)
    x2 = np.random.default_rng(4).standard_normal((4, 8)).astype(np.float32)
    both = np.zeros((2, 4, 8), np.float32)
    io2 = sess2.io_binding()
    io2.bind_cpu_input("x", x2)
    io2.bind_ortvalue_output("a", ort.OrtValue.ortvalue_from_numpy(both[0]))
    io2.bind_ortvalue_output("b", ort.OrtValue.ortvalue_from_numpy(both[1]))
    sess2.run_with_iobinding(io2)
    np.testing.assert_array_equal(both[0], -x2)
    np.testing.assert_array_equal(both[1], np.abs(x2))


def test_iobinding_preallocated_outputs_the_graph_does_not_compute():
    # Outputs that are the graph's input and an initializer, next to a computed one: every bound
    # buffer receives its value, run after run.
    c = np.arange(6, dtype=np.float32).reshape(2, 3)
    model = make_model([helper.make_node("Relu", ["x"], ["r"])], [tensor("x", [2, 3])],
                       [tensor("x", [2, 3]), tensor("c", [2, 3]), tensor("r", [2, 3])],
                       [numpy_helper.from_array(c, "c")])
    sess = ort.InferenceSession(model)
    bufs = {n: np.full((2, 3), np.nan, np.float32) for n in ("x", "c", "r")}
    io = sess.io_binding()
    for n, buf in bufs.items():
        io.bind_output(n, "cpu", 0, np.float32, [2, 3], buf.ctypes.data)
    for seed in (1, 2):
        x = np.random.default_rng(seed).standard_normal((2, 3)).astype(np.float32)
        io.bind_cpu_input("x", x)
        sess.run_with_iobinding(io)
        np.testing.assert_array_equal(bufs["x"], x)
        np.testing.assert_array_equal(bufs["c"], c)
        np.testing.assert_array_equal(bufs["r"], np.maximum(x, 0))
        assert [o.data_ptr() for o in io.get_outputs()] == [b.ctypes.data for b in bufs.values()]


def test_iobinding_clear_and_rebind(mlp_model, x54):
    data, w, b = mlp_model
    sess = ort.InferenceSession(data)
    io = sess.io_binding()
    io.bind_cpu_input("x", x54)
    io.bind_output("y")
    sess.run_with_iobinding(io)
    io.clear_binding_outputs()
    assert io.get_outputs() == []
    # No output bound: every output of the model (onnxruntime binds none; onnxtrain returns all).
    io.clear_binding_inputs()
    with pytest.raises(ValueError):
        sess.run_with_iobinding(io)  # the input is no longer bound
    x2 = np.ones((2, 4), np.float32)
    io.bind_cpu_input("x", x2)
    io.bind_output("z")
    sess.run_with_iobinding(io)
    (z,) = io.copy_outputs_to_cpu()
    np.testing.assert_allclose(z, mlp_reference(x2, w, b)[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,dtype", [([5, 2], np.float32), ([5, 3], np.float64), ([15], np.float32)])
def test_iobinding_preallocated_output_mismatch(mlp_model, x54, shape, dtype):
    data, _, _ = mlp_model
    sess = ort.InferenceSession(data)
    io = sess.io_binding()
    io.bind_cpu_input("x", x54)
    io.bind_ortvalue_output("y", ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype))
    with pytest.raises(InvalidArgument, match="'y'"):
        sess.run_with_iobinding(io)
    buf = np.zeros(shape, dtype)
    io.bind_output("y", "cpu", 0, dtype, shape, buf.ctypes.data)
    with pytest.raises(InvalidArgument, match="'y'"):
        sess.run_with_iobinding(io)


def test_iobinding_other_device_named(mlp_model, x54):
    data, _, _ = mlp_model
    sess = ort.InferenceSession(data)
    io = sess.io_binding()
    with pytest.raises(InvalidArgument, match="(?i)cuda"):
        io.bind_output("y", "cuda")
    with pytest.raises(InvalidArgument, match="(?i)cuda"):
        io.bind_input("x", "cuda", 0, np.float32, [5, 4], x54.ctypes.data)
    with pytest.raises(InvalidArgument, match="(?i)unsupported device"):
        io.bind_output("y", "tpu")


def test_iobinding_of_another_session(mlp_model, x54):
    data, _, _ = mlp_model
    a, b = ort.InferenceSession(data), ort.InferenceSession(data)
    io = a.io_binding()
    io.bind_cpu_input("x", x54)
    with pytest.raises(InvalidArgument, match="another session"):
        b.run_with_iobinding(io)


# ---------------------------------------------------------------------------------------------------
# 3. metadata, providers, accessors


def test_modelmeta_from_onnx_helper(mlp_model):
    model = onnx.load_from_string(mlp_model[0])
    model.producer_name = "pytest-producer"
    model.domain = "ai.example"
    model.doc_string = "model description"
    model.graph.doc_string = "graph description"
    model.graph.name = "the_graph"
    model.model_version = 42
    helper.set_model_props(model, {"author": "me", "license": "MIT", "empty": ""})
    meta = ort.InferenceSession(model.SerializeToString()).get_modelmeta()
    assert isinstance(meta, C.ModelMetadata)
    assert meta.producer_name == "pytest-producer"
    assert meta.graph_name == "the_graph"
    assert meta.domain == "ai.example"
    assert meta.description == "model description"
    assert meta.graph_description == "graph description"
    assert meta.version == 42
    assert meta.custom_metadata_map == {"author": "me", "license": "MIT", "empty": ""}


def test_providers_and_accessors(mlp_model):
    data, w, _ = mlp_model
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    assert sess.get_provider_options() == {"CPUExecutionProvider": {}}
    assert sess._sess is not None and isinstance(sess._sess, C.InferenceSession)
    assert isinstance(sess.get_session_options(), C.SessionOptions)
    assert sess.get_overridable_initializers() == []
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"):
        sess.set_providers(["CUDAExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    sess.set_providers(["CPUExecutionProvider"])
    x = np.ones((1, 4), np.float32)
    np.testing.assert_allclose(sess.run(["y"], {"x": x})[0], mlp_reference(x, w, mlp_model[2])[0],
                               rtol=1e-5, atol=1e-5)


def test_overridable_initializers_fed(mlp_model):
    model = onnx.load_from_string(mlp_model[0])
    w = mlp_model[1]
    model.graph.input.append(helper.make_tensor_value_info("W", F, [4, 3]))
    sess = ort.InferenceSession(model.SerializeToString())
    (ov,) = sess.get_overridable_initializers()
    assert (ov.name, ov.type, ov.shape) == ("W", "tensor(float)", [4, 3])
    assert [i.name for i in sess.get_inputs()] == ["x"]
    x = np.ones((2, 4), np.float32)
    w2 = -w
    (z,) = sess.run(["z"], {"x": x, "W": w2})
    np.testing.assert_allclose(z, mlp_reference(x, w2, mlp_model[2])[1], rtol=1e-5, atol=1e-5)
    (z0,) = sess.run(["z"], {"x": x})
    np.testing.assert_allclose(z0, mlp_reference(x, w, mlp_model[2])[1], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------------
# 4. RunOptions


def test_run_options_fields_round_trip():
    ro = ort.RunOptions()
    assert (ro.log_severity_level, ro.log_verbosity_level, ro.logid, ro.run_tag) == (-1, 0, "", "")
    assert (ro.terminate, ro.only_execute_path_to_fetches, ro.training_mode) == (False, False, False)
    ro.log_severity_level = 3
    ro.log_verbosity_level = 2
    ro.logid = "run-log"
    ro.run_tag = "tag-1"
    ro.terminate = True
    ro.only_execute_path_to_fetches = True
    ro.training_mode = True
    assert (ro.log_severity_level, ro.log_verbosity_level, ro.logid, ro.run_tag) == (3, 2, "run-log", "tag-1")
    assert (ro.terminate, ro.only_execute_path_to_fetches, ro.training_mode) == (True, True, True)
    ro.terminate = False
    assert ro.terminate is False


@pytest.mark.parametrize("level", [-2, 5, 100])
def test_run_options_log_severity_validated(level):
    ro = ort.RunOptions()
    with pytest.raises(InvalidArgument, match="log_severity_level"):
        ro.log_severity_level = level
    assert ro.log_severity_level == -1
    for ok in (0, 4, -1):
        ro.log_severity_level = ok
        assert ro.log_severity_level == ok


def test_run_config_entries():
    ro = ort.RunOptions()
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    ro.add_run_config_entry("custom.key", "1")
    ro.add_run_config_entry("custom.key", "2")  # replaced
    assert ro.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
    assert ro.get_run_config_entry("custom.key") == "2"
    with pytest.raises(InvalidArgument, match="missing.key"):
        ro.get_run_config_entry("missing.key")


def test_terminate_before_run_fails_then_clears(mlp_model, x54):
    data, w, b = mlp_model
    sess = ort.InferenceSession(data)
    ro = ort.RunOptions()
    ro.terminate = True
    with pytest.raises(Fail):
        sess.run(None, {"x": x54}, ro)
    with pytest.raises(Fail):
        sess.run_with_ort_values(None, {"x": ort.OrtValue.ortvalue_from_numpy(x54)}, ro)
    ro.terminate = False
    np.testing.assert_allclose(sess.run(["y"], {"x": x54}, ro)[0], mlp_reference(x54, w, b)[0], rtol=1e-5, atol=1e-5)


LOOP_N = 192


def loop_model():
    """a_{k+1} = tanh(a_k @ W), M times: a Loop whose trip count sets the run time."""
    n = LOOP_N
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("MatMul", ["a", "W"], ["m"]),
         helper.make_node("Tanh", ["m"], ["a_out"])],
        "body", [tensor("i", [], TensorProto.INT64), tensor("c", [], TensorProto.BOOL), tensor("a", [n, n])],
        [tensor("c_out", [], TensorProto.BOOL), tensor("a_out", [n, n])])
    w = (np.random.default_rng(3).standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    data = make_model([helper.make_node("Loop", ["M", "", "a0"], ["a"], body=body)],
                      [tensor("M", [], TensorProto.INT64), tensor("a0", [n, n])], [tensor("a", [n, n])],
                      [numpy_helper.from_array(w, "W")])
    return data, w


def test_loop_matches_numpy():
    data, w = loop_model()
    a0 = np.random.default_rng(4).standard_normal((LOOP_N, LOOP_N)).astype(np.float32)
    ref = a0.astype(np.float64)
    for _ in range(7):
        ref = np.tanh(ref @ w)
    (a,) = ort.InferenceSession(data).run(None, {"M": np.array(7, np.int64), "a0": a0})
    np.testing.assert_allclose(a, ref, rtol=1e-4, atol=1e-5)


def test_terminate_from_another_thread_stops_a_long_run():
    data, w = loop_model()
    sess = ort.InferenceSession(data)
    a0 = np.eye(LOOP_N, dtype=np.float32)
    sess.run(None, {"M": np.array(5, np.int64), "a0": a0})  # warm: plans made, memory kept
    # A trip count that would run for minutes on any machine (a 192x192 MatMul + Tanh per trip), so
    # that the check does not depend on the machine's speed or load.
    trips = 10 ** 6
    ro = ort.RunOptions()
    outcome = {}

    def target():
        start = time.perf_counter()
        try:
            sess.run(None, {"M": np.array(trips, np.int64), "a0": a0}, ro)
            outcome["result"] = "finished"
        except Fail as e:
            outcome["result"] = e
        outcome["seconds"] = time.perf_counter() - start

    th = threading.Thread(target=target)
    th.start()
    time.sleep(0.3)
    ro.terminate = True
    th.join(30)
    assert not th.is_alive()
    assert isinstance(outcome["result"], Fail), outcome
    assert outcome["seconds"] < 10.0, outcome  # minutes uninterrupted
    ro.terminate = False
    ref = np.eye(LOOP_N)
    for _ in range(3):
        ref = np.tanh(ref @ w)
    (a,) = sess.run(None, {"M": np.array(3, np.int64), "a0": a0}, ro)
    np.testing.assert_allclose(a, ref, rtol=1e-4, atol=1e-5)


def dropout_model(ratio, training_input=None, seed=None):
    inputs = ["x", "ratio"] + (["training"] if training_input is not None else [])
    inits = [numpy_helper.from_array(np.array(ratio, np.float32), "ratio")]
    if training_input is not None:
        inits.append(numpy_helper.from_array(np.array(training_input), "training"))
    attrs = {} if seed is None else {"seed": seed}
    return make_model([helper.make_node("Dropout", inputs, ["y", "mask"], **attrs)], [tensor("x", [None])],
                      [tensor("y", [None]), tensor("mask", [None], TensorProto.BOOL)], inits)


def test_training_mode_makes_dropout_drop():
    p = 0.3
    sess = ort.InferenceSession(dropout_model(p))
    x = np.random.default_rng(5).uniform(1, 2, 20000).astype(np.float32)
    y, mask = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, x)  # inference: identity, mask all true
    assert mask.all()
    ro = ort.RunOptions()
    ro.training_mode = True
    y, mask = sess.run(None, {"x": x}, ro)
    dropped = 1 - mask.mean()
    assert abs(dropped - p) < 0.02, dropped
    np.testing.assert_array_equal(y[~mask], 0)
    np.testing.assert_allclose(y[mask], x[mask] / (1 - p), rtol=1e-6)
    # The default run afterwards is inference again.
    np.testing.assert_array_equal(sess.run(["y"], {"x": x})[0], x)


def test_only_execute_path_to_fetches_same_outputs(mlp_model, x54):
    data, w, b = mlp_model
    sess = ort.InferenceSession(data)
    ro = ort.RunOptions()
    ro.only_execute_path_to_fetches = True
    (z,) = sess.run(["z"], {"x": x54}, ro)
    np.testing.assert_allclose(z, mlp_reference(x54, w, b)[1], rtol=1e-5, atol=1e-5)
    y, z2 = sess.run(None, {"x": x54}, ro)
    np.testing.assert_array_equal(z2, z)
    np.testing.assert_allclose(y, mlp_reference(x54, w, b)[0], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------------
# 5. SessionOptions


def test_session_options_defaults_and_round_trip(tmp_path):
    so = ort.SessionOptions()
    # onnxruntime's defaults
    assert so.intra_op_num_threads == 0 and so.inter_op_num_threads == 0
    assert so.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert so.execution_order == ort.ExecutionOrder.DEFAULT
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert so.enable_profiling is False and so.profile_file_prefix == "onnxruntime_profile_"
    assert so.enable_mem_pattern is True and so.enable_mem_reuse is True and so.enable_cpu_mem_arena is True
    assert so.use_deterministic_compute is False
    assert so.optimized_model_filepath == "" and so.logid == "" and so.log_verbosity_level == 0
    values = {
        "intra_op_num_threads": 3, "inter_op_num_threads": 2, "execution_mode": ort.ExecutionMode.ORT_PARALLEL,
        "graph_optimization_level": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "use_deterministic_compute": True, "optimized_model_filepath": str(tmp_path / "opt.onnx"),
        "enable_profiling": True, "profile_file_prefix": str(tmp_path / "prof"), "enable_mem_reuse": False,
        "enable_mem_pattern": False, "enable_cpu_mem_arena": False, "log_severity_level": 1,
        "log_verbosity_level": 4, "logid": "my-session", "execution_order": ort.ExecutionOrder.DEFAULT,
    }
    for k, v in values.items():
        setattr(so, k, v)
    for k, v in values.items():
        assert getattr(so, k) == v, k
    for level in (0, 1, 2, 3, 4, -1):
        so.log_severity_level = level
        assert so.log_severity_level == level
    with pytest.raises(InvalidArgument):
        so.log_severity_level = 5


def test_session_options_reach_the_session(mlp_model, tmp_path):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.logid = "reached"
    so.add_session_config_entry("custom.entry", "v")
    got = ort.InferenceSession(mlp_model[0], so).get_session_options()
    assert got.intra_op_num_threads == 1
    assert got.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert got.logid == "reached" and got.get_session_config_entry("custom.entry") == "v"


def const_model():
    """y = x @ (c1 + c2) with c1, c2 Constant nodes: a constant subgraph feeding a MatMul."""
    c1 = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    c2 = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    nodes = [helper.make_node("Constant", [], ["c1"], value=numpy_helper.from_array(c1), name="const1"),
             helper.make_node("Constant", [], ["c2"], value=numpy_helper.from_array(c2), name="const2"),
             helper.make_node("Add", ["c1", "c2"], ["s"], name="add_consts"),
             helper.make_node("MatMul", ["x", "s"], ["y"], name="matmul")]
    return make_model(nodes, [tensor("x", ["N", 4])], [tensor("y", ["N", 3])]), c1 + c2


LEVELS = [ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
          ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, ort.GraphOptimizationLevel.ORT_ENABLE_ALL]


@pytest.mark.parametrize("level", LEVELS)
def test_optimization_levels_outputs_and_optimized_model(tmp_path, level, x54):
    data, s = const_model()
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    sess = ort.InferenceSession(data, so)
    (y,) = sess.run(None, {"x": x54})
    np.testing.assert_allclose(y, x54.astype(np.float64) @ s, rtol=1e-5, atol=1e-5)
    saved = onnx.load(str(tmp_path / "optimized.onnx"))
    onnx.checker.check_model(saved, full_check=True)
    ops = [n.op_type for n in saved.graph.node]
    inits = {i.name: numpy_helper.to_array(i) for i in saved.graph.initializer}
    if level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL:
        assert sorted(ops) == ["Add", "Constant", "Constant", "MatMul"]
        assert inits == {}
    else:
        assert ops == ["MatMul"]
        assert list(inits) == ["s"]
        np.testing.assert_allclose(inits["s"], s, rtol=1e-6)
    # The saved model loads again and computes the same thing.
    so_plain = ort.SessionOptions()
    so_plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    (y_saved,) = ort.InferenceSession(str(tmp_path / "optimized.onnx"), so_plain).run(None, {"x": x54})
    np.testing.assert_allclose(y_saved, x54.astype(np.float64) @ s, rtol=1e-5, atol=1e-5)


def chain_model(n=8, size=128):
    nodes, prev = [], "x"
    for i in range(n):
        nodes.append(helper.make_node("Sigmoid" if i % 2 else "Exp", [prev], [f"t{i}"]))
        prev = f"t{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    return make_model(nodes, [tensor("x", [size, size])], [tensor("y", [size, size])])


def chain_reference(x, n=8):
    r = x.astype(np.float64)
    for i in range(n):
        r = 1 / (1 + np.exp(-r)) if i % 2 else np.exp(r)
    return r


def test_mem_reuse_changes_the_arena_not_the_outputs():
    data = chain_model()
    x = (np.random.default_rng(6).standard_normal((128, 128)) * 0.1).astype(np.float32)
    stats, outs = {}, {}
    for reuse in (True, False):
        so = ort.SessionOptions()
        so.enable_mem_reuse = reuse
        sess = ort.InferenceSession(data, so)
        (outs[reuse],) = sess.run(None, {"x": x})
        stats[reuse] = sess.last_run_stats()
    np.testing.assert_allclose(outs[True], chain_reference(x), rtol=1e-5)
    np.testing.assert_array_equal(outs[False], outs[True])
    value_bytes = 128 * 128 * 4
    # Without reuse every one of the 8 intermediate values has a block of its own.
    assert stats[False]["arena_bytes"] >= 8 * value_bytes
    assert stats[False]["arena_bytes"] >= stats[False]["naive_bytes"]
    # With reuse a chain needs only a few live values at once.
    assert stats[True]["arena_bytes"] <= 4 * value_bytes
    assert stats[True]["arena_bytes"] < stats[False]["arena_bytes"]


@pytest.mark.parametrize("option", ["enable_mem_pattern", "enable_cpu_mem_arena", "use_deterministic_compute"])
def test_memory_and_determinism_options_same_outputs(option):
    data = chain_model()
    x = (np.random.default_rng(8).standard_normal((128, 128)) * 0.1).astype(np.float32)
    so = ort.SessionOptions()
    setattr(so, option, option == "use_deterministic_compute")
    sess = ort.InferenceSession(data, so)
    first = sess.run(None, {"x": x})[0]
    second = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(first, chain_reference(x), rtol=1e-5)
    np.testing.assert_array_equal(first, second)


def test_profiling(mlp_model, tmp_path):
    data, _, _ = mlp_model
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "trace")
    before = time.monotonic_ns()
    sess = ort.InferenceSession(data, so)
    after = time.monotonic_ns()
    start = sess.get_profiling_start_time_ns()
    assert before <= start <= after
    shapes = [(5, 4), (2, 4)]
    ro = ort.RunOptions()
    ro.run_tag = 'tag "quoted"'
    for shape in shapes:
        sess.run(None, {"x": np.ones(shape, np.float32)}, ro)
    path = sess.end_profiling()
    assert path.startswith(str(tmp_path / "trace")) and path.endswith(".json")
    with open(path) as f:
        events = json.load(f)
    nodes = [e for e in events if e["cat"] == "Node"]
    runs = [e for e in events if e["cat"] == "Session" and e["name"] == "model_run"]
    assert len(runs) == len(shapes)
    assert all(r["args"]["run_tag"] == 'tag "quoted"' for r in runs)
    # The nodes as run: MatMul + Add fused into one Gemm (as onnxruntime's MatMulAddFusion does), Relu.
    assert len(nodes) == 2 * len(shapes)
    assert sorted(e["args"]["op_name"] for e in nodes) == sorted(["Gemm", "Relu"] * len(shapes))
    for e in events:
        assert e["ph"] == "X" and e["dur"] >= 0 and e["ts"] >= 0
    for e in nodes:
        assert e["args"]["provider"] == "CPUExecutionProvider"
        assert e["name"].endswith("_kernel_time")
    for k, shape in enumerate(shapes):
        run_nodes = {e["args"]["op_name"]: e for e in nodes[2 * k:2 * k + 2]}
        n = shape[0]
        assert run_nodes["Gemm"]["args"]["input_type_shape"] == [{"float": [n, 4]}, {"float": [4, 3]}, {"float": [3]}]
        assert run_nodes["Gemm"]["args"]["output_type_shape"] == [{"float": [n, 3]}]
        assert run_nodes["Relu"]["args"]["input_type_shape"] == [{"float": [n, 3]}]
        assert run_nodes["Relu"]["args"]["output_type_shape"] == [{"float": [n, 3]}]
    # Ended: a second end_profiling has nothing to write.
    assert sess.end_profiling() == ""


def test_profiling_off(mlp_model):
    sess = ort.InferenceSession(mlp_model[0])
    sess.run(None, {"x": np.ones((1, 4), np.float32)})
    assert sess.end_profiling() == ""
    assert sess.get_profiling_start_time_ns() == 0


def test_session_config_entries(mlp_model):
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_prepacking", "1")
    so.add_session_config_entry("some.unknown.key", "kept")
    assert so.get_session_config_entry("session.disable_prepacking") == "1"
    assert so.get_session_config_entry("some.unknown.key") == "kept"
    with pytest.raises(InvalidArgument, match="absent.key"):
        so.get_session_config_entry("absent.key")
    sess = ort.InferenceSession(mlp_model[0], so)
    assert sess.get_session_options().get_session_config_entry("some.unknown.key") == "kept"
    so.add_session_config_entry("session.load_model_format", "ONNX")
    ort.InferenceSession(mlp_model[0], so)
    so.add_session_config_entry("session.load_model_format", "ORT")
    with pytest.raises(NotImplemented, match="ORT"):
        ort.InferenceSession(mlp_model[0], so)


def test_free_dimension_override_by_name(mlp_model, x54):
    data, w, b = mlp_model
    so = ort.SessionOptions()
    so.add_free_dimension_override_by_name("N", 5)
    sess = ort.InferenceSession(data, so)
    assert sess.get_inputs()[0].shape == [5, 4]
    np.testing.assert_allclose(sess.run(["y"], {"x": x54})[0], mlp_reference(x54, w, b)[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(InvalidArgument, match="'x'"):
        sess.run(None, {"x": np.ones((3, 4), np.float32)})
    with pytest.raises(InvalidArgument):
        so.add_free_dimension_override_by_name("N", -1)


def test_free_dimension_override_by_denotation():
    x = helper.make_tensor_value_info("x", F, ["batch", "feat"])
    x.type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    x.type.tensor_type.shape.dim[1].denotation = "DATA_CHANNEL"
    data = make_model([helper.make_node("Neg", ["x"], ["y"])], [x], [tensor("y", ["batch", "feat"])])
    so = ort.SessionOptions()
    so.add_free_dimension_override_by_denotation("DATA_BATCH", 2)
    sess = ort.InferenceSession(data, so)
    assert sess.get_inputs()[0].shape == [2, "feat"]
    v = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(sess.run(None, {"x": v})[0], -v)
    with pytest.raises(InvalidArgument, match="'x'"):
        sess.run(None, {"x": np.ones((4, 3), np.float32)})


def test_add_initializer_overrides_the_model(mlp_model, x54):
    data, w, b = mlp_model
    w2 = np.random.default_rng(9).standard_normal(w.shape).astype(np.float32)
    so = ort.SessionOptions()
    so.add_initializer("W", ort.OrtValue.ortvalue_from_numpy(w2))
    w2_copy = w2.copy()
    w2[...] = 0  # documented: the data is copied when added
    sess = ort.InferenceSession(data, so)
    y, z = sess.run(None, {"x": x54})
    np.testing.assert_allclose(z, mlp_reference(x54, w2_copy, b)[1], rtol=1e-5, atol=1e-5)
    # The C OrtValue is accepted too.
    so2 = ort.SessionOptions()
    so2.add_initializer("b", ort.OrtValue.ortvalue_from_numpy(np.zeros(3, np.float32))._ortvalue)
    (z0,) = ort.InferenceSession(data, so2).run(["z"], {"x": x54})
    np.testing.assert_allclose(z0, x54.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,value,match", [
    ("W", np.ones((3, 4), np.float32), "W"),
    ("W", np.ones((4, 3), np.float64), "W"),
    ("nope", np.ones((4, 3), np.float32), "nope"),
])
def test_add_initializer_rejected(mlp_model, name, value, match):
    so = ort.SessionOptions()
    so.add_initializer(name, ort.OrtValue.ortvalue_from_numpy(value))
    with pytest.raises(InvalidArgument, match=match):
        ort.InferenceSession(mlp_model[0], so)


def test_add_external_initializers(mlp_model, x54):
    data, w, b = mlp_model
    w2, b2 = 2 * w, b - 1
    so = ort.SessionOptions()
    so.add_external_initializers(["W", "b"], [ort.OrtValue.ortvalue_from_numpy(w2), ort.OrtValue.ortvalue_from_numpy(b2)])
    y, z = ort.InferenceSession(data, so).run(None, {"x": x54})
    np.testing.assert_allclose(y, mlp_reference(x54, w2, b2)[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(InvalidArgument):
        so.add_external_initializers(["W"], [])


def test_custom_ops_library_and_execution_order_not_supported():
    so = ort.SessionOptions()
    with pytest.raises(NotImplemented, match="custom op"):
        so.register_custom_ops_library("/nonexistent/libcustom.so")
    with pytest.raises(NotImplemented, match="PRIORITY_BASED"):
        so.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    assert so.execution_order == ort.ExecutionOrder.DEFAULT


def test_parallel_execution_mode_same_outputs(mlp_model, x54):
    data, w, b = mlp_model
    so = ort.SessionOptions()
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    so.inter_op_num_threads = 2
    sess = ort.InferenceSession(data, so)
    assert sess.get_session_options().execution_mode == ort.ExecutionMode.ORT_PARALLEL
    y, z = sess.run(None, {"x": x54})
    np.testing.assert_allclose(y, mlp_reference(x54, w, b)[0], rtol=1e-5, atol=1e-5)


def with_metadata(data, props):
    model = onnx.load_from_string(data)
    helper.set_model_props(model, props)
    return model.SerializeToString()


def test_ort_config_metadata_applied(mlp_model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the profile it enables is written here
    config = {"session_options": {"intra_op_num_threads": 1, "enable_profiling": 1, "graph_optimization_level": 0}}
    data = with_metadata(mlp_model[0], {"ort_config": json.dumps(config)})
    sess = ort.InferenceSession(data)
    so = sess.get_session_options()
    assert so.intra_op_num_threads == 1
    assert so.enable_profiling is True
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess.run(None, {"x": np.ones((1, 4), np.float32)})
    assert sess.end_profiling().endswith(".json")


@pytest.mark.parametrize("text,match", [
    ("{not json", "ort_config"),
    (json.dumps({"session_options": {"bogus_option": 1}}), "bogus_option"),
    (json.dumps({"session_options": {"intra_op_num_threads": "many"}}), "intra_op_num_threads"),
    (json.dumps([1, 2]), "ort_config"),
    (json.dumps({"session_options": {"graph_optimization_level": 5}}), "graph_optimization_level"),
    (json.dumps({"session_options": {"log_severity_level": 9}}), "log_severity_level"),
])
def test_ort_config_malformed(mlp_model, text, match):
    data = with_metadata(mlp_model[0], {"ort_config": text})
    with pytest.raises((C.InvalidProtobuf, ort.InvalidModel), match=match):
        ort.InferenceSession(data)


def test_training_mode_batchnorm_uses_batch_statistics():
    rng = np.random.default_rng(10)
    scale, bias = rng.uniform(0.5, 2, 3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    mean, var = np.zeros(3, np.float32), np.ones(3, np.float32)
    data = make_model(
        [helper.make_node("BatchNormalization", ["x", "scale", "B", "mean", "var"], ["y"], epsilon=1e-5)],
        [tensor("x", [None, 3, None])], [tensor("y", [None, 3, None])],
        [numpy_helper.from_array(a, n) for a, n in ((scale, "scale"), (bias, "B"), (mean, "mean"), (var, "var"))])
    x = (rng.standard_normal((4, 3, 5)) * 3 + 2).astype(np.float32)
    sess = ort.InferenceSession(data)
    c = (slice(None), None)
    (y_inf,) = sess.run(None, {"x": x})
    np.testing.assert_allclose(y_inf, x / np.sqrt(1 + 1e-5) * scale[c] + bias[c], rtol=1e-4, atol=1e-4)
    ro = ort.RunOptions()
    ro.training_mode = True
    (y_train,) = sess.run(None, {"x": x}, ro)
    m, v = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    np.testing.assert_allclose(y_train, (x - m[c]) / np.sqrt(v[c] + 1e-5) * scale[c] + bias[c], rtol=1e-4, atol=1e-4)
    # The model's statistics are unchanged: inference gives the same as before.
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], y_inf)


def test_training_mode_reaches_dropout_in_a_subgraph():
    then_g = helper.make_graph([helper.make_node("Dropout", ["x", "ratio"], ["d"])], "then", [], [tensor("d", [None])])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [tensor("e", [None])])
    data = make_model([helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)],
                      [tensor("cond", [], TensorProto.BOOL), tensor("x", [None])], [tensor("y", [None])],
                      [numpy_helper.from_array(np.array(0.5, np.float32), "ratio")])
    sess = ort.InferenceSession(data)
    x = np.ones(4000, np.float32)
    feed = {"cond": np.array(True), "x": x}
    np.testing.assert_array_equal(sess.run(None, feed)[0], x)
    ro = ort.RunOptions()
    ro.training_mode = True
    (y,) = sess.run(None, feed, ro)
    assert set(np.unique(y)) == {0.0, 2.0}
    assert abs((y == 0).mean() - 0.5) < 0.05


# ---------------------------------------------------------------------------------------------------
# 6. errors and module functions


def test_wrong_input_name(mlp_model):
    with pytest.raises(InvalidArgument, match="'xx'"):
        ort.InferenceSession(mlp_model[0]).run(None, {"xx": np.ones((1, 4), np.float32)})


def test_missing_input_message(mlp_model):
    # onnxruntime's message since 1.14 (test_raise_wrong_num_inputs in its test_inference_session.py)
    sess = ort.InferenceSession(mlp_model[0])
    with pytest.raises(ValueError, match=re.escape("Required inputs (['x']) are missing from input feed ([]).")):
        sess.run(None, {})
    with pytest.raises(ValueError, match=re.escape("Required inputs (['x']) are missing from input feed ([]).")):
        sess.run_with_ort_values(None, {})


def test_missing_inputs_named_when_the_feed_has_other_names():
    # Two inputs, one fed under a wrong name: both named as onnxruntime names them.
    x = helper.make_tensor_value_info("input:0", TensorProto.BOOL, [2, 2])
    y = helper.make_tensor_value_info("input1:0", TensorProto.BOOL, [2, 2])
    z = helper.make_tensor_value_info("z", TensorProto.BOOL, [2, 2])
    graph = helper.make_graph([helper.make_node("And", ["input:0", "input1:0"], ["z"])], "g", [x, y], [z])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    sess = ort.InferenceSession(data)
    a = np.array([[True, True], [False, False]])
    with pytest.raises(ValueError) as e:
        sess.run([], {"input:0": a})
    assert "Required inputs (['input1:0']) are missing from input feed (['input:0'])" in str(e.value)
    np.testing.assert_array_equal(sess.run(None, {"input:0": a, "input1:0": ~a})[0], np.zeros((2, 2), bool))


def test_set_providers_with_an_unknown_provider_raises(mlp_model):
    # onnxruntime: RuntimeError "Unknown Provider Type: InvalidProvider" (test_invalid_set_providers);
    # a name it defines that this build lacks is left out with a warning instead.
    sess = ort.InferenceSession(mlp_model[0], providers=ort.get_available_providers())
    with pytest.warns(UserWarning, match="InvalidProvider"):
        with pytest.raises(RuntimeError, match="Unknown Provider Type: InvalidProvider"):
            sess.set_providers(["InvalidProvider"])
    sess.set_providers(["CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    # The constructor retries once with the fallback providers, as onnxruntime 1.14+ does.
    with pytest.warns(UserWarning, match="Unknown Provider Type: Nope.*falling back to \\['CPUExecutionProvider'\\]"):
        fallback = ort.InferenceSession(mlp_model[0], providers=["Nope"])
    assert fallback.get_providers() == ["CPUExecutionProvider"]
    x = np.ones((1, 4), np.float32)
    np.testing.assert_allclose(fallback.run(["y"], {"x": x})[0], mlp_reference(x, mlp_model[1], mlp_model[2])[0],
                               rtol=1e-5, atol=1e-5)


def test_run_async_calls_back_with_outputs_user_data_and_error(mlp_model):
    # onnxruntime's test_run_async: callback(results, user_data, err) with err "" on success.
    data, w, b = mlp_model
    sess = ort.InferenceSession(data)
    x = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
    done, seen = threading.Event(), {}

    def callback(res, user_data, err):
        seen.update(res=res, data=user_data, err=err, thread=threading.current_thread())
        done.set()

    token = object()
    assert sess.run_async(["y"], {"x": x}, callback, token) is None
    assert done.wait(10)
    assert seen["err"] == "" and seen["data"] is token and len(seen["res"]) == 1
    assert seen["thread"] is not threading.main_thread()
    np.testing.assert_allclose(seen["res"][0], mlp_reference(x, w, b)[0], rtol=1e-5, atol=1e-5)
    # A failing run reaches the callback as an empty result and a message.
    done.clear()
    sess.run_async(["y"], {"x": np.ones((5, 7), np.float32)}, callback, 7)
    assert done.wait(10)
    assert seen["res"] == [] and seen["data"] == 7 and "'x'" in seen["err"]
    # A feed missing a required input raises before anything runs.
    with pytest.raises(ValueError, match="Required inputs"):
        sess.run_async(None, {}, callback, None)
    with pytest.raises(TypeError, match="callback"):
        sess.run_async(None, {"x": x}, None, None)


def test_version_string_and_tensor_size_in_bytes():
    assert ort.get_version_string() == ort.__version__
    for dtype, size in [(np.float32, 4), (np.float64, 8), (np.int8, 1), (np.float16, 2), (np.int64, 8), (np.bool_, 1)]:
        v = ort.OrtValue.ortvalue_from_numpy(np.zeros((3, 5), dtype))
        assert v.tensor_size_in_bytes() == 15 * size == np.zeros((3, 5), dtype).nbytes, dtype
    # onnxruntime counts a string element as its std::string object (32 bytes with libstdc++)
    assert ort.OrtValue.ortvalue_from_numpy(np.array(["a", "bcd"], dtype=object)).tensor_size_in_bytes() == 64


@pytest.mark.parametrize("feed", [np.ones((2, 4, 1), np.float32), np.ones(4, np.float32), np.ones((2, 4), np.float64),
                                  np.ones((2, 4), np.int32), np.ones((2, 5), np.float32)])
def test_wrong_rank_type_or_dim(mlp_model, feed):
    with pytest.raises(InvalidArgument, match="'x'"):
        ort.InferenceSession(mlp_model[0]).run(None, {"x": feed})


def test_no_such_file_and_garbage(tmp_path):
    missing = tmp_path / "missing.onnx"
    with pytest.raises(C.NoSuchFile) as info:
        ort.InferenceSession(str(missing))
    assert isinstance(info.value, FileNotFoundError) and "missing.onnx" in str(info.value)
    with pytest.raises(C.InvalidProtobuf):
        ort.InferenceSession(b"\x08\x07garbage bytes that are not a model \xff\xff")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff" * 64)
    with pytest.raises(C.InvalidProtobuf):
        ort.InferenceSession(str(bad))
    with pytest.raises(TypeError):
        ort.InferenceSession(12345)


def test_exception_classes():
    names = ["Fail", "InvalidArgument", "NoSuchFile", "NoModel", "EngineError", "RuntimeException",
             "InvalidProtobuf", "ModelLoaded", "NotImplemented", "InvalidGraph", "EPFail"]
    for name in names:
        cls = getattr(C, name)
        assert issubclass(cls, RuntimeError) and issubclass(cls, ort.OnnxTrainError), name
        assert getattr(ort, name) is cls
    assert issubclass(C.InvalidArgument, ValueError)
    assert issubclass(C.NoSuchFile, FileNotFoundError)
    assert issubclass(C.NotImplemented, NotImplementedError)


def test_module_functions():
    assert ort.get_device() == "CPU" and C.get_device() == "CPU"
    everything = ort.get_all_providers()
    assert "CPUExecutionProvider" in everything and "CUDAExecutionProvider" in everything
    assert ort.get_available_providers() == ["CPUExecutionProvider"]
    assert ort.enable_telemetry_events() is None
    assert ort.disable_telemetry_events() is None
    assert isinstance(ort.__version__, str) and ort.__version__.count(".") >= 2
    assert isinstance(C.get_default_session_options(), C.SessionOptions)
    assert "onnxtrain" in C.get_build_info()


def test_logger_severity(mlp_model, capfd, restore_logger):
    data = mlp_model[0]
    x = np.ones((1, 4), np.float32)
    ort.set_default_logger_severity(3)
    capfd.readouterr()
    ort.InferenceSession(data).run(None, {"x": x})
    assert capfd.readouterr().err == ""
    ort.set_default_logger_severity(0)
    sess = ort.InferenceSession(data)
    created = capfd.readouterr().err
    assert created.strip() != "" and "session created" in created
    sess.run(None, {"x": x})
    ran = capfd.readouterr().err
    assert "run" in ran
    # A session's own level replaces the default one.
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ort.InferenceSession(data, so).run(None, {"x": x})
    assert capfd.readouterr().err == ""
    for bad in (7, -1, "0", 1.5):
        with pytest.raises(InvalidArgument):
            ort.set_default_logger_severity(bad)
    ort.set_default_logger_verbosity(1)
    with pytest.raises(InvalidArgument):
        ort.set_default_logger_verbosity(-1)


def test_run_log_severity_replaces_the_sessions(mlp_model, capfd, restore_logger):
    x = np.ones((1, 4), np.float32)
    ort.set_default_logger_severity(2)
    sess = ort.InferenceSession(mlp_model[0])
    ro = ort.RunOptions()
    ro.log_severity_level = 0
    capfd.readouterr()
    sess.run(None, {"x": x}, ro)
    assert "run" in capfd.readouterr().err
    ort.set_default_logger_severity(0)
    sess = ort.InferenceSession(mlp_model[0])
    capfd.readouterr()
    ro.log_severity_level = 3
    sess.run(None, {"x": x}, ro)
    assert capfd.readouterr().err == ""


def test_logid_in_log_lines(mlp_model, capfd, restore_logger):
    ort.set_default_logger_severity(0)
    so = ort.SessionOptions()
    so.logid = "sess-A"
    ro = ort.RunOptions()
    ro.logid = "run-B"
    capfd.readouterr()
    ort.InferenceSession(mlp_model[0], so).run(None, {"x": np.ones((1, 4), np.float32)}, ro)
    err = capfd.readouterr().err
    assert "sess-A" in err and "run-B" in err


def seeded_dropout_masks(seed=None, session_seed=None):
    data = dropout_model(0.5, training_input=True)
    if seed is not None:
        ort.set_seed(seed)
    so = ort.SessionOptions()
    if session_seed is not None:
        so.seed = session_seed
    return ort.InferenceSession(data, so).run(["mask"], {"x": np.ones(512, np.float32)})[0]


def test_set_seed(restore_seed):
    a = seeded_dropout_masks(1234)
    b = seeded_dropout_masks(1234)
    c = seeded_dropout_masks(4321)
    assert 0.3 < a.mean() < 0.7
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # A session's own seed wins over set_seed's.
    np.testing.assert_array_equal(seeded_dropout_masks(1, session_seed=77), seeded_dropout_masks(2, session_seed=77))


def test_dropout_seed_attribute_reproducible():
    data = dropout_model(0.5, training_input=True, seed=5)
    x = np.ones(256, np.float32)
    a = ort.InferenceSession(data).run(["mask"], {"x": x})[0]
    b = ort.InferenceSession(data).run(["mask"], {"x": x})[0]
    np.testing.assert_array_equal(a, b)


def test_list_feeds_become_tensors_of_the_inputs_type(mlp_model):
    # onnxruntime: "a regular tensor fed through as a list" gets the input's element type.
    data, w, b = mlp_model
    sess = ort.InferenceSession(data)
    rows = [[1, 2, 3, 4], [0.5, -1, 0, 2]]
    (z,) = sess.run(["z"], {"x": rows})
    np.testing.assert_allclose(z, mlp_reference(np.array(rows, np.float32), w, b)[1], rtol=1e-5, atol=1e-5)
    ints = make_model([helper.make_node("Neg", ["i"], ["o"])], [tensor("i", [None], TensorProto.INT64)],
                      [tensor("o", [None], TensorProto.INT64)])
    (o,) = ort.InferenceSession(ints).run(None, {"i": (1, 2, 3)})
    assert o.dtype == np.int64 and o.tolist() == [-1, -2, -3]
    strings = make_model([helper.make_node("Identity", ["s"], ["t"])], [tensor("s", [None], TensorProto.STRING)],
                         [tensor("t", [None], TensorProto.STRING)])
    (t,) = ort.InferenceSession(strings).run(None, {"s": ["ab", "c"]})
    assert t.tolist() == ["ab", "c"]


def test_empty_sequence_feed_takes_the_inputs_element_type():
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.INT64, None))
    data = make_model([helper.make_node("Identity", ["s"], ["t"])], [helper.make_value_info("s", seq)],
                      [helper.make_value_info("t", seq)])
    sess = ort.InferenceSession(data)
    assert sess.run(None, {"s": []}) == [[]]
    (out,) = sess.run(None, {"s": [np.array([1, 2], np.int64)]})
    assert out[0].dtype == np.int64 and out[0].tolist() == [1, 2]


def test_concurrent_runs_of_one_session(mlp_model):
    data, w, b = mlp_model
    sess = ort.InferenceSession(data)
    xs = [np.random.default_rng(20 + i).standard_normal((16 + i, 4)).astype(np.float32) for i in range(6)]
    errors, results = [], [None] * len(xs)

    def work(i):
        try:
            for _ in range(30):
                results[i] = sess.run(["z"], {"x": xs[i]})[0]
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for x, z in zip(xs, results):
        np.testing.assert_allclose(z, mlp_reference(x, w, b)[1], rtol=1e-5, atol=1e-5)


def test_profiling_records_subgraph_nodes(tmp_path):
    data, _ = loop_model()
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "loop")
    sess = ort.InferenceSession(data, so)
    sess.run(None, {"M": np.array(3, np.int64), "a0": np.eye(LOOP_N, dtype=np.float32)})
    with open(sess.end_profiling()) as f:
        ops = [e["args"]["op_name"] for e in json.load(f) if e["cat"] == "Node"]
    assert sorted(ops) == sorted(["Identity", "MatMul", "Tanh"] * 3 + ["Loop"])


def test_disabled_optimizers_constant_folding(tmp_path):
    data, s = const_model()
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "o.onnx")
    sess = ort.InferenceSession(data, so, disabled_optimizers=["ConstantFolding"])
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], x @ s, rtol=1e-5)
    assert sorted(n.op_type for n in onnx.load(str(tmp_path / "o.onnx")).graph.node) == [
        "Add", "Constant", "Constant", "MatMul"]


def test_optimized_model_in_ort_format_not_supported(tmp_path):
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "model.ort")
    with pytest.raises(NotImplemented, match="ORT"):
        ort.InferenceSession(const_model()[0], so)


def test_node_with_too_few_inputs_is_an_error_not_a_crash():
    """An Identity node without its input is refused at load, naming the node (it used to crash)."""
    node = helper.make_node("Identity", [], ["y"], name="bad_identity")
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with pytest.raises(ort.InvalidGraph, match="bad_identity.*0 inputs"):
        ort.InferenceSession(model.SerializeToString())


def test_provider_graph_assignment_info_lists_the_nodes_that_run():
    # "c" = A + B folds at load (both initializers): the session runs MatMul and Relu, both on the CPU
    a, b = np.ones((4, 3), np.float32), np.full((4, 3), 2.0, np.float32)
    g = helper.make_graph(
        [helper.make_node("Add", ["A", "B"], ["C"], name="fold"),
         helper.make_node("MatMul", ["X", "C"], ["H"], name="mm"),
         helper.make_node("Relu", ["H"], ["Y"], name="relu")],
        "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(a, "A"), numpy_helper.from_array(b, "B")])
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    s = ort.InferenceSession(data, so)
    info = s.get_provider_graph_assignment_info()
    assert [sg.ep_name for sg in info] == ["CPUExecutionProvider"]
    assert isinstance(info[0], ort.OrtEpAssignedSubgraph)
    assert [(n.name, n.op_type, n.domain) for n in info[0].get_nodes()] == [("mm", "MatMul", ""), ("relu", "Relu", "")]
    # without optimizations the Add stays a node of the graph
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = ort.InferenceSession(data, so).get_provider_graph_assignment_info()
    assert [n.op_type for n in plain[0].get_nodes()] == ["Add", "MatMul", "Relu"]
    with pytest.raises(InvalidArgument, match="session.record_ep_graph_assignment_info"):
        ort.InferenceSession(data).get_provider_graph_assignment_info()


def test_input_and_output_memory_infos(mlp_model):
    s = ort.InferenceSession(mlp_model[0])
    ins, outs = s.get_input_memory_infos(), s.get_output_memory_infos()
    assert len(ins) == len(s.get_inputs()) and len(outs) == len(s.get_outputs())
    for m in ins + outs:
        assert m.name == "Cpu" and m.device_id == 0 and m.mem_type == ort.OrtMemType.DEFAULT


def test_tuning_results_and_outputs_as_ortvaluevector(mlp_model, x54):
    s = ort.InferenceSession(mlp_model[0])
    assert s.get_tuning_results() == []
    s.set_tuning_results([])
    with pytest.raises(NotImplemented, match="tuning results for CUDAExecutionProvider"):
        s.set_tuning_results([{"ep": "CUDAExecutionProvider", "results": {}, "validators": {}}])
    b = s.io_binding()
    b.bind_cpu_input(s.get_inputs()[0].name, x54)
    b.bind_output(s.get_outputs()[0].name)
    s.run_with_iobinding(b)
    vec = b.get_outputs_as_ortvaluevector()
    assert isinstance(vec, C.OrtValueVector) and len(vec) == 1
    np.testing.assert_array_equal(vec[0].numpy(), s.run(None, {s.get_inputs()[0].name: x54})[0])
