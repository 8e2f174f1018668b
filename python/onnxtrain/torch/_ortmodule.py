"""ORTModule: a torch.nn.Module running the wrapped module's forward and backward in onnxtrain.

Absolute imports only: ``import torch`` here must be PyTorch, not this package.
"""
import collections
import enum
import os
import threading
import warnings

import torch
import torch.utils.dlpack

from onnxtrain.capi import _pybind_state as C
from onnxtrain.capi._values import _c_device
from onnxtrain.capi.onnxruntime_inference_collection import InferenceSession
from onnxtrain.torch._export import (ExportedGraph, InputSpec, ORTModuleExportError, flatten_outputs,
                                     forward_signature, inference_model, quiet_run, unflatten_outputs)

_FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
# torch.onnx.export keeps global state (opset, export mode, the module's training flag), and the
# caches below are shared by the threads calling one ORTModule: exports, gradient-graph builds and
# session creations run one at a time, process-wide.
_LOCK = threading.RLock()
# Relative (norm) error under which a graph's outputs at a new batch size agree with PyTorch's.
_AGREE_RTOL = {torch.float16: 2e-2, torch.bfloat16: 5e-2}


def _memory_opt_level():
    """onnxruntime's ORTModule memory optimizer settings: ``ORTMODULE_MEMORY_OPT_LEVEL`` 0 (default:
    nothing) or 1 (recompute every transformer layer but the last: the training graph's
    transformer_layer_recompute, docs/memory.md); level 2 and ``ORTMODULE_MEMORY_OPT_CONFIG``
    (per-subgraph recompute plans) are not implemented and raise NotImplementedError naming them."""
    level = os.environ.get("ORTMODULE_MEMORY_OPT_LEVEL", "").strip() or "0"
    if level not in ("0", "1", "2"):
        raise ValueError(f"ORTMODULE_MEMORY_OPT_LEVEL must be 0, 1 or 2, got {level!r}")
    if level == "2":
        raise NotImplementedError("ORTMODULE_MEMORY_OPT_LEVEL=2 (aggressive recompute) is not implemented by "
                                  "onnxtrain; level 1 recomputes transformer layers")
    if os.environ.get("ORTMODULE_MEMORY_OPT_CONFIG", "").strip():
        raise NotImplementedError("ORTMODULE_MEMORY_OPT_CONFIG (per-subgraph recompute plans) is not implemented by "
                                  "onnxtrain; ORTMODULE_MEMORY_OPT_LEVEL=1 recomputes transformer layers")
    return int(level)


class LogLevel(enum.IntEnum):
    """onnxruntime's ORTModule log levels; an ORTModule's sessions log at this severity."""
    VERBOSE = 0
    INFO = 1
    WARNING = 2
    ERROR = 3
    FATAL = 4


class _SaveOnnxOptions:
    """``DebugOptions.save_onnx_models``: ``save``, ``name_prefix``, ``path`` (onnxruntime's names)."""

    def __init__(self, save, name_prefix):
        self.save = bool(save)
        self.name_prefix = str(name_prefix)
        self.path = os.environ.get("ORTMODULE_SAVE_ONNX_PATH", "") or os.getcwd()
        if self.save:
            if not self.name_prefix:
                raise NameError("onnx_prefix must be provided when save_onnx is set.")
            if not os.path.isdir(self.path):
                raise FileNotFoundError(f"Directory {self.path} does not exist.")
            if not os.access(self.path, os.W_OK):
                raise PermissionError(f"May not write to directory {self.path}.")


class _LoggingOptions:
    """``DebugOptions.logging``: ``log_level``, a LogLevel."""

    def __init__(self, log_level):
        if not isinstance(log_level, LogLevel):
            raise TypeError(f"Expected log_level of type LogLevel, got {type(log_level)}.")
        self.log_level = log_level


