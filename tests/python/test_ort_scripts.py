"""Scripts written in onnxruntime's documented style, run unchanged under the onnxruntime alias
(``python3 -m onnxtrain.ort_alias script.py``): inference with OrtValue and IOBinding, profiling
with the trace parsed back, session options and errors. Results are checked against numpy."""
import json
import os
import sys
import textwrap

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from alias_run import alias_env, run_alias


@pytest.fixture
def model_path(tmp_path):
    """Y = relu(X @ W + b) with X [N, 4], written to a file; the weights are returned too."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 2)).astype(np.float32)
    b = rng.standard_normal(2).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["H"], name="matmul"),
         helper.make_node("Add", ["H", "B"], ["Z"], name="add"),
         helper.make_node("Relu", ["Z"], ["Y"], name="relu")],
        "mlp", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 2])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="pytest")
    model.ir_version = 8
    path = tmp_path / "mlp.onnx"
    path.write_bytes(model.SerializeToString())
    np.save(tmp_path / "w.npy", w)
    np.save(tmp_path / "b.npy", b)
    return path


def run_script(tmp_path, body, *args):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    r = run_alias(script, *args, env=alias_env(*(p for p in sys.path if p)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr.count("onnxruntime alias active") == 1
    return r.stdout


INFERENCE = """
    import sys
    import numpy as np
    import onnxruntime
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

    model, folder = sys.argv[1], sys.argv[2]
    W, B = np.load(folder + "/w.npy"), np.load(folder + "/b.npy")
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    expected = np.maximum(x.astype(np.float64) @ W + B, 0)

    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    assert session.get_providers() == ["CPUExecutionProvider"]

    # OrtValue on the CPU, bound by pointer as the documentation does it
    x_ortvalue = onnxruntime.OrtValue.ortvalue_from_numpy(x, "cpu", 0)
    assert x_ortvalue.device_name() == "cpu" and x_ortvalue.shape() == [3, 4]
    assert x_ortvalue.data_type() == "tensor(float)" and x_ortvalue.is_tensor()
    io_binding = session.io_binding()
    io_binding.bind_input(name="X", device_type=x_ortvalue.device_name(), device_id=0, element_type=np.float32,
                          shape=x_ortvalue.shape(), buffer_ptr=x_ortvalue.data_ptr())
    io_binding.bind_output("Y")
    session.run_with_iobinding(io_binding)
    Y = io_binding.copy_outputs_to_cpu()[0]
    assert np.allclose(Y, expected, atol=1e-5), (Y, expected)
    assert np.allclose(io_binding.get_outputs()[0].numpy(), expected, atol=1e-5)

    # an output written into memory the caller allocated
    Y_ortvalue = onnxruntime.OrtValue.ortvalue_from_shape_and_type([3, 2], np.float32, "cpu", 0)
    io_binding.bind_ortvalue_output("Y", Y_ortvalue)
    session.run_with_iobinding(io_binding)
    assert np.allclose(Y_ortvalue.numpy(), expected, atol=1e-5)

    io_binding.clear_binding_inputs()
    io_binding.bind_cpu_input("X", x)
    y_buf = np.zeros((3, 2), np.float32)
    io_binding.bind_output("Y", "cpu", 0, np.float32, [3, 2], y_buf.ctypes.data)
    session.run_with_iobinding(io_binding)
    assert np.allclose(y_buf, expected, atol=1e-5)

    # run_with_ort_values and run with RunOptions
    outs = session.run_with_ort_values(["Y"], {"X": x_ortvalue})
    assert isinstance(outs[0], onnxruntime.OrtValue) and np.allclose(outs[0].numpy(), expected, atol=1e-5)
    ro = onnxruntime.RunOptions()
    ro.logid = "doc-style"
    ro.run_tag = "tagged"
    assert np.allclose(session.run(None, {"X": x}, ro)[0], expected, atol=1e-5)

    # errors as onnxruntime raises them
    try:
        session.run(None, {"X": x.astype(np.float64)})
        raise SystemExit("a double feed ran")
    except InvalidArgument as e:
        assert "X" in str(e)
    try:
        onnxruntime.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
        raise SystemExit("an OrtValue went to a device that is not there")
    except Exception as e:
        assert "cuda" in str(e)
    meta = session.get_modelmeta()
    assert meta.producer_name == "pytest" and meta.graph_name == "mlp"
    print("INFERENCE OK", onnxruntime.__version__, onnxruntime.get_device())
