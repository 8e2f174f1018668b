"""What users install: the C++ example built against an installed onnxtrain (find_package and
pkg-config) trains as numpy's float64 gradient descent; the wheel (python3 -m build) installs into a
fresh virtual environment, runs its CLI and module, and uninstalls without leftovers; the .deb (CPack)
carries the library, headers, CMake/pkg-config files, CLI and Python package with its dependencies
declared, and what it unpacks runs."""
import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from test_ort_checkpoint import ROOT  # noqa: E402

BUILD = os.environ.get("ONNXTRAIN_BUILD", os.path.join(ROOT, "build"))
PY = f"python3.{sys.version_info[1]}"


def need_build_folder():
    if not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")):
        pytest.skip(f"{BUILD} is not a CMake build folder")


def clean_env(**extra):
    """The environment without the test run's PYTHONPATH (which points at build/python)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ONNXTRAIN_CLI")}
    env.update(extra)
    return env


def run(args, **kw):
    done = subprocess.run(args, capture_output=True, text=True, timeout=kw.pop("timeout", 900), **kw)
    assert done.returncode == 0, f"{args}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def linear_model(path, w, b):
    """pred = X @ W + b (X [8, 3], W [3, 1]); loss = mean((pred - Y)^2)."""
    nodes = [helper.make_node("MatMul", ["X", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["pred"]),
             helper.make_node("Sub", ["pred", "Y"], ["d"]), helper.make_node("Mul", ["d", "d"], ["d2"]),
             helper.make_node("ReduceMean", ["d2"], ["loss"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "linear",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [8, 3]),
         helper.make_tensor_value_info("Y", TensorProto.FLOAT, [8, 1])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("pred", TensorProto.FLOAT, [8, 1])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def numpy_sgd(w, b, steps, lr):
    """The example's batch and plain SGD on the mean squared error, in float64."""
    i, j = np.meshgrid(np.arange(8), np.arange(3), indexing="ij")
    x = np.sin(3.0 * i + j + 1.0).astype(np.float32).astype(np.float64)
    y = np.cos(np.arange(8.0)).astype(np.float32).astype(np.float64).reshape(8, 1)
    w, b = w.astype(np.float64), b.astype(np.float64)
    losses = []
    for _ in range(steps):
        d = x @ w + b - y
        losses.append(float(np.mean(d * d)))
        w, b = w - lr * (2.0 / 8) * x.T @ d, b - lr * (2.0 / 8) * d.sum(axis=0)
    return losses, (x @ w + b).ravel()


def parse(out):
    steps = [float(line.split()[-1]) for line in out.splitlines() if line.startswith("step ")]
    pred = [float(line.split()[-1]) for line in out.splitlines() if line.startswith("pred ")]
    return steps, pred


