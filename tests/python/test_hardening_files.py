"""Hardening of file writing (issue 38, point 6): every writer, C++ (the CLI's outputs, checkpoints,
exports) and Python (ORTTrainer checkpoints, save_as_onnx, torch.save checkpoints, the gradient
graph export), goes through onnxtrain's one writer (src/core/atomic_file.h; onnxtrain._files), whose
rule is: a regular file (or nothing) is replaced atomically, keeping its permission bits; a
character device, FIFO or this process's descriptor is written through, never replaced; a symbolic
link is followed and stays a link; a directory, socket or block device is refused (ModelFileError,
an OSError, naming the path). A private device node (mknod 1,3: what /dev/null is) is written before
/dev/null itself: a writer that replaces it fails the test before it can replace the machine's
/dev/null.
"""
import os
import shutil
import socket
import stat
import subprocess
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain as ot
from onnxtrain import _files

CLI = os.environ.get("ONNXTRAIN_CLI") or shutil.which("onnxtrain")


def cli(*args):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=300)


def ok(r):
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r


def null_node(folder):
    """A character device like /dev/null at folder/null (skips where mknod is not allowed)."""
    path = os.path.join(str(folder), "null")
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError) as e:
        pytest.skip(f"mknod is not allowed here: {e}")
    return path


def is_null_device(path):
    st = os.lstat(path)
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)


def dev_null_intact():
    assert is_null_device("/dev/null"), "/dev/null is no longer a character device"
    assert not [f for f in os.listdir("/dev") if f.startswith("null.")], os.listdir("/dev")


class FifoReader:
    """Reads a FIFO in a thread until its writer closes it (opened without blocking: a writer that
    never comes cannot hang the test; gives up after `timeout` seconds)."""

    def __init__(self, path, timeout=20):
        self.data = b""
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)

        def run():
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    chunk = None
                if chunk:
                    self.data += chunk
                elif chunk == b"" and self.data:
                    break
                else:
                    time.sleep(0.005)
            os.close(fd)

        self.thread = threading.Thread(target=run)
        self.thread.start()

    def join(self):
        self.thread.join()
        return self.data


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


# ------------------------------------------------------------------------------------ the CLI

