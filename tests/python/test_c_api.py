"""The training C API from C (examples/c/train_artifacts.c, built by CMake against the shared
library): its losses equal onnxtrain's Python Module on the same artifacts (and onnxruntime-web's
where installed), and an installed onnxtrain links into a C program through pkg-config and through
CMake's find_package."""
import os
import shutil
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from onnxtrain.training import artifacts  # noqa: E402
from onnxtrain.training.api import CheckpointState, Module, Optimizer  # noqa: E402
from test_artifacts import mlp_model, run_ort_web  # noqa: E402
from test_ort_checkpoint import ROOT  # noqa: E402

BUILD = os.environ.get("ONNXTRAIN_BUILD", os.path.join(ROOT, "build"))
EXAMPLE = os.path.join(BUILD, "train_artifacts_c")


def batch():
    """The example's fixed batch: input[i][j] = sin(4 i + j + 1), labels[i] = i mod 3, 8 rows."""
    i, j = np.meshgrid(np.arange(8), np.arange(4), indexing="ij")
    return np.sin(4.0 * i + j + 1.0).astype(np.float32), np.arange(8) % 3


def mlp_artifacts(folder):
    artifacts.generate_artifacts(mlp_model(), requires_grad=["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"],
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=folder)


def c_losses(program, folder, env=None):
    run = subprocess.run([program, folder, "10"], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    return [float(line.split()[-1]) for line in lines if line.startswith("step ")], float(lines[-1].split()[-1])


def test_c_example_trains_as_the_python_module(tmp_path):
    if not os.path.exists(EXAMPLE):
        pytest.skip(f"{EXAMPLE} is not built")
    folder = str(tmp_path / "art")
    mlp_artifacts(folder)
    losses, eval_loss = c_losses(EXAMPLE, folder)
    x, y = batch()
    state = CheckpointState.load_checkpoint(os.path.join(folder, "checkpoint"))
    module = Module(os.path.join(folder, "training_model.onnx"), state, os.path.join(folder, "eval_model.onnx"))
    optimizer = Optimizer(os.path.join(folder, "optimizer_model.onnx"), module)
    expected = []
    for _ in range(10):
        expected.append(float(module(x, y)))
        optimizer.step()
        module.lazy_reset_grad()
    np.testing.assert_allclose(losses, expected, rtol=1e-6)
    module.eval()
    np.testing.assert_allclose(eval_loss, float(module(x, y)), rtol=1e-6)
    saved = CheckpointState.load_checkpoint(os.path.join(folder, "c_checkpoint"))
    for name, p in state.parameters:
        np.testing.assert_array_equal(saved.parameters[name].data, p.data)
    web = run_ort_web(folder, tmp_path, x, y, "labels")
    np.testing.assert_allclose(losses, web["losses"], rtol=1e-5)


def test_an_installed_onnxtrain_links_through_pkg_config_and_cmake(tmp_path):
    if not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")):
        pytest.skip(f"{BUILD} is not a CMake build folder")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or shutil.which("pkg-config") is None:
        pytest.skip("a C compiler and pkg-config are needed")
    prefix = tmp_path / "prefix"
    run = subprocess.run(["cmake", "--install", BUILD, "--prefix", str(prefix), "--component", "library"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    env = {**os.environ, "PKG_CONFIG_PATH": str(prefix / "lib" / "pkgconfig"),
           "LD_LIBRARY_PATH": str(prefix / "lib")}
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "onnxtrain"], capture_output=True, text=True, env=env)
    assert flags.returncode == 0, flags.stderr
    program = str(tmp_path / "by_pkg_config")
    source = os.path.join(ROOT, "examples", "c", "train_artifacts.c")
    build = subprocess.run([cc, source, "-o", program, *flags.stdout.split(), "-lm"], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    folder = str(tmp_path / "art")
    mlp_artifacts(folder)
    losses, _ = c_losses(program, folder, env)
    # The same program through find_package(onnxtrain).
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(source, project / "train_artifacts.c")
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(user C)\nfind_package(onnxtrain 0.1 CONFIG REQUIRED)\n"
        "add_executable(train_artifacts train_artifacts.c)\n"
        "target_link_libraries(train_artifacts PRIVATE onnxtrain::onnxtrain m)\n")
    for args in (["cmake", "-S", str(project), "-B", str(project / "b"), f"-DCMAKE_PREFIX_PATH={prefix}"],
                 ["cmake", "--build", str(project / "b")]):
        step = subprocess.run(args, capture_output=True, text=True, timeout=600)
        assert step.returncode == 0, step.stdout[-2000:] + step.stderr[-2000:]
    shutil.rmtree(folder)
    mlp_artifacts(folder)
    again, _ = c_losses(str(project / "b" / "train_artifacts"), folder, env)
    assert again == losses
