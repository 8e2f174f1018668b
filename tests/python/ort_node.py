"""onnxruntime-node (npm) as an independent reference for the Python tests: runs a model on tensor
inputs and returns its tensor outputs. `available()` says whether Node and the package are here;
tests that use it skip with the reason otherwise. The package is found through ONNXTRAIN_ORT_NODE
(its folder), else .npm/node_modules/onnxruntime-node of this checkout or of /work/main."""
import json
import os
import shutil
import subprocess
import tempfile

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
_DTYPES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64", np.dtype(np.int64): "int64",
           np.dtype(np.int32): "int32"}
_BACK = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32, "string": object}


def package():
    """The onnxruntime-node folder, or None."""
    candidates = [os.environ.get("ONNXTRAIN_ORT_NODE"),
                  os.path.join(_HERE, "..", "..", ".npm", "node_modules", "onnxruntime-node"),
                  "/work/main/.npm/node_modules/onnxruntime-node"]
    for c in candidates:
        if c and os.path.isfile(os.path.join(c, "package.json")):
            return os.path.abspath(c)
    return None


def unavailable_reason():
    """Why onnxruntime-node cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return "node (Node.js) is not installed"
    if package() is None:
        return "onnxruntime-node is not installed (scripts/install_onnxruntime_node.sh)"
    return None


def run(model_bytes, inputs):
    """Runs the serialized model with onnxruntime-node: {name: array} -> ({name: array}, error or None)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        with open(path, "wb") as f:
            f.write(model_bytes)
        feeds = {}
        for name, a in inputs.items():
            a = np.asarray(a)
            dtype = "string" if a.dtype == object or a.dtype.kind == "U" else _DTYPES[a.dtype]
            data = [str(v) for v in a.ravel()] if dtype == "string" else \
                [None if isinstance(v, float) and np.isnan(v) else v for v in a.ravel().tolist()]
            feeds[name] = {"dtype": dtype, "shape": list(a.shape), "data": data}
        job = os.path.join(d, "job.json")
        with open(job, "w") as f:
            json.dump({"package": package(), "model": path, "inputs": feeds}, f)
        out = subprocess.run(["node", os.path.join(_HERE, "ort_node_eval.js"), job], capture_output=True, text=True,
                             timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"onnxruntime-node runner failed: {out.stderr[-2000:]}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
    outputs = {}
    for name, o in result.get("outputs", {}).items():
        data = [np.nan if v is None else v for v in o["data"]]
        outputs[name] = np.array(data, dtype=_BACK.get(o["type"], object)).reshape(o["dims"])
    return outputs, result.get("error")
