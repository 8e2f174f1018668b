"""onnxblock's building blocks. A block appends nodes (and initializers, inputs) to the model of
the enclosing ``base`` / ``empty_base`` context when called, and returns the name(s) of what it
computed, so that blocks stack: ``Pow(2.0)(Sub()(x, t))``."""
import copy
from abc import ABC, abstractmethod

import numpy as np
import onnx

from . import _graph_utils
from . import model_accessor as accessor


class Block(ABC):
    """Base class of every block: subclasses implement ``build(*names)``, which appends to
    ``self.base`` (the model being built) and returns the output name(s)."""

    def __init__(self):
        self.base = None

    @abstractmethod
    def build(self, *args, **kwargs):
        """Appends this block's nodes to ``self.base``; returns the output name(s)."""

    def __call__(self, *args, **kwargs):
        self.base = accessor.current().model
        return self.build(*args, **kwargs)


def _node(model, op, inputs, n_outputs=1, domain="", **attrs):
    outputs = [_graph_utils.generate_graph_name(f"{op.lower()}_output") for _ in range(n_outputs)]
    model.graph.node.append(onnx.helper.make_node(op, list(inputs), outputs, name=_graph_utils.generate_graph_name(op),
                                                  domain=domain, **attrs))
    return outputs[0] if n_outputs == 1 else outputs


def _np_dtype(dtype):
    to_np = getattr(onnx.helper, "tensor_dtype_to_np_dtype", None)  # onnx >= 1.13; onnx.mapping before
    return to_np(dtype) if to_np else onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[dtype]


def _constant(model, token, value, dtype=onnx.TensorProto.FLOAT, shape=None):
    """A new initializer holding ``value`` (shape [n], or ``shape``); returns its name."""
    name = _graph_utils.generate_graph_name(token)
    array = np.asarray(value, dtype=_np_dtype(dtype)).reshape(-1)
    model.graph.initializer.append(onnx.helper.make_tensor(name, dtype, [array.size] if shape is None else shape,
                                                           array.tolist()))
    return name


class _BinaryOp(Block):
    def __init__(self, op_name):
        super().__init__()
        self._op_name = op_name

    def build(self, input_name1, input_name2):
        return _node(self.base, self._op_name, [input_name1, input_name2])


class Add(_BinaryOp):
    """input1 + input2."""

    def __init__(self):
        super().__init__("Add")


class Sub(_BinaryOp):
    """input1 - input2."""

    def __init__(self):
        super().__init__("Sub")


class Mul(_BinaryOp):
    """input1 * input2."""

    def __init__(self):
        super().__init__("Mul")


class Div(_BinaryOp):
    """input1 / input2."""

    def __init__(self):
        super().__init__("Div")


class Pow(Block):
    """input ** exponent (a float)."""

    def __init__(self, exponent):
        super().__init__()
        self._exponent = exponent

    def build(self, pow_input_name):
        return _node(self.base, "Pow", [pow_input_name, _constant(self.base, "pow_exponent", [self._exponent])])


class _UnaryOp(Block):
    def __init__(self, op_name, **attrs):
        super().__init__()
        self._op_name = op_name
        self._attrs = attrs

    def build(self, input_name):
        return _node(self.base, self._op_name, [input_name], **self._attrs)


class ReduceMean(_UnaryOp):
    """Mean of every element (a scalar; ``keepdims=True`` keeps the rank)."""

    def __init__(self, keepdims=False):
        super().__init__("ReduceMean", keepdims=int(bool(keepdims)))


class ReduceSum(_UnaryOp):
    """Sum of every element (a scalar; ``keepdims=True`` keeps the rank)."""

    def __init__(self, keepdims=False):
        super().__init__("ReduceSum", keepdims=int(bool(keepdims)))


class Sigmoid(_UnaryOp):
    """1 / (1 + exp(-input))."""

    def __init__(self):
        super().__init__("Sigmoid")


class Log(_UnaryOp):
    """Natural logarithm."""

    def __init__(self):
        super().__init__("Log")


class Neg(_UnaryOp):
    """-input."""

    def __init__(self):
        super().__init__("Neg")


class Abs(_UnaryOp):
    """|input|."""

    def __init__(self):
        super().__init__("Abs")


class Relu(_UnaryOp):
    """max(input, 0)."""

    def __init__(self):
        super().__init__("Relu")


class Identity(_UnaryOp):
    """The input, as a new value."""

    def __init__(self):
        super().__init__("Identity")


class Cast(_UnaryOp):
    """The input converted to element type ``to`` (an onnx.TensorProto data type)."""

    def __init__(self, to):
        super().__init__("Cast", to=int(to))