@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    W = (0.3 * rng.standard_normal((4, 2))).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["y"])], "m",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
                          [numpy_helper.from_array(W, "W")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    X = rng.standard_normal((16, 4)).astype(np.float32)
    np.savez(tmp_path / "d.npz", X=X, label=(X @ W).astype(np.float32))
    return tmp_path


def cli_writes(files, out):
    """Every CLI command that writes a file, with its output(s) at `out`."""
    m, d = files / "m.onnx", files / "d.npz"
    ok(cli("run", m, "--data", d, "--out", out))
    ok(cli("train", m, "--data", d, "--loss", "squared_error", "--epochs", 1, "--batch-size", 8, "--progress",
           "none", "--out", out, "--metrics", out, "--curve", out, "--checkpoint-dir", files / "ck"))
    ok(cli("export", m, "--checkpoint", files / "ck", "--out", out))
    ok(cli("grad", m, "--loss", "squared_error", "--out", out))


def test_cli_outputs_to_dev_null_leave_it_a_device(files):
    node = null_node(files)
    cli_writes(files, node)
    assert is_null_device(node), "a CLI writer replaced the device node"
    assert sorted(f for f in os.listdir(files) if f.startswith("null")) == ["null"]
    cli_writes(files, "/dev/null")
    dev_null_intact()


def test_cli_out_through_a_symbolic_link_and_to_a_fifo(files, fifo):
    (files / "runs").mkdir()
    os.symlink("runs/pred.npz", files / "latest.npz")
    ok(cli("run", files / "m.onnx", "--data", files / "d.npz", "--out", files / "latest.npz"))
    assert os.path.islink(files / "latest.npz") and os.readlink(files / "latest.npz") == "runs/pred.npz"
    with np.load(files / "runs" / "pred.npz") as z:
        assert z["y"].shape == (16, 2)
    reader = FifoReader(fifo)
    ok(cli("run", files / "m.onnx", "--data", files / "d.npz", "--out", fifo))
    data = reader.join()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced"
    (files / "copy.npz").write_bytes(data)
    with np.load(files / "copy.npz") as z:
        assert z["y"].shape == (16, 2)


def test_cli_out_to_a_directory_is_refused_naming_it(files):
    (files / "outdir").mkdir()
    r = cli("run", files / "m.onnx", "--data", files / "d.npz", "--out", files / "outdir")
    assert r.returncode != 0
    assert f"'{files / 'outdir'}': it is a directory" in r.stderr, r.stderr
    assert os.listdir(files / "outdir") == []


# ----------------------------------------------------------------------- the one writer, Python

def torch_save(path):
    torch = pytest.importorskip("torch")
    with _files.atomic_open(path, "checkpoint") as f:
        torch.save({"w": torch.arange(3)}, f)


def torch_check(path):
    import torch
    assert torch.load(path)["w"].tolist() == [0, 1, 2]


def npz_save(path):
    with _files.atomic_open(path) as f:
        np.savez(f, a=np.arange(5), b=np.ones((2, 3), np.float32))


def npz_check(path):
    with np.load(path) as z:
        assert z["a"].tolist() == [0, 1, 2, 3, 4] and z["b"].shape == (2, 3)


def bytes_save(path):
    _files.write_bytes(path, b"model bytes")


def bytes_check(path):
    with open(path, "rb") as f:
        assert f.read() == b"model bytes"


WRITERS = {"torch.save": (torch_save, torch_check), "np.savez": (npz_save, npz_check),
           "bytes": (bytes_save, bytes_check)}


@pytest.mark.parametrize("writer", WRITERS)
def test_python_writers_follow_the_rule(tmp_path, writer):
    save, check = WRITERS[writer]
    # Regular file: replaced atomically, its permissions kept, no temporary file.
    target = tmp_path / "out.bin"
    target.write_bytes(b"previous")
    os.chmod(target, 0o600)
    save(target)
    check(target)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    # Symbolic link (a chain, and a dangling one): followed, the links stay links.
    (tmp_path / "store").mkdir()
    os.symlink("store/real.bin", tmp_path / "link")
    os.symlink(str(tmp_path / "link"), tmp_path / "chain")
    save(tmp_path / "chain")
    assert os.readlink(tmp_path / "link") == "store/real.bin" and os.path.islink(tmp_path / "chain")
    check(tmp_path / "store" / "real.bin")
    # A device: written through.
    node = null_node(tmp_path)
    save(node)
    assert is_null_device(node)
    # A FIFO: its reader gets the bytes.
    os.mkfifo(tmp_path / "pipe")
    reader = FifoReader(tmp_path / "pipe")
    save(tmp_path / "pipe")
    (tmp_path / "copy.bin").write_bytes(reader.join())
    assert stat.S_ISFIFO(os.lstat(tmp_path / "pipe").st_mode)
    check(tmp_path / "copy.bin")
    # A directory and a socket: refused, naming the path.
    (tmp_path / "dir").mkdir()
    with pytest.raises(OSError, match="it is a directory"):
        save(tmp_path / "dir")
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(tmp_path / "sock"))
    with pytest.raises(ot.ModelFileError, match=f"'{tmp_path / 'sock'}': it is a socket"):
        save(tmp_path / "sock")
    s.close()
    assert sorted(os.listdir(tmp_path)) == ["chain", "copy.bin", "dir", "link", "null", "out.bin", "pipe", "sock",
                                            "store"]
    assert os.listdir(tmp_path / "store") == ["real.bin"]
    save("/dev/null")
    dev_null_intact()


def test_a_failing_python_writer_leaves_the_previous_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.npz"
    target.write_bytes(b"previous")

    def broken(f):
        f.write(b"partial")
        raise RuntimeError("the serializer failed")

    with pytest.raises(RuntimeError, match="serializer failed"):
        with _files.atomic_open(target) as f:
            broken(f)
    assert target.read_bytes() == b"previous" and os.listdir(tmp_path) == ["out.npz"]
    with pytest.raises(OSError, match="No such file or directory"):
        _files.write_bytes(tmp_path / "missing" / "x.bin", b"x")
    assert os.listdir(tmp_path) == ["out.npz"]


# ------------------------------------------------------- the library's writers, end to end

