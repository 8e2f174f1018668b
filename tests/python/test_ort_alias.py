"""The opt-in ``onnxruntime`` alias (``python3 -m onnxtrain.ort_alias``, ``install()`` /
``uninstall()``). Every case runs in a fresh interpreter, so that this process's ``sys.modules`` and
``sys.meta_path`` stay clean; the scripts report what they see as JSON on stdout."""
import json
import subprocess
import sys

import numpy as np
import pytest

import onnxtrain
from alias_run import alias_env, run_alias, write_script

NOTICE = "'import onnxruntime' now loads onnxtrain"


_env = alias_env
_write = write_script


def _alias(args, cwd, env=None, **kwargs):
    """``python3 -m onnxtrain.ort_alias ARGS`` in ``cwd``."""
    return run_alias(*args, cwd=cwd, env=env, timeout=120, **kwargs)


def _plain(args, cwd, env=None):
    """``python3 ARGS`` in ``cwd``, the baseline the alias runner must match."""
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=env or _env(),
                          capture_output=True, text=True, timeout=120)


def _without_notice(stderr):
    return "".join(line for line in stderr.splitlines(keepends=True) if NOTICE not in line)


def _report(proc):
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_imports_resolve_to_onnxtrain_objects(tmp_path):
    script = _write(tmp_path / "s.py", """
        import importlib, json, sys
        import onnxruntime
        import onnxruntime.capi._pybind_state
        import onnxruntime.capi.onnxruntime_pybind11_state as C
        from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument
        from onnxruntime import InferenceSession, SessionOptions
        from onnxruntime.training import TrainingSession
        import onnxruntime as ort
        import onnxtrain, onnxtrain.capi._pybind_state, onnxtrain.training
        import onnxtrain.capi.onnxruntime_pybind11_state as onnxtrain_C
        r = {
            "session": InferenceSession is onnxtrain.InferenceSession is ort.InferenceSession,
            "options": SessionOptions is onnxtrain.SessionOptions,
            "fail": Fail is onnxtrain.Fail and C.Fail is onnxtrain.Fail,
            "invalid": InvalidArgument is onnxtrain.InvalidArgument,
            "pybind_state": onnxruntime.capi._pybind_state.Fail is onnxtrain.capi._pybind_state.Fail,
            "training": TrainingSession is onnxtrain.training.TrainingSession,
            "training_attr": onnxruntime.training.TrainingParameters is onnxtrain.TrainingParameters,
            "sys_modules": sys.modules["onnxruntime"] is onnxruntime
                           and sys.modules["onnxruntime.capi"] is onnxruntime.capi,
            "import_module": importlib.import_module("onnxruntime.capi._pybind_state")
                             is onnxruntime.capi._pybind_state,
            "names": [onnxruntime.__name__, onnxruntime.capi.__name__, C.__name__],
            "version": onnxruntime.__version__ == onnxtrain.__onnxruntime_version__ == onnxruntime.version ==
                       onnxruntime.capi.onnxruntime_validation.version,
            "file": onnxruntime.__file__ == onnxtrain.__file__ and C.__file__ == onnxtrain_C.__file__,
            "path": list(onnxruntime.__path__) == list(onnxtrain.__path__),
            "dir": sorted(set(dir(onnxtrain)) - set(dir(onnxruntime))),
            "in_dir": "InferenceSession" in dir(onnxruntime) and "Fail" in dir(C),
            "find_spec": importlib.util.find_spec("onnxruntime.capi") is not None,
            "doc": onnxruntime.__doc__ == onnxtrain.__doc__,
        }
        print(json.dumps(r))
    """)
    r = _report(_alias([script], tmp_path))
    assert r.pop("names") == ["onnxruntime", "onnxruntime.capi", "onnxruntime.capi.onnxruntime_pybind11_state"]
    assert r.pop("dir") == []
    assert all(r.values()), r


