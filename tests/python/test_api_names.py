"""Every onnxruntime 1.13-1.20 Python name (tests/python/ort_api_names.py, written from onnxruntime's
sources) is served under the ``onnxruntime`` alias or listed, with why, in docs/python-api.md's
section "onnxruntime 1.13–1.20 names not served"; and the names this inventory added behave as
onnxruntime documents them."""
import json
import os
import re
import subprocess
import sys
import unittest

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain
import onnxtrain.distributed
from onnxtrain.capi import _pybind_state as C

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SECTION = "## onnxruntime 1.13–1.20 names not served"


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(onnxtrain.__file__))] +
                                        [p for p in [env.get("PYTHONPATH")] if p])
    return env


@pytest.fixture(scope="module")
def inventory():
    """The checker's JSON, run under the alias in a fresh interpreter."""
    r = subprocess.run([sys.executable, "-m", "onnxtrain.ort_alias", os.path.join(HERE, "ort_api_names.py")],
                       env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _listed():
    """The backticked names of the docs section's list items (``- `` lines and their indented
    continuations, up to the next ``## `` heading)."""
    with open(os.path.join(ROOT, "docs", "python-api.md"), encoding="utf-8") as f:
        text = f.read()
    assert SECTION in text, f"docs/python-api.md has no section '{SECTION}'"
    body = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    items = "\n".join(line for line in body.splitlines() if line.startswith(("- ", "  ")))
    return set(re.findall(r"`([^`\s]+)`", items))


def test_every_name_is_served_or_listed_with_why(inventory):
    listed = _listed()
    unlisted = [name for name, holders in inventory["missing"].items()
                if name not in listed and not any(h in listed for h in holders)]
    assert not unlisted, f"onnxruntime names neither served nor listed in docs/python-api.md: {unlisted}"
    assert not inventory["wrong_kind"], f"names present but not callable: {inventory['wrong_kind']}"
    # the list stays true: nothing it names as missing is served
    stale = sorted(listed & set(inventory["present"]))
    assert not stale, f"docs/python-api.md lists as not served names that are served: {stale}"
    # the inventory is the full one (guards against a checker that silently finds nothing)
    assert len(inventory["present"]) > 500 and len(inventory["present"]) + len(inventory["missing"]) > 600


def test_gpu_build_names_are_absent_or_callable(inventory):
    assert not inventory["gpu_wrong_kind"]


def test_a_missing_name_fails_the_check(tmp_path):
    """The checker reports a name onnxtrain does not have (the test above can fail)."""
    script = tmp_path / "probe.py"
    script.write_text(f"import sys, json; sys.path.insert(0, {HERE!r})\n"
                      "import ort_api_names as n\n"
                      "print(json.dumps(n.check([('', 'get_device() no_such_name() InferenceSession')])))\n")
    r = subprocess.run([sys.executable, "-m", "onnxtrain.ort_alias", str(script)], env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"get_device": "present", "no_such_name": "missing", "InferenceSession": "present"}


# --- names served by this inventory -------------------------------------------------------------------

def _model(nodes, inputs, outputs, initializers=(), opsets=(("", 17),)):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 8
    return model


def _affine(w, b):
    """y = x @ w + b."""
    return _model([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", w.shape[0]])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", w.shape[1]])],
                  [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])


def test_backend_api():
    import onnxtrain.backend as backend
    from onnxtrain.backend.backend import OnnxRuntimeBackend
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((3, 2)).astype(np.float32), rng.standard_normal(2).astype(np.float32)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    ref = x.astype(np.float64) @ w + b
    model = _affine(w, b)
    rep = backend.prepare(model, "CPU", intra_op_num_threads=1)
    for inputs in ([x], (x,), {"x": x}, x):
        (y,) = rep.run(inputs)
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    (y,) = backend.run(model.SerializeToString(), [x])
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    assert backend.prepare(rep) is rep
    assert backend.supports_device("CPU") and not backend.supports_device("CUDA")
    assert backend.is_compatible(model) and not backend.is_compatible(model, "CUDA")
    with pytest.raises(RuntimeError, match="Incompatible device"):
        backend.prepare(model, "CUDA")
    with pytest.raises(ValueError, match="takes 1 inputs"):
        rep.run([x, x])
    # onnx's released opsets only (as onnxruntime's backend): an unreleased one is skipped
    future = _affine(w, b)
    future.opset_import[0].version = 999
    ok, reason = OnnxRuntimeBackend.is_opset_supported(future)
    assert not ok and "version 999" in reason
    assert OnnxRuntimeBackend.is_opset_supported(model) == (True, "")
    with pytest.raises(unittest.SkipTest):
        backend.prepare(future)
    with pytest.raises(NotImplementedError, match="run_node"):
        OnnxRuntimeBackend.run_node(model.graph.node[0], [x])
    with pytest.raises(TypeError, match="ModelProto"):
        backend.prepare(42)