class DebugOptions:
    """ORTModule debugging, as onnxruntime's ``DebugOptions(log_level, save_onnx, onnx_prefix)``:
    ``log_level`` (a LogLevel, default WARNING) is the severity the module's sessions log at;
    ``save_onnx=True`` writes each exported model and its gradient model as
    ``<path>/<onnx_prefix>_<n>_exported.onnx`` / ``_training.onnx`` / ``_inference.onnx``, where
    ``path`` is ``$ORTMODULE_SAVE_ONNX_PATH`` or the working directory (the prefix may itself hold a
    directory part) and ``onnx_prefix`` must then be given."""

    def __init__(self, log_level=LogLevel.WARNING, save_onnx=False, onnx_prefix=""):
        self._save_onnx_models = _SaveOnnxOptions(save_onnx, onnx_prefix)
        self._logging = _LoggingOptions(log_level)

    @property
    def save_onnx_models(self):
        """What to save: ``.save``, ``.name_prefix``, ``.path``."""
        return self._save_onnx_models

    @property
    def logging(self):
        """How to log: ``.log_level``."""
        return self._logging

    @property
    def save_onnx(self):
        return self._save_onnx_models.save

    @property
    def onnx_prefix(self):
        return self._save_onnx_models.name_prefix


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

    def __init__(self, owner, exported, index, key):
        self.owner = owner
        self.exported = exported
        self.index = index
        self.key = key              # the cache key of the signature it was exported for
        self.validated = False      # dynamic: checked against PyTorch at another batch size
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
            n = len(s.outputs())
            s.update(*outputs[pos:pos + n])
            pos += n

    def _save(self, suffix, data):
        o = self.owner._debug
        if o.save_onnx:
            from .._files import write_bytes
            where = o.save_onnx_models.path
            write_bytes(os.path.join(where, f"{o.onnx_prefix}_{self.index}_{suffix}.onnx"),
                        data if isinstance(data, bytes) else data.SerializeToString(), "model file")

    def _infer(self, call_tensors):
        """Every output of the forward-only InferenceSession (module outputs, then statistics)."""
        e = self.exported
        if self.infer_session is None:
            with _LOCK:
                if self.infer_session is None:
                    data = inference_model(e.model, e.init_names)
                    self._save("inference", data)
                    self.infer_feed_names = e.input_names + e.init_names
                    self.infer_fetch_names = e.output_names + [n for s in e.bn_stats for n in s.outputs()]
                    self.infer_session = InferenceSession(data, self.owner._session_options())
        fetches = C.OrtValueVector()
        self.infer_session.run_with_ortvaluevector(None, self.infer_feed_names,
                                                   self.feeds(call_tensors, self.weights()),
                                                   self.infer_fetch_names, fetches, None)
        return _to_torch(fetches)

    def run_inference(self, call_tensors):
        """Forward only (no gradient): InferenceSession on the exported model, weights as inputs."""
        out = self._infer(call_tensors)
        self.apply_bn_stats(out)
        return out[:self.n_outputs]

    def disagreement(self, spec):
        """Why this dynamic graph cannot serve the call of ``spec`` (another batch size than the
        export's), or None: its outputs must agree with PyTorch's forward on the same call (shapes and
        dtypes only for a graph with random operators). Neither run changes the module's state."""
        try:
            ours = self._infer(spec.tensors)[:self.n_outputs]
        except Exception as e:  # e.g. a Reshape to the export's batch size
            return f"it fails at batch size {spec.batch}: {type(e).__name__}: {str(e).strip()[:300]}"
        module = self.owner._original_module
        try:
            with _LOCK, quiet_run(module):  # one at a time: quiet_run swaps the process's warning filters
                args, kwargs = spec.call_arguments([t.detach() for t in spec.tensors])
                ref, _ = flatten_outputs(module(*args, **kwargs))
        except Exception as e:
            return f"PyTorch's forward failed at batch size {spec.batch}: {type(e).__name__}: {e}"
        if len(ours) != len(ref):
            return f"{len(ours)} outputs, PyTorch's forward gives {len(ref)}"
        for i, (a, b) in enumerate(zip(ours, ref)):
            if a.shape != b.shape or a.dtype != b.dtype:
                return (f"output {i} is {a.dtype}{list(a.shape)} at batch size {spec.batch}, PyTorch's "
                        f"{b.dtype}{list(b.shape)}")
            if self.exported.random:
                continue
            if a.dtype not in _FLOAT_DTYPES:
                if not torch.equal(a, b):
                    return f"output {i} differs from PyTorch's at batch size {spec.batch}"
                continue
            a64, b64 = a.double(), b.double()
            fa, fb = torch.isfinite(a64), torch.isfinite(b64)
            if not torch.equal(fa, fb) or not torch.equal(a64[~fa].nan_to_num(), b64[~fb].nan_to_num()):
                return f"output {i} has other non-finite values than PyTorch's at batch size {spec.batch}"
            err = float((a64[fa] - b64[fb]).norm())
            if err > _AGREE_RTOL.get(a.dtype, 1e-3) * float(b64[fb].norm()) + 1e-12 * max(b64.numel(), 1):
                return (f"output {i} differs from PyTorch's at batch size {spec.batch} (relative error "
                        f"{err / max(float(b64[fb].norm()), 1e-30):.2g})")
        return None

    def runner(self, call_tensors, weights):
        e = self.exported
        inputs_rg = tuple(call_tensors[i].requires_grad and call_tensors[i].dtype in _FLOAT_DTYPES
                          for i in e.input_index)
        weights_rg = tuple(w.requires_grad for w in weights)
        key = inputs_rg + weights_rg
        r = self.runners.get(key)
        if r is None:
            with _LOCK:
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
        cfg.graph_transformer_config.transformer_layer_recompute = _memory_opt_level() == 1
        builder = C.OrtModuleGraphBuilder()
        try:
            try:
                builder.initialize(e.model.SerializeToString(), cfg)
                builder.build()
            except ValueError as ex:
                if not cfg.graph_transformer_config.transformer_layer_recompute or "no transformer layer" not in str(ex):
                    raise
                warnings.warn("ORTMODULE_MEMORY_OPT_LEVEL=1: the model has no transformer layer to recompute; "
                              "training without recompute", UserWarning, stacklevel=4)
                cfg.graph_transformer_config.transformer_layer_recompute = False
                builder = C.OrtModuleGraphBuilder()
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
    """forward(ctx, graphs, runner, n_call, *call_tensors_then_weights) -> module outputs.

    The engine keeps the inputs', weights' and outputs' memory (shared through DLPack) for the
    backward: all are saved with ``save_for_backward``, so that an in-place change of any of them
    between forward and backward raises PyTorch's "modified by an inplace operation" error instead of
    giving wrong gradients."""

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
        ctx.save_for_backward(*tensors, *outputs)
        return tuple(outputs)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grads):
        if ctx.state is None:
            raise RuntimeError("ORTModule: backward through the same forward twice (retain_graph=True) is not "
                               "supported; run the forward again")
        ctx.saved_tensors  # noqa: B018 (PyTorch's version check: raises if one was modified in place)
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
    the module is in training mode), with the first axis of the inputs that share the first input's
    first dimension as a dynamic ``batch`` axis; again when the input names, other dimensions,
    dtypes, constant arguments or the training mode change. The first call at another batch size
    checks the graph against PyTorch's forward; a graph that disagrees, or whose export read a
    traced value in Python (a ``TracerWarning``, shown to the user), is kept for its own shapes only
    and each new shape is exported again. At most ``max_cached_graphs`` (8) graphs are kept, the
    least recently used dropped first. With gradients
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
        object.__setattr__(self, "_graphs", collections.OrderedDict())  # cache key -> _Graphs, LRU order
        object.__setattr__(self, "_static_only", collections.OrderedDict())  # batch key -> why not dynamic
        object.__setattr__(self, "_exports", 0)
        object.__setattr__(self, "_lock", threading.RLock())  # the cache, and one export at a time per module

    @property
    def module(self):
        """The wrapped torch module."""
        return self._original_module

    def _session_options(self):
        if self._user_session_options is not None:
            return self._user_session_options
        so = C.SessionOptions()
        so.intra_op_num_threads = torch.get_num_threads()
        so.log_severity_level = int(self._debug.logging.log_level)
        return so

    #: How many exported graphs (with their sessions) one ORTModule keeps, least recently used dropped.
    max_cached_graphs = 8

    def _cached(self, key):
        g = self._graphs.get(key)
        if g is not None:
            self._graphs.move_to_end(key)
        return g

    def _cache(self, key, g):
        self._graphs[key] = g
        self._graphs.move_to_end(key)
        while len(self._graphs) > max(int(self.max_cached_graphs), 1):
            self._graphs.popitem(last=False)

    def _export(self, spec, key, dynamic):
        """Exports the module for ``spec``; None when the dynamic export fails (the caller exports
        with static shapes, which raises the error if the module cannot be exported at all)."""
        module = self._original_module
        try:
            with _LOCK:
                exported = ExportedGraph(module, spec, self._opset, dynamic=dynamic)
        except ORTModuleExportError:
            if dynamic:
                return None
            raise
        for w in exported.tracer_warnings:
            warnings.warn_explicit(
                f"ORTModule: exporting {type(module).__qualname__}, its Python read a traced value ({w.message}). "
                "The exported graph holds this call's value: a later call whose data differs may compute "
                "something else than PyTorch (each new shape is exported again)", w.category, w.filename, w.lineno)
        object.__setattr__(self, "_exports", self._exports + 1)
        g = _Graphs(self, exported, self._exports - 1, key)
        g._save("exported", exported.model)
        return g

    def _graphs_for(self, spec):
        training = self._original_module.training
        exact = (training, spec.key)
        with self._lock:
            g = self._cached(exact)
            if g is not None:
                return g
            batch_key = (training, "batch", spec.batch_key) if spec.batch is not None else None
            if batch_key is not None and batch_key not in self._static_only:
                g = self._cached(batch_key)
                if g is None:
                    g = self._export(spec, exact, dynamic=True)
                    if g is not None and not g.exported.tracer_warnings:
                        self._cache(batch_key, g)
                        return g
                    why = "its export raised TracerWarnings" if g is not None else "its dynamic export failed"
                elif g.validated or spec.batch == g.exported.batch:
                    return g
                else:
                    why = g.disagreement(spec)
                    if why is None:
                        g.validated = True
                        return g
                    del self._graphs[batch_key]  # it still serves the shapes it was exported for
                    self._cache(g.key, g)
                    g = None
                self._static_only[batch_key] = why
                while len(self._static_only) > 256:
                    self._static_only.popitem(last=False)
                if g is not None:  # exported with tracer warnings: serves its own shapes only
                    self._cache(exact, g)
                    return g
            g = self._export(spec, exact, dynamic=False)
            self._cache(exact, g)
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
