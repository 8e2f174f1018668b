"""Export side of ORTModule: the call signature, the flat wrapper module, torch.onnx.export and the
post-processing of the exported graph (parameters fed as inputs, BatchNorm running statistics).

Absolute imports only: ``import torch`` here must be PyTorch, not this package.
"""
import inspect
import io
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
    constants). ``tensors``: the call's tensors in that order."""

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
            key.append((name, value.dtype, tuple(value.shape)))  # requires_grad picks the runner, not the export
            return ("tensor", len(self.tensors) - 1)
        if isinstance(value, _CONSTANT_TYPES):
            key.append((name, type(value).__name__, value))
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

    def __init__(self, module, mean_output, var_output, mean_input, var_input, count):
        self.module = module            # the torch BatchNorm module
        self.mean_output = mean_output  # graph output: batch mean
        self.var_output = var_output    # graph output: biased batch variance
        self.mean_input = mean_input    # initializer names fed with zeros in training graphs
        self.var_input = var_input
        self.count = count              # elements per channel (for the unbiased variance)

    def update(self, mean, var):
        """Applies PyTorch's running-statistics update with the batch's mean and biased variance."""
        m = self.module
        with torch.no_grad():
            if m.num_batches_tracked is not None:
                m.num_batches_tracked.add_(1)
            momentum = m.momentum
            if momentum is None:  # cumulative moving average
                momentum = 1.0 / float(m.num_batches_tracked)
            unbiased = var * (self.count / max(self.count - 1, 1))
            m.running_mean.mul_(1 - momentum).add_(mean, alpha=momentum)
            m.running_var.mul_(1 - momentum).add_(unbiased, alpha=momentum)


class ExportedGraph:
    """One export of the wrapped module for one input signature and training mode.

    ``model``: the ONNX model (initializers = module parameters and buffers, plus the BatchNorm
    batch statistics as extra outputs after the module's outputs); ``input_names``: graph inputs (the
    call's tensors that the graph reads, in call order) with ``input_index`` their positions among
    the call's tensors; ``init_names`` with ``init_refs`` ((owner module, attribute) of each);
    ``output_names`` (module outputs) and ``structure``; ``bn_stats``."""

    def __init__(self, module, spec, opset_version):
        self.training = training = module.training
        wrapper = _FlatModule(module, spec)
        buffers = {n: b.detach().clone() for n, b in module.named_buffers()}
        f = io.BytesIO()
        names = spec.names
        try:
            # The export runs the module once: keep the user's random stream and buffers as they were.
            with torch.random.fork_rng(devices=[]), warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                torch.onnx.export(wrapper, tuple(t.detach() for t in spec.tensors), f, input_names=names,
                                  opset_version=opset_version, do_constant_folding=False,
                                  # PRESERVE: the module's own mode, and (unlike EVAL) no Conv+BatchNorm
                                  # fusion folding parameters into constants in eval mode.
                                  training=torch.onnx.TrainingMode.PRESERVE,
                                  export_params=True, keep_initializers_as_inputs=False)
        except ORTModuleExportError:
            raise
        except Exception as e:
            raise ORTModuleExportError(f"ORTModule: torch.onnx.export failed on {type(module).__qualname__}: "
                                       f"{type(e).__name__}: {e}") from e
        finally:
            with torch.no_grad():
                for n, b in module.named_buffers():
                    if n in buffers:
                        b.copy_(buffers[n])
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
            shape = shapes.get(n.input[0])
            if not shape or any(d <= 0 for d in shape):
                raise ORTModuleExportError(f"ORTModule: the input shape of BatchNormalization '{n.name}' is unknown")
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
                graph.output.append(onnx.helper.make_tensor_value_info(outs[j], elem, [shape[1]]))
            stats.append(BatchNormStat(sub, outs[1], outs[2], n.input[3], n.input[4],
                                       int(np.prod(shape)) // shape[1]))
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
