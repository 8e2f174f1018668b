"""onnxruntime's shared allocators: OrtArenaCfg, create_and_register_allocator(_v2) and the session
config entry session.use_env_allocators (onnxruntime_test_python.py's
test_shared_allocator_using_create_and_register_allocator). Registration is once per process, so
each scenario runs in a fresh interpreter."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import onnxtrain as onnxrt

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(body):
    """Runs `body` (after the common prelude) in a fresh interpreter; returns its JSON report."""
    prelude = textwrap.dedent("""
        import json, threading
        import numpy as np
        from onnx import TensorProto, helper, numpy_helper
        import onnxtrain as onnxrt

        def mlp(width, seed):
            # y = relu(x @ W1) @ W2: the [64, width] intermediate lives in the run's arena.
            rng = np.random.default_rng(seed)
            w1 = rng.standard_normal((32, width)).astype(np.float32)
            w2 = rng.standard_normal((width, 8)).astype(np.float32)
            g = helper.make_graph(
                [helper.make_node("MatMul", ["x", "W1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
                 helper.make_node("MatMul", ["r", "W2"], ["y"])], "mlp",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 32])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 8])],
                [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
            m.ir_version = 8
            return m.SerializeToString(), w1, w2

        def session(model, shared):
            so = onnxrt.SessionOptions()
            if shared:
                so.add_session_config_entry("session.use_env_allocators", "1")
            return onnxrt.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])

        cpu_arena = onnxrt.OrtMemoryInfo("Cpu", onnxrt.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                                         onnxrt.OrtMemType.DEFAULT)
        out = {}
    """)
    script = prelude + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_arena_cfg_forms_and_validation():
    cfg = onnxrt.OrtArenaCfg(0, -1, -1, -1)
    assert (cfg.max_mem, cfg.arena_extend_strategy, cfg.initial_chunk_size_bytes, cfg.max_dead_bytes_per_chunk) == \
        (0, -1, -1, -1)
    cfg = onnxrt.OrtArenaCfg({"max_mem": 1 << 20, "arena_extend_strategy": 1, "initial_chunk_size_bytes": 4096,
                              "max_dead_bytes_per_chunk": 128, "initial_growth_chunk_size_bytes": 256,
                              "max_power_of_two_extend_bytes": 1 << 30})
    assert (cfg.max_mem, cfg.arena_extend_strategy, cfg.initial_chunk_size_bytes, cfg.max_dead_bytes_per_chunk,
            cfg.initial_growth_chunk_size_bytes, cfg.max_power_of_two_extend_bytes) == \
        (1 << 20, 1, 4096, 128, 256, 1 << 30)
    cfg.max_mem = 77
    assert cfg.max_mem == 77
    with pytest.raises(RuntimeError, match="Invalid OrtArenaCfg option: max_memory"):
        onnxrt.OrtArenaCfg({"max_memory": 1})
    assert onnxrt.capi._pybind_state.OrtArenaCfg is onnxrt.OrtArenaCfg
    assert onnxrt.capi.onnxruntime_pybind11_state.create_and_register_allocator is \
        onnxrt.create_and_register_allocator


def test_sessions_share_the_registered_arena():
    r = _run("""
        # kSameAsRequested: the block grows to exactly what the larger run needs.
        onnxrt.create_and_register_allocator(cpu_arena, onnxrt.OrtArenaCfg(0, 1, -1, -1))
        try:
            onnxrt.create_and_register_allocator(cpu_arena, None)
        except RuntimeError as e:
            out["twice"] = str(e)
        (m1, a1, b1), (m2, a2, b2) = mlp(512, 0), mlp(256, 1)
        x = np.random.default_rng(2).standard_normal((64, 32)).astype(np.float32)
        ref1, ref2 = np.maximum(x @ a1, 0) @ b1, np.maximum(x @ a2, 0) @ b2
        live = lambda: onnxrt.shared_allocator_stats()["live_arena_bytes"]
        # The arena memory the process holds: two sessions on their own, then two sharing.
        out["live"] = [live()]
        own1, own2 = session(m1, False), session(m2, False)
        outs = {"own1": own1.run(None, {"x": x})[0], "own2": own2.run(None, {"x": x})[0]}
        out["live"].append(live())
        sh1, sh2 = session(m1, True), session(m2, True)
        outs.update(sh1=sh1.run(None, {"x": x})[0], sh2=sh2.run(None, {"x": x})[0])
        out["live"].append(live())
        out["close"] = [bool(np.allclose(outs[k], ref1 if k.endswith("1") else ref2, rtol=1e-4, atol=1e-3))
                        for k in outs]
        out["same"] = [bool(np.array_equal(outs["own1"], outs["sh1"])), bool(np.array_equal(outs["own2"], outs["sh2"]))]
        out["stats"] = {k: s.last_run_stats() for k, s in
                        {"own1": own1, "own2": own2, "sh1": sh1, "sh2": sh2}.items()}
        out["shared"] = onnxrt.shared_allocator_stats()

        # Two sessions on the shared arena, run at once from two threads: each run borrows it whole.
        errors, bad = [], []
        def loop(s, ref):
            try:
                for _ in range(30):
                    if not np.allclose(s.run(None, {"x": x})[0], ref, rtol=1e-4, atol=1e-3):
                        bad.append(1)
            except Exception as e:
                errors.append(repr(e))
        ts = [threading.Thread(target=loop, args=(sh1, ref1)), threading.Thread(target=loop, args=(sh2, ref2))]
        for t in ts: t.start()
        for t in ts: t.join()
        out["threads"] = [errors, len(bad)]
        out["runs"] = onnxrt.shared_allocator_stats()["runs"]
    """)
    assert "An allocator for this device has already been registered for sharing." in r["twice"]
    assert all(r["close"]) and all(r["same"])
    st = r["stats"]
    a1, a2 = st["own1"]["arena_bytes"], st["own2"]["arena_bytes"]
    assert a1 > a2 > 0 and st["sh1"]["arena_bytes"] == a1 and st["sh2"]["arena_bytes"] == a2
    # Sessions on their own hold their arenas between runs (a1 + a2); the two sharing add one block,
    # the larger of their two, not the sum.
    before, after_own, after_shared = r["live"]
    assert after_own - before >= a1 + a2
    shared = r["shared"]
    assert shared["registered"] and shared["max_mem"] == 0 and shared["runs"] == 2
    assert shared["arena_bytes"] == a1
    assert after_shared - after_own == shared["arena_bytes"]
    assert r["threads"] == [[], 0]
    assert r["runs"] == 62


def test_max_mem_bounds_the_shared_arena():
    r = _run("""
        (m1, a1, b1) = mlp(512, 0)
        x = np.ones((64, 32), np.float32)
        need = session(m1, False)
        need.run(None, {"x": x})
        out["need"] = need.last_run_stats()["arena_bytes"]
        onnxrt.create_and_register_allocator(cpu_arena, onnxrt.OrtArenaCfg({"max_mem": out["need"] // 2}))
        s = session(m1, True)
        try:
            s.run(None, {"x": x})
        except RuntimeError as e:
            out["error"] = str(e)
        # A session that does not opt in is not bounded by it.
        out["own_ok"] = bool(np.allclose(session(m1, False).run(None, {"x": x})[0], np.maximum(x @ a1, 0) @ b1,
                                         rtol=1e-4, atol=1e-3))
    """)
    assert "max_mem" in r["error"] and str(r["need"] // 2) in r["error"]
    assert r["own_ok"]


def test_registration_refusals():
    r = _run("""
        cuda = onnxrt.OrtMemoryInfo("Cuda", onnxrt.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, onnxrt.OrtMemType.DEFAULT)
        for key, call in {
            "cuda": lambda: onnxrt.create_and_register_allocator(cuda, None),
            "strategy": lambda: onnxrt.create_and_register_allocator(cpu_arena, onnxrt.OrtArenaCfg(0, 5, -1, -1)),
            "v2_cuda": lambda: onnxrt.create_and_register_allocator_v2("CUDAExecutionProvider", cuda, {}, None),
        }.items():
            try:
                call()
                out[key] = None
            except RuntimeError as e:
                out[key] = str(e)
        out["registered_after_refusals"] = onnxrt.shared_allocator_stats()["registered"]
        onnxrt.create_and_register_allocator_v2("CPUExecutionProvider", cpu_arena, {}, onnxrt.OrtArenaCfg(0, -1, -1, -1))
        out["v2_cpu"] = onnxrt.shared_allocator_stats()["registered"]
        # Without use_env_allocators a session keeps its own arena even with one registered.
        m, _, _ = mlp(64, 0)
        s = session(m, False)
        before = onnxrt.shared_allocator_stats()["live_arena_bytes"]
        s.run(None, {"x": np.ones((64, 32), np.float32)})
        out["own_held"] = onnxrt.shared_allocator_stats()["live_arena_bytes"] - before
        out["shared_bytes"] = onnxrt.shared_allocator_stats()["arena_bytes"]
    """)
    assert "Only CPU devices are supported" in r["cuda"]
    assert "arena_extend_strategy" in r["strategy"]
    assert "CUDAExecutionProvider" in r["v2_cuda"]
    assert r["registered_after_refusals"] is False
    assert r["v2_cpu"] is True
    assert r["own_held"] > 0 and r["shared_bytes"] == 0


@pytest.mark.parametrize("cfg,expect", [
    ("0, -1, -1, -1", "pow2"),          # the default strategy: kNextPowerOfTwo
    ("0, 0, -1, -1", "pow2"),
    ("0, 1, -1, -1", "exact"),          # kSameAsRequested
    ("0, 1, 1 << 22, -1", "initial"),   # the first block is at least initial_chunk_size_bytes
    ("out['need'] + 1000, 0, -1, -1", "capped"),  # the power of two would pass max_mem: max_mem
])
def test_arena_growth_follows_the_config(cfg, expect):
    r = _run(f"""
        (m, a, b) = mlp(500, 0)  # a need that is not a power of two
        own = session(m, False)
        x = np.zeros((64, 32), np.float32)
        own.run(None, {{"x": x}})
        out["need"] = own.last_run_stats()["arena_bytes"]
        onnxrt.create_and_register_allocator(cpu_arena, onnxrt.OrtArenaCfg({cfg}))
        session(m, True).run(None, {{"x": x}})
        out["bytes"] = onnxrt.shared_allocator_stats()["arena_bytes"]
    """)
    need, got = r["need"], r["bytes"]
    assert need > 0 and need & (need - 1) != 0
    if expect == "pow2":
        assert got >= need and got & (got - 1) == 0 and got < 2 * need
    elif expect == "exact":
        assert got == need
    elif expect == "initial":
        assert got == 1 << 22
    else:
        assert got == (need + 1000) // 64 * 64 and got < 2 * need


def test_max_dead_bytes_per_chunk_warns_it_has_no_effect():
    r = _run("""
        import warnings
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            onnxrt.create_and_register_allocator(cpu_arena, onnxrt.OrtArenaCfg(0, -1, -1, 1024))
        out["warnings"] = [str(x.message) for x in w]
    """)
    assert any("max_dead_bytes_per_chunk have no effect" in m for m in r["warnings"])