def test_arena_extend_strategy_and_module_flags():
    # onnxruntime's values (onnxruntime_pybind_state.cc: py::enum_<ArenaExtendStrategy>, export_values)
    assert int(C.ArenaExtendStrategy.kNextPowerOfTwo) == 0 and int(C.ArenaExtendStrategy.kSameAsRequested) == 1
    assert C.kSameAsRequested is C.ArenaExtendStrategy.kSameAsRequested
    cfg = C.OrtArenaCfg(0, C.ArenaExtendStrategy.kSameAsRequested, -1, -1)
    assert cfg.arena_extend_strategy == 1
    # builds without PyTorch interop / Triton / collective operators answer False
    assert C.is_torch_interop_default_on() is False and C.is_triton_enabled() is False
    assert onnxtrain.has_collective_ops() is False
    # ... and a model using com.microsoft's AllReduce is refused naming it
    model = _model([helper.make_node("AllReduce", ["x"], ["y"], domain="com.microsoft")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                   opsets=(("", 17), ("com.microsoft", 1)))
    with pytest.raises(Exception, match="AllReduce"):
        onnxtrain.InferenceSession(model.SerializeToString())
    assert onnxtrain.package_name == "onnxtrain" and isinstance(onnxtrain.version, str)
    assert onnxtrain.cuda_version == ""


def test_training_names_in_pybind_state(tmp_path):
    assert C.TrainingParameters is onnxtrain.TrainingParameters
    from onnxtrain.capi.training.training_session import TrainingSession
    assert TrainingSession is onnxtrain.TrainingSession
    # the import onnxruntime-training 1.13's own training/__init__.py makes, under the alias
    script = tmp_path / "s.py"
    script.write_text("from onnxruntime.capi._pybind_state import TrainingParameters\n"
                      "from onnxruntime.capi.training.training_session import TrainingSession\n"
                      "import onnxtrain\n"
                      "print(TrainingParameters is onnxtrain.TrainingParameters, TrainingSession is onnxtrain.TrainingSession)\n")
    r = subprocess.run([sys.executable, "-m", "onnxtrain.ort_alias", str(script)], env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["True", "True"], r.stderr
    with pytest.raises(AttributeError, match="no_such_name"):
        C.no_such_name  # noqa: B018


def test_graph_transformer_configuration_and_severity():
    config = C.TrainingGraphTransformerConfiguration()
    assert isinstance(config, C.GraphTransformerConfiguration)
    assert isinstance(C.GraphTransformerConfiguration().propagate_cast_ops_config, C.PropagateCastOpsConfiguration)
    assert (config.sparse_embedding_input_names, config.sparse_label_input_names,
            config.optimized_pre_grad_filepath) == ([], [], "")
    assert [int(s) for s in C.Severity] == [0, 1, 2, 3, 4]
    builder_config = C.OrtModuleGraphBuilderConfiguration()
    assert builder_config.loglevel == C.Severity.WARNING
    builder_config.loglevel = C.Severity.ERROR
    rng = np.random.default_rng(1)
    w, b = rng.standard_normal((3, 2)).astype(np.float32), rng.standard_normal(2).astype(np.float32)
    model = _affine(w, b).SerializeToString()
    builder_config.initializer_names = builder_config.initializer_names_to_train = ["w", "b"]
    builder = C.OrtModuleGraphBuilder()
    builder.initialize(model, builder_config)
    builder.build()
    info = builder.get_graph_info()
    assert isinstance(info, C.GraphInfo) and list(info.initializer_names_to_train) == ["w", "b"]
    # the compute optimizer's inputs and the pre-gradient dump are not implemented: named at initialize
    for field, value in (("sparse_embedding_input_names", ["x"]), ("sparse_label_input_names", ["x"]),
                         ("optimized_pre_grad_filepath", "pre_grad.onnx")):
        c = C.OrtModuleGraphBuilderConfiguration()
        c.initializer_names = ["w", "b"]
        setattr(c.graph_transformer_config, field, value)
        with pytest.raises(C.NotImplemented, match=field):
            C.OrtModuleGraphBuilder().initialize(model, c)
    with pytest.raises(TypeError):
        config.optimized_pre_grad_filepath = 3


def test_memory_efficient_execution_order_is_refused_by_name():
    so = C.SessionOptions()
    assert int(C.ExecutionOrder.MEMORY_EFFICIENT) == 2  # onnxruntime's value
    with pytest.raises(C.NotImplemented, match="MEMORY_EFFICIENT"):
        so.execution_order = C.ExecutionOrder.MEMORY_EFFICIENT
    assert so.execution_order == C.ExecutionOrder.DEFAULT


def test_ort_value_cache_clear_and_dml_device():
    cache = C.OrtValueCache()
    for name in ("a", "b"):
        cache.insert(name, C.OrtValue.ortvalue_from_numpy(np.zeros(2, np.float32),
                                                          C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0)))
    assert sorted(cache.keys()) == ["a", "b"]
    cache.clear()
    assert cache.keys() == [] and cache.count("a") == 0
    # onnxruntime: OrtDevice.dml() is its GPU device type, as cuda()
    assert C.OrtDevice.dml() == C.OrtDevice.cuda() == 1
    from onnxtrain.capi._values import get_ort_device_type
    assert get_ort_device_type("DML") == 1


def test_label_encoder_block():
    from onnxtrain.training import onnxblock
    base = _model([], [helper.make_tensor_value_info("x", TensorProto.INT64, ["N"])], [])
    keys, values = [3, 1, 7], [30, 10, 70]
    with onnxblock.base(base) as accessor:
        out = onnxblock.blocks.LabelEncoder(keys_int64s=keys, values_int64s=values, default_int64=-5)("x")
        accessor.model.graph.output.append(helper.make_tensor_value_info(out, TensorProto.INT64, ["N"]))
    model = accessor.model
    assert [(o.domain, o.version) for o in model.opset_import if o.domain == "ai.onnx.ml"] == [("ai.onnx.ml", 2)]
    onnx.checker.check_model(model)
    x = np.array([1, 7, 2, 3, 3], np.int64)
    (y,) = onnxtrain.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    table = dict(zip(keys, values))
    np.testing.assert_array_equal(y, [table.get(int(k), -5) for k in x])


def test_module_1_13_names(tmp_path):
    """onnxruntime 1.13's Module.reset_grad (= lazy_reset_grad) and Module.save_checkpoint."""
    from test_on_device import BIAS, WEIGHT, make_run, open_module
    from onnxtrain.training.api import CheckpointState
    w, b, scale, x, t = make_run(tmp_path)
    state, module, optimizer = open_module(tmp_path)
    d = (x.astype(np.float64) @ w + b) * 1.5 - t
    gw = x.T.astype(np.float64) @ (3 * d)  # d(sum d^2)/dw with the frozen scale 1.5
    module(x, t)
    module(x, t)
    np.testing.assert_allclose(state.parameters[WEIGHT].grad, 2 * gw, rtol=1e-5)
    module.reset_grad()
    module(x, t)
    np.testing.assert_allclose(state.parameters[WEIGHT].grad, gw, rtol=1e-5)
    optimizer.step()
    module.save_checkpoint(str(tmp_path / "saved"))
    loaded = CheckpointState.load_checkpoint(str(tmp_path / "saved"))
    for name in (WEIGHT, BIAS):
        np.testing.assert_array_equal(loaded.parameters[name].data, state.parameters[name].data)
    assert not np.array_equal(loaded.parameters[WEIGHT].data, w)  # the stepped values, not the initial ones


@pytest.mark.skipif(not onnxtrain.distributed.mpi_available(), reason="this onnxtrain is built without MPI")
def test_mpi_context_getters_under_mpirun(tmp_path):
    """onnxruntime-training's MPI builds' get_mpi_context_*: one process outside a launcher; under
    mpirun, the ranks OpenMPI gives each process (its OMPI_COMM_WORLD_* variables)."""
    assert (C.get_mpi_context_world_rank(), C.get_mpi_context_world_size(), C.get_mpi_context_local_rank(),
            C.get_mpi_context_local_size()) == (0, 1, 0, 1)
    import shutil
    exe = shutil.which("mpirun")
    assert exe, "mpirun is missing: run scripts/install_deps.sh --tests (openmpi-bin, libopenmpi-dev)"
    script = tmp_path / "ranks.py"
    script.write_text("import json, os\n"
                      "import onnxruntime.capi._pybind_state as C\n"
                      "got = [C.get_mpi_context_world_rank(), C.get_mpi_context_world_size(),\n"
                      "       C.get_mpi_context_local_rank(), C.get_mpi_context_local_size()]\n"
                      "env = [int(os.environ['OMPI_COMM_WORLD_' + k]) for k in\n"
                      "       ('RANK', 'SIZE', 'LOCAL_RANK', 'LOCAL_SIZE')]\n"
                      "out = os.path.join(os.path.dirname(__file__), 'rank%d.json' % env[0])\n"
                      "with open(out, 'w') as f:\n"
                      "    json.dump([got, env], f)\n")
    env = _env()
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    r = subprocess.run([exe, "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable, "-m",
                        "onnxtrain.ort_alias", str(script)], capture_output=True, text=True, timeout=240, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    # One file per rank: the ranks' stdout lines may interleave under mpirun.
    rows = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank*.json"))]
    assert len(rows) == 2 and all(got == env for got, env in rows)
    assert sorted(got[0] for got, _ in rows) == [0, 1] and all(got[1] == 2 for got, _ in rows)