class LabelEncoder(Block):
    """An ``ai.onnx.ml`` LabelEncoder node: maps the input's keys (``keys_floats`` / ``keys_int64s``
    / ``keys_strings``) to values (``values_floats`` / ``values_int64s`` / ``values_strings``), with
    the defaults ``default_float``, ``default_int64``, ``default_string`` for other keys. Where the
    model imports no ``ai.onnx.ml`` opset, version 2 (the first with these attributes) is added."""

    def __init__(self, default_float=0.0, default_int64=-1, default_string="_Unused", keys_floats=None,
                 keys_int64s=None, keys_strings=None, values_floats=None, values_int64s=None, values_strings=None):
        super().__init__()
        given = {"keys_floats": keys_floats, "keys_int64s": keys_int64s, "keys_strings": keys_strings,
                 "values_floats": values_floats, "values_int64s": values_int64s, "values_strings": values_strings}
        self._attrs = {"default_float": float(default_float), "default_int64": int(default_int64),
                       "default_string": str(default_string)}
        self._attrs.update({k: list(v) for k, v in given.items() if v is not None})

    def build(self, label_encoder_input_name):
        if not any(o.domain == "ai.onnx.ml" for o in self.base.opset_import):
            self.base.opset_import.append(onnx.helper.make_opsetid("ai.onnx.ml", 2))
        return _node(self.base, "LabelEncoder", [label_encoder_input_name], domain="ai.onnx.ml", **self._attrs)


class Constant(Block):
    """A float initializer of shape [1] holding ``value_float``."""

    def __init__(self, value_float):
        super().__init__()
        self._value = value_float

    def build(self):
        return _constant(self.base, "initializer", [self._value])


class SequenceConstruct(Block):
    """A sequence of the inputs."""

    def build(self, *sequence_input_names):
        return _node(self.base, "SequenceConstruct", sequence_input_names)


class Clip(Block):
    """The input clipped to [clip_min, clip_max] (either may be None)."""

    def __init__(self, clip_min=None, clip_max=None):
        super().__init__()
        self._min, self._max = clip_min, clip_max

    def build(self, clip_input_name):
        bounds = ["" if v is None else _constant(self.base, token, [v], shape=[])
                  for token, v in (("clip_min", self._min), ("clip_max", self._max))]
        return _node(self.base, "Clip", [clip_input_name, *bounds])


class Gemm(Block):
    """alpha * A' B' + beta * C (transA, transB as in ONNX)."""

    def __init__(self, alpha=1.0, beta=1.0, transA=0, transB=0):  # noqa: N803 (ONNX's attribute names)
        super().__init__()
        self._attrs = dict(alpha=float(alpha), beta=float(beta), transA=int(transA), transB=int(transB))

    def build(self, a, b, c=""):
        return _node(self.base, "Gemm", [a, b] + ([c] if c else []), **self._attrs)


class Linear(Block):
    """A fully connected layer x W^T + b with new trainable initializers W [out_features,
    in_features] and b [out_features] (PyTorch's initialization: uniform in +-1/sqrt(in_features),
    drawn from ``seed``)."""

    def __init__(self, in_features, out_features, bias=True, alpha=1.0, beta=1.0, seed=0):
        super().__init__()
        self._in, self._out, self._bias = int(in_features), int(out_features), bool(bias)
        self._gemm = Gemm(alpha=alpha, beta=beta, transB=1)
        self._rng = np.random.default_rng(seed)

    def build(self, linear_input_name):
        bound = 1.0 / np.sqrt(self._in)
        weight = _graph_utils.generate_graph_name("linear.weight")
        self.base.graph.initializer.append(onnx.numpy_helper.from_array(
            self._rng.uniform(-bound, bound, (self._out, self._in)).astype(np.float32), weight))
        bias = ""
        if self._bias:
            bias = _graph_utils.generate_graph_name("linear.bias")
            self.base.graph.initializer.append(onnx.numpy_helper.from_array(
                self._rng.uniform(-bound, bound, (self._out,)).astype(np.float32), bias))
        return self._gemm(linear_input_name, weight, bias)


class PassThrough(Block):
    """The inputs, unchanged (no node)."""

    def build(self, *input_names):
        return input_names[0] if len(input_names) == 1 else input_names


class InputLike(Block):
    """A new graph input with the type and shape of the graph input or output ``like``."""

    def __init__(self, like):
        super().__init__()
        self._like = like

    def build(self, input_name=None):
        found = None
        for v in list(self.base.graph.input) + list(self.base.graph.output):
            if v.name == self._like:
                found = v
        if found is None:
            raise LookupError(f"Could not find input or output with name {self._like}")
        clone = copy.deepcopy(found)
        clone.name = input_name or _graph_utils.generate_graph_name("user_input")
        self.base.graph.input.append(clone)
        return clone.name