def mlp_model():
    rng = np.random.default_rng(1)
    W = (0.3 * rng.standard_normal((4, 3))).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["X", "W"], ["Y"]), helper.make_node("Sub", ["Y", "label"], ["d"]),
             helper.make_node("Mul", ["d", "d"], ["d2"]), helper.make_node("ReduceMean", ["d2"], ["loss"], keepdims=0)]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4]),
                                       helper.make_tensor_value_info("label", TensorProto.FLOAT, ["N", 3])],
                          [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
                           helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 3])],
                          [numpy_helper.from_array(W, "W")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def session_writers(tmp_path):
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    s = ot.TrainingSession(mlp_model(), p)
    builder = ot.GradientGraphBuilder(mlp_model(), {"loss"}, {"W"}, "loss")
    builder.build()
    return {"save_checkpoint": s.save_checkpoint, "export_model": s.export_model, "GradientGraphBuilder.save": builder.save}


def torch_writers():
    torch = pytest.importorskip("torch")
    from onnxtrain.capi.ort_trainer import IODescription, ModelDescription, ORTTrainer
    from onnxtrain.training.experimental import export_gradient_graph

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    desc = ModelDescription([IODescription("x", ["batch", 4], torch.float32),
                             IODescription("label", ["batch", 3], torch.float32)],
                            [IODescription("loss", [], torch.float32)])
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = ORTTrainer(model, lambda p, y: ((p - y) ** 2).mean(), desc, "SGDOptimizer", None,
                             IODescription("Learning_Rate", [1], torch.float32), torch.device("cpu"))
        trainer.train_step(torch.randn(8, 4), torch.randn(8, 3), torch.tensor([0.1]))

    def gradient_graph(path):
        export_gradient_graph(torch.nn.Linear(4, 3), lambda p, y: ((p - y) ** 2).mean(), torch.randn(2, 4),
                              torch.randn(2, 3), str(path))

    return {"ORTTrainer.save_as_onnx": trainer.save_as_onnx, "export_gradient_graph": gradient_graph}


def test_library_writers_write_through_devices_and_follow_links(tmp_path):
    writers = session_writers(tmp_path)
    writers.update(torch_writers())
    node = null_node(tmp_path)
    (tmp_path / "store").mkdir()
    for name, write in writers.items():
        write(node)
        assert is_null_device(node), f"{name} replaced the device node"
        link = tmp_path / f"{name}.link"
        os.symlink(f"store/{name}.out", link)
        write(str(link))
        assert os.path.islink(link), f"{name} replaced the symbolic link"
        assert os.path.getsize(tmp_path / "store" / f"{name}.out") > 0, name
        with pytest.raises(OSError, match=f"'{tmp_path / 'store'}'.* is a directory"):
            write(str(tmp_path / "store"))
    for name in ("export_model", "GradientGraphBuilder.save", "ORTTrainer.save_as_onnx", "export_gradient_graph"):
        ot.InferenceSession(str(tmp_path / "store" / f"{name}.out"))  # each wrote a whole model
    assert sorted(os.listdir(tmp_path / "store")) == sorted(f"{n}.out" for n in writers)
    for write in writers.values():
        write("/dev/null")
    dev_null_intact()


def test_checkpoint_functions_write_through_links(tmp_path):
    """The torch.save checkpoints (capi save_checkpoint, experimental_save_checkpoint) and
    ORTTrainer.save_checkpoint (npz) land where a link in the checkpoint folder points."""
    torch = pytest.importorskip("torch")
    import onnxtrain.training.checkpoint as ck
    from onnxtrain.capi.ort_trainer import save_checkpoint
    sys_path = os.path.dirname(os.path.abspath(__file__))
    import sys
    sys.path.insert(0, sys_path)
    import test_orttrainer as t
    import test_ort_trainer_legacy as legacy

    (tmp_path / "store").mkdir()
    legacy_trainer, _ = legacy.make_trainer()
    x, y = legacy.batches(1)[0]
    legacy_trainer.train_step(x, y, torch.tensor([0.1]))
    os.symlink("store/legacy.ort.pt", tmp_path / "legacy.ort.pt")
    save_checkpoint(legacy_trainer, str(tmp_path), "legacy")
    assert os.path.islink(tmp_path / "legacy.ort.pt")
    assert "model" in torch.load(tmp_path / "store" / "legacy.ort.pt")

    trainer = t.make_mlp_trainer()
    trainer.train_step(*t.mlp_batches()[0])
    os.symlink("store/exp.ort.pt", tmp_path / "exp.ort.pt")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ck.experimental_save_checkpoint(trainer, str(tmp_path), "exp")
    assert os.path.islink(tmp_path / "exp.ort.pt")
    assert "model" in torch.load(tmp_path / "store" / "exp.ort.pt")

    os.symlink("store/ck.npz", tmp_path / "ck.npz")  # dangling: save_checkpoint creates what it names
    trainer.save_checkpoint(str(tmp_path / "ck.npz"), user_dict={"epoch": 1})
    assert os.path.islink(tmp_path / "ck.npz")
    assert t.make_mlp_trainer(seed=3).load_checkpoint(str(tmp_path / "store" / "ck.npz")) == {"epoch": 1}
    assert sorted(os.listdir(tmp_path / "store")) == ["ck.npz", "exp.ort.pt", "legacy.ort.pt"]
