"""ORTModule: a torch.nn.Module running the wrapped module's forward and backward in onnxtrain.

Absolute imports only: ``import torch`` here must be PyTorch, not this package.
"""
import os

import torch
import torch.utils.dlpack

from onnxtrain.capi import _pybind_state as C
from onnxtrain.capi._values import _c_device
from onnxtrain.capi.onnxruntime_inference_collection import InferenceSession
from onnxtrain.torch._export import (ExportedGraph, InputSpec, ORTModuleExportError, forward_signature,
                                     inference_model, unflatten_outputs)

_FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


class DebugOptions:
    """ORTModule debugging: ``save_onnx=True`` writes each exported model and its gradient model
    as ``<onnx_prefix>_<n>_exported.onnx`` / ``_training.onnx`` / ``_inference.onnx``."""

    def __init__(self, save_onnx=False, onnx_prefix="ortmodule"):
        self.save_onnx = bool(save_onnx)
        self.onnx_prefix = str(onnx_prefix)


def _push(vector, t):
    """Appends a torch tensor to an OrtValueVector through DLPack, sharing its memory."""
    if not t.is_contiguous():
        t = t.contiguous()
    if t.dtype == torch.bool:
        vector.push_back(torch.utils.dlpack.to_dlpack(t.view(torch.uint8)), True)
    else:
        vector.push_back(torch.utils.dlpack.to_dlpack(t), False)


def _to_torch(vector):
    """The values of an OrtValueVector as torch tensors sharing their memory."""
    out = vector.to_dlpacks(torch.utils.dlpack.from_dlpack)
    for i in vector.bool_tensor_indices():
        out[i] = out[i].view(torch.bool)
    return out


class _Graphs:
    """Everything built for one export: the graph, its forward-only session and its training
    runners (one per pattern of inputs and parameters requiring gradients)."""

    def __init__(self, owner, exported, index):
        self.owner = owner
        self.exported = exported
        self.index = index
        self.infer_session = None
        self.runners = {}
        e = exported
        self.bn_zero_inputs = {}
        for s in e.bn_stats:  # training mode: Y ignores the running statistics; fresh zeros keep buffers intact
            self.bn_zero_inputs[s.mean_input] = s
            self.bn_zero_inputs[s.var_input] = s
        self.n_outputs = len(e.output_names)

    def weights(self):
        """Current tensors of init_names (read each call: parameters may have been replaced)."""
        out = []
        for name, (sub, attr) in zip(self.exported.init_names, self.exported.init_refs):
            if name in self.bn_zero_inputs:
                out.append(torch.zeros_like(getattr(sub, attr)))
            else:
                out.append(getattr(sub, attr))
        return out

    def feeds(self, call_tensors, weights):
        """OrtValueVector: the graph's user inputs then the weights, zero-copy."""
        v = C.OrtValueVector()
        v.reserve(len(self.exported.input_index) + len(weights))
        for i in self.exported.input_index:  # DLPack export needs no detach(): the engine never writes them
            _push(v, call_tensors[i])
        for w in weights:
            _push(v, w)
        return v

    def apply_bn_stats(self, outputs):
        """Updates the BatchNorm buffers from the batch statistics after the module outputs."""
        pos = self.n_outputs
        for s in self.exported.bn_stats:
            s.update(outputs[pos], outputs[pos + 1])
            pos += 2

    def _save(self, suffix, data):
        o = self.owner._debug
        if o.save_onnx:
            with open(f"{o.onnx_prefix}_{self.index}_{suffix}.onnx", "wb") as f:
                f.write(data if isinstance(data, bytes) else data.SerializeToString())

    def run_inference(self, call_tensors):
        """Forward only (no gradient): InferenceSession on the exported model, weights as inputs."""
        e = self.exported
        if self.infer_session is None:
            data = inference_model(e.model, e.init_names)
            self._save("inference", data)
            self.infer_session = InferenceSession(data, self.owner._session_options())
            self.infer_feed_names = e.input_names + e.init_names
            self.infer_fetch_names = e.output_names + [n for s in e.bn_stats for n in (s.mean_output, s.var_output)]
        fetches = C.OrtValueVector()
        self.infer_session.run_with_ortvaluevector(None, self.infer_feed_names,
                                                   self.feeds(call_tensors, self.weights()),
                                                   self.infer_fetch_names, fetches, None)
        out = _to_torch(fetches)
        self.apply_bn_stats(out)
        return out[:self.n_outputs]

    def runner(self, call_tensors, weights):
        e = self.exported
        inputs_rg = tuple(call_tensors[i].requires_grad and call_tensors[i].dtype in _FLOAT_DTYPES
                          for i in e.input_index)
        weights_rg = tuple(w.requires_grad for w in weights)
        key = inputs_rg + weights_rg
        r = self.runners.get(key)
        if r is None:
            r = self.runners[key] = _TrainingRunner(self, inputs_rg, weights_rg)
        return r