def test_submodules_reached_as_attributes_and_star_import(tmp_path):
    script = _write(tmp_path / "s.py", """
        import json, sys
        import onnxruntime
        pybind = onnxruntime.capi._pybind_state        # never imported by name, by either name
        import onnxtrain.capi._pybind_state
        def star(module):
            ns = {}
            exec(f"from {module} import *", ns)
            return {k: v for k, v in ns.items() if k != "__builtins__"}

        same_star = {}
        for sub in ["", ".capi._pybind_state", ".training", ".session"]:
            ours, theirs = star("onnxtrain" + sub), star("onnxruntime" + sub)
            # objects are identical; a submodule is its alias module (onnxruntime.training.optim);
            # `version` is onnxruntime's API level, as __version__
            same_star[sub] = sorted(ours) == sorted(theirs) and all(
                ours[k] is theirs[k] or (isinstance(ours[k], type(sys)) and
                                         theirs[k].__name__ == "onnxruntime" + ours[k].__name__[len("onnxtrain"):])
                or (k == "version" and theirs[k] == onnxtrain.__onnxruntime_version__)
                for k in ours)
        print(json.dumps({
            "capi_name": onnxruntime.capi.__name__,
            "pybind_name": pybind.__name__,
            "fail": pybind.Fail is onnxtrain.Fail,
            "star": same_star,
        }))
    """)
    r = _report(_alias([script], tmp_path))
    assert r.pop("capi_name") == "onnxruntime.capi"
    assert r.pop("pybind_name") == "onnxruntime.capi._pybind_state"
    assert r.pop("star") == {"": True, ".capi._pybind_state": True, ".training": True, ".session": True}
    assert all(r.values()), r


def test_except_clause_with_onnxruntime_names_catches_onnxtrain_errors(tmp_path, mlp_model):
    model, _, _ = mlp_model
    (tmp_path / "m.onnx").write_bytes(model)
    script = _write(tmp_path / "s.py", """
        import json, sys
        import numpy as np
        import onnxruntime
        from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument
        import onnxtrain
        out = {}
        sess = onnxruntime.InferenceSession(sys.argv[1])
        try:
            sess.run(None, {"no_such_input": np.zeros((1, 4), np.float32)})
        except InvalidArgument as e:
            out["invalid_argument"] = type(e).__name__
        try:
            raise onnxtrain.Fail("from onnxtrain")
        except onnxruntime.capi.onnxruntime_pybind11_state.Fail as e:
            out["fail"] = str(e)
        print(json.dumps(out))
    """)
    r = _report(_alias([script, tmp_path / "m.onnx"], tmp_path))
    assert r == {"invalid_argument": "InvalidArgument", "fail": "from onnxtrain"}