def test_cpp_example_builds_against_the_installed_package_and_trains_as_numpy(tmp_path):
    need_build_folder()
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None or shutil.which("pkg-config") is None:
        pytest.skip("a C++ compiler and pkg-config are needed")
    prefix = tmp_path / "prefix"
    run(["cmake", "--install", BUILD, "--prefix", str(prefix), "--component", "library"])
    env = {**os.environ, "PKG_CONFIG_PATH": str(prefix / "lib" / "pkgconfig"), "LD_LIBRARY_PATH": str(prefix / "lib")}
    source = os.path.join(ROOT, "examples", "cpp", "train_linear.cpp")
    rng = np.random.default_rng(0)
    w, b = rng.normal(size=(3, 1)).astype(np.float32), np.array([0.1], np.float32)
    model = str(tmp_path / "linear.onnx")
    linear_model(model, w, b)
    expected_losses, expected_pred = numpy_sgd(w, b, 6, 0.1)

    # pkg-config, with the C++ standard the public headers promise (C++17).
    flags = run(["pkg-config", "--cflags", "--libs", "onnxtrain"], env=env).split()
    program = str(tmp_path / "by_pkg_config")
    run([cxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", source, "-o", program, *flags])
    losses, pred = parse(run([program, model, "6", "0.1", str(tmp_path / "a.onnx")], env=env))
    np.testing.assert_allclose(losses, expected_losses, rtol=2e-5)
    np.testing.assert_allclose(pred, expected_pred, rtol=2e-5, atol=1e-6)

    # find_package(onnxtrain).
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(source, project / "train_linear.cpp")
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(user CXX)\nfind_package(onnxtrain 0.1 CONFIG REQUIRED)\n"
        "add_executable(train_linear train_linear.cpp)\n"
        "target_link_libraries(train_linear PRIVATE onnxtrain::onnxtrain)\n")
    run(["cmake", "-S", str(project), "-B", str(project / "b"), f"-DCMAKE_PREFIX_PATH={prefix}"])
    run(["cmake", "--build", str(project / "b")])
    again, pred_again = parse(run([str(project / "b" / "train_linear"), model, "6", "0.1", str(tmp_path / "b.onnx")],
                                  env=env))
    assert again == losses and pred_again == pred


def test_wheel_installs_into_a_virtual_environment_and_uninstalls_cleanly(tmp_path):
    need_build_folder()
    pytest.importorskip("build", reason="python3-build is needed (scripts/install_deps.sh --tests)")
    pytest.importorskip("venv")
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(dist)], cwd=ROOT,
        env=clean_env(ONNXTRAIN_BUILD_DIR=BUILD))
    wheels = list(dist.glob("onnxtrain-*.whl"))
    assert len(wheels) == 1, wheels
    names = zipfile.ZipFile(wheels[0]).namelist()
    for wanted in ("onnxtrain/__init__.py", "onnxtrain/bin/onnxtrain", "onnxtrain/training/api/__init__.py",
                   "onnxtrain/training/onnxblock/__init__.py",
                   "onnxtrain/_C" + __import__("sysconfig").get_config_var("EXT_SUFFIX")):
        assert wanted in names, wanted
    package = os.path.join(ROOT, "python")
    sources = {os.path.relpath(os.path.join(d, f), package) for d, _, files in os.walk(os.path.join(package, "onnxtrain"))
               for f in files if f.endswith(".py")}
    assert sources <= set(names), sorted(sources - set(names))
    entry = [n for n in names if n.endswith("entry_points.txt")]
    assert entry and "onnxtrain = onnxtrain._cli:main" in zipfile.ZipFile(wheels[0]).read(entry[0]).decode()

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    run([*pip, "install", "--no-index", str(wheels[0])], env=clean_env())
    site = venv / "lib" / PY / "site-packages"
    assert (site / "onnxtrain" / "bin" / "onnxtrain").exists()
    out = run([str(venv / "bin" / "onnxtrain"), "--help"], env=clean_env(), cwd=str(tmp_path))
    assert "onnxtrain" in out and "train" in out
    model = str(tmp_path / "linear.onnx")
    linear_model(model, np.ones((3, 1), np.float32), np.zeros(1, np.float32))
    code = ("import numpy as np, onnxtrain; print(onnxtrain.__file__); "
            f"s = onnxtrain.InferenceSession({model!r}); "
            "print(s.run(['pred'], {'X': np.ones((8, 3), np.float32), 'Y': np.zeros((8, 1), np.float32)})[0].ravel())")
    out = run([str(venv / "bin" / "python"), "-c", code], env=clean_env(), cwd=str(tmp_path))
    assert out.splitlines()[0].startswith(str(site)), out
    np.testing.assert_array_equal(np.fromstring(out.splitlines()[1].strip("[]"), sep=" "), np.full(8, 3.0))

    run([*pip, "uninstall", "-y", "onnxtrain"], env=clean_env())
    left = [p for p in site.iterdir() if p.name.lower().startswith("onnxtrain")]
    assert left == [], left
    assert not (venv / "bin" / "onnxtrain").exists()


def test_deb_package_declares_its_dependencies_and_what_it_unpacks_runs(tmp_path):
    need_build_folder()
    for tool in ("cpack", "dpkg-deb", "dpkg-shlibdeps"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is needed (cmake, dpkg-dev: scripts/install_deps.sh --tests)")
    out = tmp_path / "pkg"
    run(["cpack", "--config", os.path.join(BUILD, "CPackConfig.cmake"), "-G", "DEB", "-B", str(out)], cwd=BUILD)
    version = open(os.path.join(ROOT, "CMakeLists.txt")).read().split("project(onnxtrain VERSION ")[1].split()[0]
    deb = out / f"onnxtrain_{version}_amd64.deb"
    assert deb.exists(), list(out.iterdir())
    depends = run(["dpkg-deb", "-f", str(deb), "Depends"])
    for wanted in ("libdnnl", "libprotobuf", "libonnx", "libzip", "libstdc++6", "python3-numpy",
                   f"python3 (>= 3.{sys.version_info[1]})"):
        assert wanted in depends, (wanted, depends)
    files = run(["dpkg-deb", "-c", str(deb)])
    for wanted in ("./usr/bin/onnxtrain", "./usr/lib/libonnxtrain.so", "./usr/include/onnxtrain/training_c_api.h",
                   "./usr/lib/cmake/onnxtrain/onnxtrainConfig.cmake", "./usr/lib/pkgconfig/onnxtrain.pc",
                   f"./usr/lib/{PY}/dist-packages/onnxtrain/__init__.py"):
        assert wanted in files, wanted
    root = tmp_path / "root"
    run(["dpkg-deb", "-x", str(deb), str(root)])
    assert "usage" in run([str(root / "usr" / "bin" / "onnxtrain"), "--help"]).lower()
    site = root / "usr" / "lib" / PY / "dist-packages"
    out = run(["/usr/bin/python3", "-c", "import onnxtrain; print(onnxtrain.__file__)"],
              env=clean_env(PYTHONPATH=str(site)), cwd=str(tmp_path))
    assert out.strip().startswith(str(site)), out