"""


def test_inference_script_with_ortvalue_and_iobinding(tmp_path, model_path):
    out = run_script(tmp_path, INFERENCE, model_path, tmp_path)
    assert "INFERENCE OK 1.13.1 CPU" in out


PROFILING = """
    import json
    import sys
    import numpy as np
    import onnxruntime as ort

    model, prefix = sys.argv[1], sys.argv[2]
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = prefix
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(model, so)
    assert sess.get_profiling_start_time_ns() > 0
    for n in (1, 2, 5):
        sess.run(None, {"X": np.ones((n, 4), np.float32)})
    prof_file = sess.end_profiling()
    with open(prof_file) as f:
        events = json.load(f)
    print(prof_file)
"""


def test_profiling_script_trace_parses(tmp_path, model_path):
    out = run_script(tmp_path, PROFILING, model_path, tmp_path / "prof")
    path = out.strip().splitlines()[-1]
    assert os.path.basename(path).startswith("prof_") and path.endswith(".json")
    events = json.loads(open(path).read())
    nodes = [e for e in events if e["cat"] == "Node"]
    runs = [e for e in events if e["cat"] == "Session" and e["name"] == "model_run"]
    assert len(runs) == 3
    # one event per node per run, in the model's order: MatMul + Add run as one Gemm (ORT_ENABLE_ALL
    # fuses them, as onnxruntime's MatMulAddFusion does), named after the MatMul
    assert [e["args"]["op_name"] for e in nodes] == ["Gemm", "Relu"] * 3
    for e, n in zip(nodes[::2], (1, 2, 5)):
        assert e["name"] == "matmul_kernel_time"
        assert e["args"]["input_type_shape"] == [{"float": [n, 4]}, {"float": [4, 2]}, {"float": [2]}]
        assert e["args"]["output_type_shape"] == [{"float": [n, 2]}]
        assert e["args"]["provider"] == "CPUExecutionProvider"
    for e in events:
        assert e["ph"] == "X" and e["dur"] >= 0 and e["ts"] >= 0
    # node events of a run lie within that run
    for r, run_nodes in zip(runs, (nodes[0:2], nodes[2:4], nodes[4:6])):
        for e in run_nodes:
            assert r["ts"] <= e["ts"] <= r["ts"] + r["dur"] + 1


OPTIONS = """
    import sys
    import numpy as np
    import onnx
    import onnxruntime as rt

    model, folder = sys.argv[1], sys.argv[2]
    W, B = np.load(folder + "/w.npy"), np.load(folder + "/b.npy")
    so = rt.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = rt.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = rt.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.optimized_model_filepath = folder + "/optimized.onnx"
    so.add_session_config_entry("session.load_model_format", "ONNX")
    so.add_free_dimension_override_by_name("N", 3)
    assert so.get_session_config_entry("session.load_model_format") == "ONNX"
    w2 = np.full((4, 2), 0.5, np.float32)
    so.add_initializer("W", rt.OrtValue.ortvalue_from_numpy(w2))
    sess = rt.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])
    assert sess.get_inputs()[0].shape == [3, 4]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = sess.run(["Y"], {"X": x})[0]
    assert np.allclose(y, np.maximum(x @ w2 + B, 0), atol=1e-5)
    onnx.checker.check_model(onnx.load(folder + "/optimized.onnx"))
    try:
        sess.run(None, {"X": np.ones((2, 4), np.float32)})
        raise SystemExit("the overridden dimension was not checked")
    except rt.capi.onnxruntime_pybind11_state.InvalidArgument:
        pass
    try:
        rt.SessionOptions().register_custom_ops_library("libcustom.so")
        raise SystemExit("custom op library accepted")
    except rt.capi.onnxruntime_pybind11_state.NotImplemented as e:
        assert "custom" in str(e)
    rt.set_default_logger_severity(3)
    rt.set_seed(7)
    rt.disable_telemetry_events()
    assert "CPUExecutionProvider" in rt.get_all_providers()
    assert rt.get_available_providers() == ["CPUExecutionProvider"]
    print("OPTIONS OK")
"""


def test_session_options_script(tmp_path, model_path):
    assert "OPTIONS OK" in run_script(tmp_path, OPTIONS, model_path, tmp_path)


MISSING = """
    import onnxruntime
    try:
        onnxruntime.ModelCompiler
    except AttributeError as e:
        print("MISSING", e)
"""


def test_missing_onnxruntime_name_is_named(tmp_path):
    out = run_script(tmp_path, MISSING)
    assert "MISSING" in out and "ModelCompiler" in out and "onnxtrain does not provide" in out
