"""Shared pieces of onnxtrain.sklearn: OrtValue and device helpers, small ONNX graphs run by
InferenceSession, the scikit-learn parameter protocol, a text progress bar."""
import copy
import inspect
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..capi import onnxruntime_pybind11_state as C
from ..capi._values import _c_device
from ..capi.onnxruntime_inference_collection import InferenceSession

# Opset of the helper graphs (losses, penalties, weight updates).
OPSET = 15


def check_device(device):
    """Returns the device name; only 'cpu' exists in onnxtrain (anything else is an error naming it)."""
    if isinstance(device, str) and device.lower() == "cpu":
        return "cpu"
    if isinstance(device, C.OrtDevice) and device.device_type() == C.OrtDevice.cpu():
        return "cpu"
    raise ValueError(f"device={device!r} is not supported: onnxtrain trains on 'cpu' only")


_CPU = None


def cpu_device():
    """The C OrtDevice of the CPU."""
    global _CPU
    if _CPU is None:
        _CPU = _c_device("cpu", 0)
    return _CPU


def to_ortvalue(array):
    """A C OrtValue over a numpy array (shares its memory when C-contiguous: keep the array alive)."""
    return C.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), cpu_device())


def as_numpy(value):
    """A numpy array from a numpy array, an OrtValue (C or Python) or a scalar."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "numpy"):
        return value.numpy()
    return np.asarray(value)


def is_ortvalue(value):
    return isinstance(value, C.OrtValue) or hasattr(value, "_get_c_value")


def c_ortvalue(value):
    """A C OrtValue from a numpy array, a Python OrtValue or a C OrtValue."""
    if isinstance(value, C.OrtValue):
        return value
    if hasattr(value, "_get_c_value"):
        return value._get_c_value()
    if isinstance(value, np.ndarray):
        return to_ortvalue(value)
    raise TypeError(f"expected a numpy array or an OrtValue, got {type(value).__name__}")


# ------------------------------------------------------------------------------------------------
# Small ONNX graphs.

class GraphWriter:
    """Builds a small float32 ONNX graph node by node (names generated)."""

    def __init__(self):
        self.nodes, self.inits, self.inputs, self.outputs = [], [], [], []
        self._n = 0

    def name(self, prefix="t"):
        self._n += 1
        return f"{prefix}{self._n}"

    def input(self, name, elem=TensorProto.FLOAT, shape=None):
        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    def const(self, value, dtype=np.float32):
        n = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), n))
        return n

    def op(self, op_type, inputs, output=None, **attrs):
        out = output or self.name()
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def output(self, name, elem=TensorProto.FLOAT, shape=None):
        self.outputs.append(helper.make_tensor_value_info(name, elem, shape))

    def model(self, graph_name):
        g = helper.make_graph(self.nodes, graph_name, self.inputs, self.outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="onnxtrain.sklearn")
        m.ir_version = 8
        return m

    def reduce_sum(self, x, output=None):
        """Sum of every element, as a scalar."""
        return self.op("ReduceSum", [x], output, keepdims=0)


class OnnxFunction:
    """An ONNX graph and the InferenceSession running it on OrtValues (C-level, no numpy round
    trip). Pickles as its graph: the session is rebuilt on load."""

    def __init__(self, model):
        self.model = model
        self._build()

    def _build(self):
        self.sess = InferenceSession(self.model.SerializeToString())._sess
        self.input_names = [i.name for i in self.model.graph.input]
        self.output_names = [o.name for o in self.model.graph.output]

    def __getstate__(self):
        return {"model": self.model.SerializeToString()}

    def __setstate__(self, state):
        self.model = onnx.load_from_string(state["model"])
        self._build()

    def __call__(self, *inputs, outputs=None):
        """Runs the graph on positional OrtValues/arrays (in the graph's input order); returns C
        OrtValues."""
        feeds = {n: c_ortvalue(v) for n, v in zip(self.input_names, inputs) if v is not None}
        return list(self.sess.run_with_ort_values(feeds, outputs or self.output_names, None))


# ------------------------------------------------------------------------------------------------
# scikit-learn's parameter protocol, without requiring scikit-learn.

class ParamsMixin:
    """``get_params`` / ``set_params`` / ``__repr__`` from the constructor's signature, the way
    scikit-learn's BaseEstimator does them: every constructor argument is stored unchanged under
    its own name."""

    @classmethod
    def _get_param_names(cls):
        sig = inspect.signature(cls.__init__)
        return sorted(p.name for p in sig.parameters.values() if p.name != "self" and p.kind != p.VAR_KEYWORD)

    def get_params(self, deep=True):
        """Constructor parameters (with ``deep``, those of nested parameter objects as
        ``name__sub``)."""
        out = {}
        for name in self._get_param_names():
            value = getattr(self, name)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                for k, v in value.get_params(deep=True).items():
                    out[f"{name}__{k}"] = v
            out[name] = value
        return out

    def set_params(self, **params):
        """Sets constructor parameters (``name__sub`` reaches a nested object's parameter);
        unknown names raise ValueError."""
        valid = self._get_param_names()
        nested = {}
        for key, value in params.items():
            name, _, sub = key.partition("__")
            if name not in valid:
                raise ValueError(f"Invalid parameter {name!r} for {type(self).__name__}; valid parameters: {valid}")
            if sub:
                nested.setdefault(name, {})[sub] = value
            else:
                setattr(self, name, self._normalize_param(name, value))
        for name, sub in nested.items():
            getattr(self, name).set_params(**sub)
        return self

    def _normalize_param(self, name, value):
        return value

    def __repr__(self):
        parts = []
        sig = inspect.signature(type(self).__init__).parameters
        for name in self._get_param_names():
            value = getattr(self, name, None)
            default = sig[name].default
            if isinstance(value, onnx.ModelProto):
                parts.append(f"{name}=<ModelProto>")
                continue
            try:
                same = value is default or (not isinstance(value, np.ndarray) and value == default)
            except Exception:  # noqa: BLE001 (objects without a usable ==)
                same = False
            if not same:
                parts.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def __deepcopy__(self, memo):
        cls = type(self)
        obj = cls.__new__(cls)
        memo[id(self)] = obj
        obj.__setstate__(copy.deepcopy(self.__getstate__(), memo))
        return obj

    def __getstate__(self):
        return dict(self.__dict__)

    def __setstate__(self, state):
        self.__dict__.update(state)


def param_names(obj):
    return obj._get_param_names()


class ProgressBar:
    """A one-line text progress bar on stderr (tqdm's role in onnxcustom): ``update(i, text)``."""

    def __init__(self, total, width=30, stream=None, prefix=""):
        self.total, self.width, self.prefix = max(int(total), 1), width, prefix
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()

    def update(self, done, text=""):
        frac = min(done / self.total, 1.0)
        filled = int(round(frac * self.width))
        elapsed = time.perf_counter() - self.start
        eta = elapsed / done * (self.total - done) if done else float("nan")
        self.stream.write(f"\r{self.prefix}[{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total} "
                          f"{elapsed:.1f}s eta {eta:.1f}s {text}  ")
        self.stream.flush()

    def close(self):
        self.stream.write("\n")
        self.stream.flush()