class _TrainingRunner:
    """The gradient graph of one export for one set of inputs and weights to differentiate, run by
    a TrainingAgent."""

    def __init__(self, graphs, inputs_rg, weights_rg):
        self.graphs = graphs
        e = graphs.exported
        cfg = C.OrtModuleGraphBuilderConfiguration()
        cfg.initializer_names = list(e.init_names)
        cfg.initializer_names_to_train = [n for n, rg in zip(e.init_names, weights_rg) if rg]
        cfg.input_names_require_grad = [n for n, rg in zip(e.input_names, inputs_rg) if rg]
        builder = C.OrtModuleGraphBuilder()
        try:
            builder.initialize(e.model.SerializeToString(), cfg)
            builder.build()
        except Exception as ex:
            raise ORTModuleExportError(f"ORTModule: building the gradient graph of "
                                       f"{type(graphs.owner._original_module).__qualname__} failed: "
                                       f"{type(ex).__name__}: {ex}") from ex
        info = builder.get_graph_info()
        model = builder.get_gradient_model()
        graphs._save("training", model)
        self.session = InferenceSession(model, graphs.owner._session_options())
        feed_names = [i.name for i in self.session.get_inputs()]
        fetch_names = [o.name for o in self.session.get_outputs()]
        n_out = len(info.user_output_names)
        self.agent = C.TrainingAgent(self.session._sess, feed_names, [_c_device("cpu", 0)] * n_out, fetch_names,
                                     [_c_device("cpu", 0)] * len(fetch_names))
        self.non_differentiable = set(info.output_grad_indices_non_differentiable)
        # Where each backward fetch goes among the Function's inputs (call tensors, then weights).
        by_grad = {g: ("input", e.input_index[e.input_names.index(n)]) for n, g in info.user_input_grad_names.items()}
        by_grad.update({g: ("weight", e.init_names.index(n))
                        for n, g in zip(info.initializer_names_to_train, info.initializer_grad_names_to_train)})
        self.fetch_targets = []
        for name in fetch_names:
            if name not in by_grad:
                raise ORTModuleExportError(f"ORTModule: the gradient graph's output '{name}' is neither an input "
                                           "nor a weight gradient")
            self.fetch_targets.append(by_grad[name])
        self.cache = C.OrtValueCache()

    def forward(self, feeds):
        fetches = C.OrtValueVector()
        state = C.PartialGraphExecutionState()
        self.agent.run_forward(feeds, fetches, state, self.cache)
        return _to_torch(fetches), state

    def backward(self, state, grads):
        feeds = C.OrtValueVector()
        for i, g in enumerate(grads):
            if i not in self.non_differentiable:
                _push(feeds, g)
        fetches = C.OrtValueVector()
        self.agent.run_backward(feeds, fetches, state)
        return _to_torch(fetches)


class _ORTModuleFunction(torch.autograd.Function):
    """forward(ctx, graphs, runner, n_call, *call_tensors_then_weights) -> module outputs."""

    @staticmethod
    def forward(ctx, graphs, runner, n_call, *tensors):
        call_tensors, weights = tensors[:n_call], tensors[n_call:]
        outputs, state = runner.forward(graphs.feeds(call_tensors, weights))
        graphs.apply_bn_stats(outputs)
        ctx.runner, ctx.state, ctx.n_call, ctx.n_inputs = runner, state, n_call, len(tensors)
        # The BatchNorm statistics after the module's outputs take zero gradients (none flows back).
        ctx.stat_meta = [(o.shape, o.dtype) for o in outputs[graphs.n_outputs:]]
        outputs = outputs[:graphs.n_outputs]
        ctx.output_meta = [(o.shape, o.dtype) for o in outputs]
        ctx.mark_non_differentiable(*[o for o in outputs if o.dtype not in _FLOAT_DTYPES])
        return tuple(outputs)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grads):
        if ctx.state is None:
            raise RuntimeError("ORTModule: backward through the same forward twice (retain_graph=True) is not "
                               "supported; run the forward again")
        state, ctx.state = ctx.state, None
        full = []
        for g, (shape, dtype) in zip(grads, ctx.output_meta):
            if g is None:
                g = torch.zeros(shape, dtype=dtype)
            full.append(g.contiguous())
        full += [torch.zeros(shape, dtype=dtype) for shape, dtype in ctx.stat_meta]
        fetched = ctx.runner.backward(state, full)
        result = [None] * (3 + ctx.n_inputs)
        for (kind, i), g in zip(ctx.runner.fetch_targets, fetched):
            result[3 + (i if kind == "input" else ctx.n_call + i)] = g
        return tuple(result)


