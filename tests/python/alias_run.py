"""Running a script under ``python3 -m onnxtrain.ort_alias`` in a fresh interpreter, as unchanged
onnxruntime user code runs: the helpers the alias tests of every surface share."""
import os
import subprocess
import sys
import textwrap

import onnxtrain


def alias_env(*extra_paths):
    """This process's environment with PYTHONPATH = ``extra_paths``, onnxtrain's, the inherited."""
    env = dict(os.environ)
    paths = [str(p) for p in extra_paths] + [os.path.dirname(os.path.dirname(onnxtrain.__file__))]
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def write_script(path, source):
    """Writes ``source`` (dedented) to ``path``, making its folder; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def run_alias(*args, cwd=None, env=None, timeout=300, **kwargs):
    """``python3 -m onnxtrain.ort_alias ARGS`` (a script and its arguments) in ``cwd`` (stdout and
    stderr captured as text)."""
    return subprocess.run([sys.executable, "-m", "onnxtrain.ort_alias", *map(str, args)], cwd=cwd,
                          env=env or alias_env(), capture_output=True, text=True, timeout=timeout, **kwargs)
