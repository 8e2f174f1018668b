"""Export side of ORTModule: the call signature, the flat wrapper module, torch.onnx.export and the
post-processing of the exported graph (parameters fed as inputs, BatchNorm running statistics).

Absolute imports only: ``import torch`` here must be PyTorch, not this package.
"""
import contextlib
import inspect
import io
import os
import warnings

import numpy as np
import onnx
import onnx.numpy_helper
import torch

# Constant (non-tensor) inputs: baked into the exported graph and part of the cache key.
_CONSTANT_TYPES = (bool, int, float, str, type(None))
_SUPPORTED_DTYPES = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
                     torch.int32, torch.int64, torch.uint8, torch.bool}


class ORTModuleExportError(RuntimeError):
    """The wrapped module could not be exported to ONNX (or its graph not differentiated)."""


class InputSpec:
    """How one call's arguments map to the flat list of tensors the exported graph takes.

    ``names``: one name per tensor (the forward parameter's name; ``<name>_<i>`` for the items of
    ``*args``; the keyword for ``**kwargs``). ``key``: hashable signature (names, dtypes, shapes,
    constants). ``tensors``: the call's tensors in that order. ``batch``: the first dimension of
    the first tensor of one or more dimensions (None without one); ``dynamic[i]``: tensor i has
    that first dimension (its first axis is exported as the dynamic axis ``batch``);
    ``batch_key``: the signature with those first dimensions left out."""

    def __init__(self, signature, args, kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"ORTModule: the arguments do not match the wrapped module's forward{signature}: {e}") \
                from None
        positional = [p for p in signature.parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        var_name = next((p.name for p in signature.parameters.values() if p.kind == p.VAR_POSITIONAL), "args")
        self.names, self.tensors, key = [], [], []
        self._args = [self._slot(positional[i].name if i < len(positional) else f"{var_name}_{i - len(positional)}",
                                 v, key) for i, v in enumerate(bound.args)]
        self._kwargs = {k: self._slot(k, v, key) for k, v in bound.kwargs.items()}
        self.key = tuple(key)
        self.batch = next((t.shape[0] for t in self.tensors if t.dim() >= 1), None)

    @property
    def dynamic(self):
        return [t.dim() >= 1 and t.shape[0] == self.batch for t in self.tensors]

    @property
    def batch_key(self):
        dyn = {n for n, d in zip(self.names, self.dynamic) if d}
        return tuple(e[:3] + (("batch",) + e[3][1:],) if e[0] == "tensor" and e[1] in dyn else e for e in self.key)

    def _slot(self, name, value, key):
        if isinstance(value, torch.Tensor):
            if value.layout != torch.strided:
                raise TypeError(f"ORTModule: input '{name}' is a {value.layout} tensor; only dense tensors are "
                                "supported")
            if value.device.type != "cpu":
                raise TypeError(f"ORTModule: input '{name}' is on device '{value.device}'; onnxtrain runs on the "
                                "CPU only")
            if value.dtype not in _SUPPORTED_DTYPES:
                raise TypeError(f"ORTModule: input '{name}' has dtype {value.dtype}, which onnxtrain does not support")
            self.names.append(name)
            self.tensors.append(value)
            key.append(("tensor", name, value.dtype, tuple(value.shape)))  # requires_grad picks the runner only
            return ("tensor", len(self.tensors) - 1)
        if isinstance(value, _CONSTANT_TYPES):
            key.append(("const", name, type(value).__name__, value))
            return ("const", value)
        raise TypeError(f"ORTModule: input '{name}' is a {type(value).__module__}.{type(value).__qualname__}; "
                        "supported inputs are torch.Tensor and constant Python scalars (bool, int, float, str, None)")

    def call_arguments(self, tensors):
        """(args, kwargs) of the original call with `tensors` in the tensor slots."""
        def fill(slot):
            return tensors[slot[1]] if slot[0] == "tensor" else slot[1]
        return [fill(s) for s in self._args], {k: fill(s) for k, s in self._kwargs.items()}


def flatten_outputs(out, path="output"):
    """(flat list of tensors, structure to rebuild the module's output from them)."""
    if isinstance(out, torch.Tensor):
        return [out], None
    if isinstance(out, (tuple, list)) and not hasattr(out, "_fields"):
        flat, structure = [], []
        for i, o in enumerate(out):
            f, s = flatten_outputs(o, f"{path}[{i}]")
            structure.append((len(flat), len(f), s))
            flat += f
        return flat, (type(out), structure)
    if isinstance(out, dict):
        flat, structure = [], []
        for k, o in out.items():
            f, s = flatten_outputs(o, f"{path}[{k!r}]")
            structure.append((k, len(flat), len(f), s))
            flat += f
        return flat, (dict, structure)
    raise ORTModuleExportError(f"ORTModule: {path} of the wrapped module is a {type(out).__qualname__}; outputs must "
                               "be tensors or tuples, lists or dicts of tensors")


def unflatten_outputs(flat, structure):
    """Inverse of flatten_outputs."""
    if structure is None:
        return flat[0]
    kind, items = structure
    if kind is dict:
        return {k: unflatten_outputs(flat[s:s + n], sub) for k, s, n, sub in items}
    return kind(unflatten_outputs(flat[s:s + n], sub) for s, n, sub in items)


class _FlatModule(torch.nn.Module):
    """Takes the call's tensors positionally, returns the module's outputs as a flat tuple."""

    def __init__(self, module, spec):
        super().__init__()
        self.m = module
        self.spec = spec
        self.structure = None

    def forward(self, *tensors):
        args, kwargs = self.spec.call_arguments(tensors)
        flat, self.structure = flatten_outputs(self.m(*args, **kwargs))
        return tuple(flat)


class BatchNormStat:
    """A training-mode BatchNormalization node whose batch statistics come out of the graph so
    that ORTModule updates the module's running_mean / running_var as PyTorch does."""

    def __init__(self, module, mean_output, var_output, mean_input, var_input, count, size_output=None):
        self.module = module            # the torch BatchNorm module
        self.mean_output = mean_output  # graph output: batch mean
        self.var_output = var_output    # graph output: biased batch variance
        self.mean_input = mean_input    # initializer names fed with zeros in training graphs
        self.var_input = var_input
        self.count = count              # elements per channel (for the unbiased variance), or None:
        self.size_output = size_output  # then the graph output holding the element count of the input

    def outputs(self):
        """The graph outputs this node adds, in order."""
        return [self.mean_output, self.var_output] + ([self.size_output] if self.size_output else [])

    def update(self, mean, var, size=None):
        """Applies PyTorch's running-statistics update with the batch's mean and biased variance
        (``size``: the input's element count, when the graph's shapes are dynamic)."""
        m = self.module
        with torch.no_grad():
            if m.num_batches_tracked is not None:
                m.num_batches_tracked.add_(1)
            momentum = m.momentum
            if momentum is None:  # cumulative moving average
                momentum = 1.0 / float(m.num_batches_tracked)
            count = self.count if self.count is not None else int(size) // max(mean.numel(), 1)
            unbiased = var * (count / max(count - 1, 1))
            m.running_mean.mul_(1 - momentum).add_(mean, alpha=momentum)
            m.running_var.mul_(1 - momentum).add_(unbiased, alpha=momentum)


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
# Operators whose outputs are random in a training-mode graph: such a graph cannot be compared with
# PyTorch's outputs value by value (different random streams).
_RANDOM_OPS = {"Dropout", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli",
               "Multinomial"}


def _user_tracer_warning(w):
    """A TracerWarning raised from outside PyTorch's own code (torch ignores its library's ones by
    default: ``TracerWarning.ignore_lib_warnings``): the user's Python saw a traced value."""
    if not issubclass(w.category, torch.jit.TracerWarning):
        return False
    f = os.path.abspath(w.filename or "")
    return not f.startswith(_TORCH_DIR) or f.startswith(os.path.join(_TORCH_DIR, "jit") + os.sep)


@contextlib.contextmanager
def quiet_run(module, record=None):
    """Runs the wrapped module outside training: no grad, PyTorch's random state and the module's
    buffers restored afterwards, warnings not shown (the TracerWarnings raised outside PyTorch
    appended to ``record`` when given)."""
    buffers = {n: b.detach().clone() for n, b in module.named_buffers()}
    try:
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings(record=True) as caught, torch.no_grad():
            warnings.simplefilter("always")
            yield
        if record is not None:
            record.extend(w for w in caught if _user_tracer_warning(w))
    finally:
        with torch.no_grad():
            for n, b in module.named_buffers():
                if n in buffers:
                    b.copy_(buffers[n])


class ExportedGraph:
    """One export of the wrapped module for one input signature and training mode.

    ``model``: the ONNX model (initializers = module parameters and buffers, plus the BatchNorm
    batch statistics as extra outputs after the module's outputs); ``input_names``: graph inputs (the
    call's tensors that the graph reads, in call order) with ``input_index`` their positions among
    the call's tensors; ``init_names`` with ``init_refs`` ((owner module, attribute) of each);
    ``output_names`` (module outputs) and ``structure``; ``bn_stats``. With ``dynamic``, the first
    axis of the tensors of ``spec.dynamic`` is exported as the dynamic axis ``batch``.
    ``tracer_warnings``: the TracerWarnings the export raised outside PyTorch's own code (the user's
    Python read a traced value: the graph holds the value of this call). ``random``: the graph has
    random operators (Dropout in training mode)."""

    def __init__(self, module, spec, opset_version, dynamic=False):
        self.training = training = module.training
        self.dynamic = dynamic
        self.batch = spec.batch
        wrapper = _FlatModule(module, spec)
        f = io.BytesIO()
        names = spec.names
        axes = {n: {0: "batch"} for n, d in zip(names, spec.dynamic) if d} if dynamic else None
        self.tracer_warnings = []
        try:
            # The export runs the module once: keep the user's random stream and buffers as they were.
            with quiet_run(module, self.tracer_warnings):
                torch.onnx.export(wrapper, tuple(t.detach() for t in spec.tensors), f, input_names=names,
                                  dynamic_axes=axes, opset_version=opset_version, do_constant_folding=False,
                                  # PRESERVE: the module's own mode, and (unlike EVAL) no Conv+BatchNorm
                                  # fusion folding parameters into constants in eval mode.
                                  training=torch.onnx.TrainingMode.PRESERVE,
                                  export_params=True, keep_initializers_as_inputs=False)
        except ORTModuleExportError:
            raise
        except Exception as e:
            raise ORTModuleExportError(f"ORTModule: torch.onnx.export failed on {type(module).__qualname__}: "
                                       f"{type(e).__name__}: {e}") from e
        self.structure = wrapper.structure
        model = onnx.load_model_from_string(f.getvalue())
        graph = model.graph
        graph_inputs = [i.name for i in graph.input]
        self.input_names = [n for n in names if n in graph_inputs]
        self.input_index = [names.index(n) for n in self.input_names]
        self.output_names = [o.name for o in graph.output]
        if set(self.output_names) & set(graph_inputs):
            raise ORTModuleExportError("ORTModule: the wrapped module returns one of its inputs unchanged; "
                                       "return a computed tensor (e.g. x.clone())")
        self._map_initializers(module, graph)
        self.bn_stats = self._batchnorm_stats(model, module) if training else []
        self.random = any(n.op_type in _RANDOM_OPS and (training or n.op_type != "Dropout") for n in graph.node)
        self.model = model

    def _map_initializers(self, module, graph):
        """init_names / init_refs / init_is_param; refuses parameters exported as constants."""
        owners = {}
        for prefix, sub in module.named_modules():
            for attr, p in list(sub._parameters.items()) + list(sub._buffers.items()):
                if p is not None:
                    owners.setdefault(f"m.{prefix}.{attr}" if prefix else f"m.{attr}", (sub, attr))
        self.init_names, self.init_refs, self.init_is_param = [], [], []
        unmapped = []
        for init in graph.initializer:
            ref = owners.get(init.name)
            if ref is None:
                unmapped.append(init)
                continue
            self.init_names.append(init.name)
            self.init_refs.append(ref)
            self.init_is_param.append(ref[1] in ref[0]._parameters)
        # A parameter folded into a renamed constant would silently never be trained.
        by_shape = {}
        for name, p in module.named_parameters():
            by_shape.setdefault(tuple(p.shape), []).append((name, p))
        for init in unmapped:
            if init.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
                continue
            for name, p in by_shape.get(tuple(init.dims), []):
                value = onnx.numpy_helper.to_array(init)
                if p.requires_grad and np.array_equal(value, p.detach().numpy()):
                    raise ORTModuleExportError(f"ORTModule: parameter '{name}' was exported as the constant "
                                               f"'{init.name}' and could not be trained")

    def _batchnorm_stats(self, model, module):
        """Training-mode BatchNormalization nodes reading module buffers: momentum set to 0 so that
        outputs 1 and 2 are the batch's mean and biased variance, added as graph outputs."""
        graph = model.graph
        inits = dict(zip(self.init_names, self.init_refs))
        nodes = [n for n in graph.node if n.op_type == "BatchNormalization" and n.domain in ("", "ai.onnx")
                 and any(a.name == "training_mode" and a.i == 1 for a in n.attribute)]
        if not nodes:
            return []
        inferred = onnx.shape_inference.infer_shapes(model)
        shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
                  for v in list(inferred.graph.value_info) + list(inferred.graph.input)}
        stats = []
        for k, n in enumerate(nodes):
            if len(n.input) < 5 or n.input[3] not in inits or n.input[4] not in inits:
                continue
            sub = inits[n.input[3]][0]
            if not isinstance(sub, torch.nn.modules.batchnorm._BatchNorm):
                continue
            shape = shapes.get(n.input[0]) or [0]  # unknown: counted at run time, as a dynamic shape is
            channels = next(list(i.dims) for i in graph.initializer if i.name == n.input[3])
            outs = list(n.output) + [""] * (3 - len(n.output))
            for j in (1, 2):
                if not outs[j]:
                    outs[j] = f"__ortmodule_bn{k}_stat{j}"
            del n.output[:]
            n.output.extend(outs[:3])
            for a in n.attribute:
                if a.name == "momentum":
                    a.f = 0.0
            if not any(a.name == "momentum" for a in n.attribute):
                n.attribute.append(onnx.helper.make_attribute("momentum", 0.0))
            elem = next(i.data_type for i in graph.initializer if i.name == n.input[3])
            for j in (1, 2):
                graph.output.append(onnx.helper.make_tensor_value_info(outs[j], elem, channels))
            if len(shape) >= 2 and all(d > 0 for d in shape):
                stats.append(BatchNormStat(sub, outs[1], outs[2], n.input[3], n.input[4],
                                           int(np.prod(shape)) // shape[1]))
                continue
            # A dynamic (batch) dimension: the element count comes out of the graph with each run.
            size = f"__ortmodule_bn{k}_size"
            graph.node.append(onnx.helper.make_node("Size", [n.input[0]], [size], name=f"__ortmodule_bn{k}_size"))
            graph.output.append(onnx.helper.make_tensor_value_info(size, onnx.TensorProto.INT64, []))
            stats.append(BatchNormStat(sub, outs[1], outs[2], n.input[3], n.input[4], None, size))
        return stats


def inference_model(model, init_names):
    """The exported model with `init_names` moved from initializers to graph inputs (bytes)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep, moved = [], []
    for init in m.graph.initializer:
        (moved if init.name in init_names else keep).append(init)
    order = {n: i for i, n in enumerate(init_names)}
    moved.sort(key=lambda t: order[t.name])
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    for init in moved:
        m.graph.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    return m.SerializeToString()


def forward_signature(module):
    """inspect.Signature of module.forward."""
    return inspect.signature(module.forward)