class ORTModule(torch.nn.Module):
    """Wraps a ``torch.nn.Module`` so that its forward and backward run in onnxtrain.

    The module is exported with ``torch.onnx.export`` on the first call (training-mode export when
    the module is in training mode), again when the input names, shapes, dtypes, constant
    arguments or the training mode change (graphs are cached per signature). With gradients
    needed (grad mode on and an input or parameter requiring grad) the gradient graph is built by
    ``OrtModuleGraphBuilder`` and run by ``TrainingAgent`` in a ``torch.autograd.Function``:
    ``loss.backward()`` fills the ``.grad`` of the module's parameters, so any torch optimizer
    trains them. Otherwise a forward-only ``InferenceSession`` runs. Parameters, buffers and
    ``state_dict`` are the wrapped module's own. Tensors cross through DLPack without copies.
    """

    def __init__(self, module, debug_options=None, *, opset_version=17, session_options=None):
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"ORTModule wraps a torch.nn.Module, not a {type(module).__qualname__}")
        if isinstance(module, ORTModule):
            raise TypeError("ORTModule: the module is already an ORTModule")
        if debug_options is not None and not isinstance(debug_options, DebugOptions):
            raise TypeError("ORTModule: debug_options must be an onnxtrain.torch.DebugOptions")
        if session_options is not None and not isinstance(session_options, C.SessionOptions):
            raise TypeError("ORTModule: session_options must be an onnxtrain.SessionOptions")
        super().__init__()
        self._original_module = module
        self.training = module.training
        object.__setattr__(self, "_debug", debug_options or DebugOptions())
        object.__setattr__(self, "_opset", int(opset_version))
        object.__setattr__(self, "_user_session_options", session_options)
        object.__setattr__(self, "_signature", forward_signature(module))
        object.__setattr__(self, "_graphs", {})

    @property
    def module(self):
        """The wrapped torch module."""
        return self._original_module

    def _session_options(self):
        if self._user_session_options is not None:
            return self._user_session_options
        so = C.SessionOptions()
        so.intra_op_num_threads = torch.get_num_threads()
        return so

    def _graphs_for(self, spec):
        key = (self._original_module.training, spec.key)
        g = self._graphs.get(key)
        if g is None:
            exported = ExportedGraph(self._original_module, spec, self._opset)
            g = self._graphs[key] = _Graphs(self, exported, len(self._graphs))
            g._save("exported", exported.model)
        return g

    def forward(self, *args, **kwargs):
        """Runs the wrapped module's forward in onnxtrain (see the class docstring)."""
        spec = InputSpec(self._signature, args, kwargs)
        graphs = self._graphs_for(spec)
        weights = graphs.weights()
        grad = torch.is_grad_enabled() and (any(t.requires_grad for t in spec.tensors) or
                                            any(w.requires_grad for w in weights))
        if not grad:
            outputs = graphs.run_inference(spec.tensors)
        else:
            runner = graphs.runner(spec.tensors, weights)
            outputs = _ORTModuleFunction.apply(graphs, runner, len(spec.tensors), *spec.tensors, *weights)
        return unflatten_outputs(list(outputs), graphs.exported.structure)

    # The wrapped module's own parameters, buffers and state, without a prefix.
    def named_parameters(self, prefix="", recurse=True):
        """The wrapped module's named_parameters."""
        return self._original_module.named_parameters(prefix=prefix, recurse=recurse)

    def named_buffers(self, prefix="", recurse=True):
        """The wrapped module's named_buffers."""
        return self._original_module.named_buffers(prefix=prefix, recurse=recurse)

    def state_dict(self, *args, **kwargs):
        """The wrapped module's state_dict."""
        return self._original_module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict=True):
        """Loads into the wrapped module."""
        return self._original_module.load_state_dict(state_dict, strict=strict)

    def train(self, mode=True):
        """Sets the wrapped module's mode (the next call uses that mode's graphs)."""
        self.training = mode
        self._original_module.train(mode)
        return self

    def __getstate__(self):
        raise TypeError("ORTModule cannot be pickled; pickle the wrapped module (ortmodule.module)")

    def add_module(self, name, module):
        """Refused: add the submodule to the wrapped module before wrapping it."""
        raise RuntimeError("ORTModule: add_module is not supported; add it to the wrapped module")