def test_inference_script_matches_numpy(tmp_path, mlp_model):
    model, w, b = mlp_model
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    (tmp_path / "m.onnx").write_bytes(model)
    np.save(tmp_path / "x.npy", x)
    script = _write(tmp_path / "infer.py", """
        import sys
        import numpy as np
        import onnxruntime as ort
        model_bytes = open(sys.argv[1], "rb").read()
        sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name
        y, z = sess.run(None, {name: np.load(sys.argv[2])})
        np.save(sys.argv[3], y)
    """)
    proc = _alias([script, tmp_path / "m.onnx", tmp_path / "x.npy", tmp_path / "y.npy"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-6)


def test_argv_path_and_main_as_python_runs_them(tmp_path):
    _write(tmp_path / "sub" / "show.py", """
        import json, sys
        print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "name": __name__, "file": __file__,
                          "main": sys.modules["__main__"].__dict__ is globals()}))
    """)
    args = ["sub/show.py", "a b", "--force", "-m", "3"]
    alias = _alias(args, tmp_path)
    plain = _plain(args, tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert _report(alias) == _report(plain)
    assert _report(alias)["argv"] == args
    assert _report(alias)["path0"] == str(tmp_path / "sub")


def test_sibling_module_of_the_script_is_importable(tmp_path):
    _write(tmp_path / "proj" / "helper.py", "VALUE = 41\n")
    script = _write(tmp_path / "proj" / "main.py", "import helper\nprint(helper.VALUE + 1)\n")
    proc = _alias([script], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "42"


def test_exit_status_propagates(tmp_path):
    script = _write(tmp_path / "exit3.py", "import sys, onnxruntime\nsys.exit(3)\n")
    assert _alias([script], tmp_path).returncode == 3
    message = _write(tmp_path / "exitmsg.py", "import sys\nsys.exit('bye now')\n")
    proc = _alias([message], tmp_path)
    assert proc.returncode == 1 and _without_notice(proc.stderr) == "bye now\n"


def test_uncaught_exception_prints_the_scripts_traceback(tmp_path):
    script = _write(tmp_path / "boom.py", """
        import onnxruntime

        def inner():
            raise ValueError("boom marker")

        inner()
    """)
    proc = _alias(["boom.py"], tmp_path)
    assert proc.returncode == 1
    tb = _without_notice(proc.stderr)
    assert tb.startswith("Traceback (most recent call last):\n") and tb.endswith("ValueError: boom marker\n")
    # Only the script's two frames: none of the runner's.
    assert tb.count("  File ") == 2 and tb.count(f'File "{script}"') == 2, tb


def test_uncaught_exception_traceback_identical_without_onnxruntime(tmp_path):
    _write(tmp_path / "boom.py", "def f():\n    return 1 / 0\n\nf()\n")
    alias = _alias(["boom.py"], tmp_path)
    plain = _plain(["boom.py"], tmp_path)
    assert alias.returncode == plain.returncode == 1
    assert _without_notice(alias.stderr) == plain.stderr


def test_missing_script_is_reported_as_python_does(tmp_path):
    alias = _alias(["nope.py"], tmp_path)
    plain = _plain(["nope.py"], tmp_path)
    assert alias.returncode == plain.returncode == 2
    assert _without_notice(alias.stderr) == plain.stderr


def test_dash_m_runs_a_module(tmp_path):
    _write(tmp_path / "pkg" / "__init__.py", "")
    _write(tmp_path / "pkg" / "tool.py", """
        import json, sys
        import onnxruntime, onnxtrain
        print(json.dumps({"argv": sys.argv[1:], "name": __name__,
                          "same": onnxruntime.InferenceSession is onnxtrain.InferenceSession}))
        sys.exit(5)
    """)
    proc = _alias(["-m", "pkg.tool", "x", "--force"], tmp_path)
    assert proc.returncode == 5, proc.stderr
    assert json.loads(proc.stdout) == {"argv": ["x", "--force"], "name": "__main__", "same": True}


@pytest.mark.parametrize("args", [[], ["-m"], ["--bogus", "x.py"]])
def test_usage_errors(tmp_path, args):
    proc = _alias(args, tmp_path)
    assert proc.returncode == 2
    assert "usage:" in proc.stderr
    assert NOTICE not in proc.stderr


def test_notice_printed_exactly_once(tmp_path):
    script = _write(tmp_path / "s.py", """
        import onnxruntime
        import onnxtrain.ort_alias as alias
        alias.install()
        alias.install(force=True)
        alias.uninstall()
        alias.install()
        import onnxruntime
    """)
    proc = _alias([script], tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if NOTICE in line]
    assert len(lines) == 1, proc.stderr
    assert f"onnxtrain {onnxtrain.__version__}" in lines[0] and "alias active" in lines[0]


def test_missing_modules_and_names_fail_by_their_onnxruntime_name(tmp_path):
    script = _write(tmp_path / "s.py", """
        import importlib, importlib.util, json
        import onnxruntime
        import onnxtrain.capi._pybind_state

        def outcome(statement):
            try:
                exec(statement, {"onnxruntime": onnxruntime, "importlib": importlib})
            except Exception as e:
                return [type(e).__name__, str(e)]
            return None

        cases = {
            "import onnxruntime.quantization": "onnxruntime.quantization",
            "import onnxruntime.transformers.optimizer": "onnxruntime.transformers",
            "importlib.import_module('onnxruntime.quantization')": "onnxruntime.quantization",
            "onnxruntime.ModelCompiler": "onnxruntime.ModelCompiler",
            "onnxruntime.capi._pybind_state.no_such_function": "onnxruntime.capi._pybind_state.no_such_function",
            "from onnxruntime import ModelCompiler": "ModelCompiler",
            "from onnxruntime import quantization": "quantization",
            "from onnxruntime.capi._pybind_state import no_such_function": "no_such_function",
        }
        if not hasattr(onnxtrain.capi._pybind_state, "get_build_info"):
            cases["onnxruntime.capi._pybind_state.get_build_info"] = "onnxruntime.capi._pybind_state.get_build_info"
        if importlib.util.find_spec("onnxtrain.capi.onnxruntime_inference_collection") is None:
            cases["import onnxruntime.capi.onnxruntime_inference_collection"] = \\
                "onnxruntime.capi.onnxruntime_inference_collection"
        out = {s: [outcome(s), name] for s, name in cases.items()}
        out["probe"] = [importlib.util.find_spec("onnxruntime.quantization") is None, None]
        out["hasattr"] = [hasattr(onnxruntime, "ModelCompiler") or getattr(onnxruntime, "ModelCompiler", 7) != 7, None]
        print(json.dumps(out))
    """)
    r = _report(_alias([script], tmp_path))
    assert r.pop("probe") == [True, None]
    assert r.pop("hasattr") == [False, None]
    for statement, (result, name) in r.items():
        assert result is not None, f"{statement} did not fail"
        kind, message = result
        if statement.startswith(("import ", "importlib.")):
            assert kind == "ModuleNotFoundError", (statement, result)
        elif statement.startswith("from "):
            assert kind == "ImportError", (statement, result)
        else:
            assert kind == "AttributeError", (statement, result)
        assert name in message, (statement, message)
        if statement != "from onnxruntime.capi._pybind_state import no_such_function":  # Python's own message
            assert "onnxtrain does not provide" in message, (statement, message)


def test_fake_real_onnxruntime_is_not_shadowed(tmp_path):
    fake = _write(tmp_path / "fake" / "onnxruntime" / "__init__.py", "FAKE = True\n")
    script = _write(tmp_path / "s.py", "print('script ran')\n")
    proc = _alias([script], tmp_path, env=_env(tmp_path / "fake"))
    assert proc.returncode == 1
    assert "script ran" not in proc.stdout
    assert str(fake) in proc.stderr and "--force" in proc.stderr
    assert NOTICE not in proc.stderr


def test_fake_beside_the_script_is_not_shadowed(tmp_path):
    fake = _write(tmp_path / "proj" / "onnxruntime" / "__init__.py", "FAKE = True\n")
    script = _write(tmp_path / "proj" / "s.py", "print('script ran')\n")
    proc = _alias([script], tmp_path)
    assert proc.returncode == 1 and str(fake) in proc.stderr


def test_force_replaces_the_fake(tmp_path):
    fake = _write(tmp_path / "fake" / "onnxruntime" / "__init__.py", "FAKE = True\n")
    script = _write(tmp_path / "s.py", """
        import json
        import onnxruntime, onnxtrain
        print(json.dumps({"fake": hasattr(onnxruntime, "FAKE"),
                          "same": onnxruntime.InferenceSession is onnxtrain.InferenceSession}))
    """)
    proc = _alias(["--force", script], tmp_path, env=_env(tmp_path / "fake"))
    assert _report(proc) == {"fake": False, "same": True}
    notice = [line for line in proc.stderr.splitlines() if NOTICE in line]
    assert len(notice) == 1 and str(fake) in notice[0]


def test_install_from_code_refuses_then_forces_out_an_imported_fake(tmp_path):
    fake = _write(tmp_path / "fake" / "onnxruntime" / "__init__.py", "FAKE = True\n")
    _write(tmp_path / "fake" / "onnxruntime" / "sub.py", "")
    script = _write(tmp_path / "s.py", """
        import json, sys
        import onnxruntime, onnxruntime.sub
        import onnxtrain, onnxtrain.ort_alias as alias
        out = {}
        try:
            alias.install()
        except alias.RealOnnxruntimeError as e:
            out["error"] = str(e)
        out["still_fake"] = sys.modules["onnxruntime"].FAKE and not alias.installed()
        alias.install(force=True)
        out["purged"] = "onnxruntime.sub" not in sys.modules
        import onnxruntime
        out["same"] = onnxruntime.InferenceSession is onnxtrain.InferenceSession
        print(json.dumps(out))
    """)
    r = _report(_plain([script], tmp_path, env=_env(tmp_path / "fake")))
    assert str(fake) in r["error"] and "force=True" in r["error"]
    assert r["still_fake"] and r["purged"] and r["same"]


def test_namespace_directory_named_onnxruntime_is_not_a_real_onnxruntime(tmp_path):
    (tmp_path / "proj" / "onnxruntime").mkdir(parents=True)
    script = _write(tmp_path / "proj" / "s.py", "import onnxruntime\nprint(onnxruntime.__version__)\n")
    proc = _alias([script], tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_install_and_uninstall_from_code(tmp_path):
    script = _write(tmp_path / "s.py", """
        import importlib, json, sys
        import onnxtrain, onnxtrain.ort_alias as alias

        def importable():
            try:
                return importlib.import_module("onnxruntime").InferenceSession is onnxtrain.InferenceSession
            except ImportError:
                return False

        out = {"before": [alias.installed(), importable()]}
        alias.install()
        alias.install()
        out["installed"] = [alias.installed(), importable(),
                            sum(getattr(f, "_onnxtrain_ort_alias", False) for f in sys.meta_path)]
        out["uninstall"] = [alias.uninstall(), alias.installed(), "onnxruntime" in sys.modules, importable()]
        out["again"] = [alias.uninstall(), (alias.install(), importable())[1]]
        print(json.dumps(out))
    """)
    proc = _plain([script], tmp_path)
    assert _report(proc) == {"before": [False, False], "installed": [True, True, 1],
                             "uninstall": [True, False, False, False], "again": [False, True]}
    assert sum(NOTICE in line for line in proc.stderr.splitlines()) == 1


def test_renamed_submodule_through_the_table(tmp_path):
    script = _write(tmp_path / "s.py", """
        import json
        import onnxtrain, onnxtrain.ort_alias as alias
        alias._RENAMES["onnxruntime.renamed"] = "onnxtrain.capi"
        alias.install()
        import onnxruntime.renamed._pybind_state as p
        import onnxruntime
        print(json.dumps({"name": p.__name__, "fail": p.Fail is onnxtrain.Fail,
                          "attr": onnxruntime.renamed.onnxruntime_pybind11_state.Fail is onnxtrain.Fail,
                          "capi": onnxruntime.capi._pybind_state.Fail is onnxtrain.Fail}))
    """)
    r = _report(_plain([script], tmp_path))
    assert r == {"name": "onnxruntime.renamed._pybind_state", "fail": True, "attr": True, "capi": True}


def test_mock_patch_through_the_alias(tmp_path):
    # mock.patch through an onnxruntime name reaches onnxtrain's module, so that onnxtrain's own code
    # sees the patch (as onnxruntime's code sees a patch of onnxruntime's), and is undone on exit.
    script = _write(tmp_path / "s.py", """
        import json
        from unittest import mock
        import onnxruntime, onnxtrain
        import onnxtrain.capi.onnxruntime_inference_collection as coll
        original = coll.check_and_normalize_provider_args
        with mock.patch("onnxruntime.InferenceSession") as fake:
            patched = onnxruntime.InferenceSession is fake and onnxtrain.InferenceSession is fake
        calls = []
        def spy(*args):
            calls.append(args[0])
            return original(*args)
        with mock.patch("onnxruntime.capi.onnxruntime_inference_collection.check_and_normalize_provider_args",
                        side_effect=spy):
            try:
                onnxruntime.InferenceSession(b"not a model", providers=["CPUExecutionProvider"])
            except Exception:
                pass
        with mock.patch.object(onnxruntime, "get_device", lambda: "patched"):
            through_object = onnxtrain.get_device() == "patched"
        print(json.dumps({"patched": patched, "seen_by_onnxtrain": calls == [["CPUExecutionProvider"]],
                          "through_object": through_object,
                          "restored": onnxruntime.InferenceSession is onnxtrain.InferenceSession
                                      and onnxtrain.InferenceSession.__module__.startswith("onnxtrain")
                                      and coll.check_and_normalize_provider_args is original
                                      and onnxtrain.get_device() == "CPU",
                          "alias_dict_clean": "InferenceSession" not in vars(onnxruntime)}))
    """)
    assert _report(_alias([script], tmp_path)) == {"patched": True, "seen_by_onnxtrain": True,
                                                   "through_object": True, "restored": True,
                                                   "alias_dict_clean": True}
