"""Checkpoints and saved models under faults.

- kill -9 at random moments of a process saving checkpoints (scripts/checkpoint_faults.py, 20
  trials here; scripts/checkpoint_faults.sh runs 1000): the checkpoint at the path always loads and
  is the last completed save or the one in flight, and leftover temporary files do not break the
  next writer.
- A full disk: writes failing with EFBIG (RLIMIT_FSIZE lowered, SIGXFSZ ignored) and, where a
  private tmpfs can be mounted (unshare), with ENOSPC. Saving a checkpoint, exporting a model
  (TrainingSession.export_model(path), GradientGraphBuilder.save, optimized_model_filepath) must
  raise an OSError-like error naming the cause, keep the previous file byte for byte (and loadable),
  and leave no temporary file behind.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import checkpoint_faults  # noqa: E402


def test_kill_9_while_saving_checkpoints(tmp_path, capsys):
    rc = checkpoint_faults.main(["20", "--seed", "7", "--hidden", "600", "--max-delay", "0.15",
                                 "--dir", str(tmp_path)])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "trials 20," in out.out and "failures 0 " in out.out
    # Leftover temporary files of the killed writers were removed after their next trial.
    assert sorted(os.listdir(tmp_path)) == ["model.ckpt", "writer.log"]


# The child: saves a first version of every file normally, then a second one with writes failing,
# and reports what it saw as JSON. argv: folder, mode ("fsize" or "enospc").
CHILD = r"""
import hashlib, json, os, resource, signal, sys
import numpy as np
sys.path.insert(0, sys.argv[3])
import onnxtrain as ot
from test_training import data, feed, mlp

folder, mode = sys.argv[1], sys.argv[2]
m = ot.add_loss_output(mlp(hidden=256))
p = ot.TrainingParameters()
p.loss_output_name = "loss"
s = ot.TrainingSession(m.SerializeToString(), p)
X, Y = data()
ck, onnx_path, grad_path, opt_path = (os.path.join(folder, n) for n in ("m.ckpt", "m.onnx", "g.onnx", "opt.onnx"))
builder = ot.GradientGraphBuilder(mlp(hidden=256).SerializeToString(), {"Y"}, {"W1"}, "Y")
builder.build()

def save_all():
    s.save_checkpoint(ck, {"version": str(s._sess.step())})
    s.export_model(onnx_path)
    builder.save(grad_path)
    so = ot.SessionOptions()
    so.optimized_model_filepath = opt_path
    ot.InferenceSession(mlp(hidden=256).SerializeToString(), so)

s.run(["loss"], feed(X, Y))
save_all()
digest = lambda f: hashlib.sha256(open(f, "rb").read()).hexdigest()
files = {f: digest(f) for f in (ck, onnx_path, grad_path, opt_path)}
s.run(["loss"], feed(X, Y))
if mode == "fsize":
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
else:  # fill the file system
    with open(os.path.join(folder, "filler"), "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError:
            pass
errors = {}
for name, f in [("save_checkpoint", lambda: s.save_checkpoint(ck, {"version": "2"})),
                ("export_model", lambda: s.export_model(onnx_path)),
                ("GradientGraphBuilder.save", lambda: builder.save(grad_path)),
                ("optimized_model_filepath", lambda: ot.InferenceSession(
                    mlp(hidden=256).SerializeToString(), so_opt))]:
    if name == "optimized_model_filepath":
        so_opt = ot.SessionOptions()
        so_opt.optimized_model_filepath = opt_path
    try:
        f()
        errors[name] = None
    except Exception as e:
        errors[name] = [type(e).__name__, isinstance(e, OSError), str(e)]
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
if mode != "fsize":
    os.unlink(os.path.join(folder, "filler"))
kept = {os.path.basename(f): digest(f) == h for f, h in files.items()}
other = ot.TrainingSession(m.SerializeToString(), p)
meta = other.load_checkpoint(ck)
ot.InferenceSession(onnx_path)
ot.InferenceSession(grad_path)
print(json.dumps({"errors": errors, "kept": kept, "loaded_version": meta["version"],
                  "files": sorted(os.listdir(folder))}))
"""


def _run_child(folder, mode, wrap=()):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([*wrap, sys.executable, "-c", CHILD, str(folder), mode, HERE], capture_output=True, text=True,
                       env=env, timeout=120)
    return r


def _check(result, cause):
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    for name, err in seen["errors"].items():
        assert err is not None, f"{name}: the write did not fail"
        cls, is_oserror, text = err
        assert is_oserror and cls == "ModelFileError", (name, err)
        assert cause in text, (name, text)
    assert all(seen["kept"].values()), seen["kept"]  # the previous files, byte for byte
    assert seen["loaded_version"] == "1"
    assert seen["files"] == ["g.onnx", "m.ckpt", "m.onnx", "opt.onnx"]  # no temporary file left


def test_full_disk_file_size_limit(tmp_path):
    _check(_run_child(tmp_path, "fsize"), "File too large")


def test_full_disk_tmpfs(tmp_path):
    unshare = shutil.which("unshare")
    if not unshare:
        pytest.skip("unshare is not available")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    probe = subprocess.run([unshare, "-rm", "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a private tmpfs: {probe.stderr.strip()}")
    # The mount lives in the child's own mount namespace: it vanishes with the child.
    script = f'mount -t tmpfs -o size=1m tmpfs "{mnt}" && exec "$@"'
    _check(_run_child(mnt, "enospc", wrap=(unshare, "-rm", "sh", "-c", script, "sh")), "No space left on device")
