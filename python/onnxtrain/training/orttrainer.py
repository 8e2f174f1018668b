"""onnxruntime-training's ``ORTTrainer`` (``onnxruntime.training.ORTTrainer``): the PyTorch
frontend trainer over onnxtrain's TrainingSession.

``ORTTrainer(model, model_desc, optim_config, loss_fn=None, options=None)`` takes an ONNX model
(``onnx.ModelProto``, bytes or a path) whose loss output is flagged ``is_loss`` in ``model_desc``,
or a ``torch.nn.Module`` that is exported with ``torch.onnx.export`` at the first step (combined
with ``loss_fn``: inputs = the model's inputs + the label, outputs = the loss + the model's
outputs). ``train_step`` / ``eval_step`` return the outputs in ``model_desc`` order (torch tensors
for a torch model, numpy arrays otherwise; one output is returned alone, as onnxruntime did).
"""
import copy
import io
import os
import sys
import warnings

import numpy as np
# onnxruntime's orttrainer imports onnx's numpy_helper (through SymbolicShapeInference): after
# importing onnxruntime.training, ``onnx.numpy_helper`` is reachable as an attribute of ``onnx``.
import onnx.numpy_helper  # noqa: F401

from .. import _errors
from ..capi.onnxruntime_inference_collection import InferenceSession
from ._session import TrainingParameters, TrainingSession
from ._step_info import TrainStepInfo
from . import _checkpoint_storage
from ._trainer_checkpoint import _Packer
from ._trainer_checkpoint import read_checkpoint as _read_checkpoint
from .orttrainer_options import ORTTrainerOptions, check_supported
from .optim.config import _OptimizerConfig
from ._utils import dtype_onnx_to_torch, forward_names, infer_symbolic_shapes, mute_dropouts, strip_export_scope
from .model_desc_validation import _ORTTrainerModelDesc



class _ModelDesc(_ORTTrainerModelDesc):
    """model_desc validated as onnxruntime did (``model_desc_validation``), and what this trainer
    needs on top: distinct names, non-negative dimensions, exactly one is_loss output."""

    def __init__(self, desc):
        super().__init__(desc)
        for kind in ("inputs", "outputs"):
            names = [d.name for d in getattr(self, kind)]
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ValueError(f"model_desc['{kind}']: duplicated names {dup}")
            for d in getattr(self, kind):
                if not d.name:
                    raise ValueError(f"model_desc['{kind}']: a name is empty")
                for x in d.shape:
                    if isinstance(x, int) and x < 0:
                        raise ValueError(f"model_desc['{kind}'] ('{d.name}'): dimension {x} is negative")
        losses = [d.name for d in self.outputs if d.is_loss]
        if len(losses) != 1:
            raise ValueError(f"model_desc['outputs'] must flag exactly one output is_loss=True, got {losses}")
        self.loss = losses[0]

    @staticmethod
    def check_shape(d, dims, what):
        """A declared shape (ints: fixed, strings: symbolic, None: unknown) against the entry's: same
        rank, and every int of model_desc equal to a fixed dimension."""
        if dims is None:
            return
        if len(dims) != len(d.shape):
            raise ValueError(f"model_desc {what} '{d.name}': shape {d.shape} has rank {len(d.shape)}, the model's "
                             f"{dims} has rank {len(dims)}")
        for i, (want, got) in enumerate(zip(d.shape, dims)):
            if isinstance(want, int) and isinstance(got, int) and want != got:
                raise ValueError(f"model_desc {what} '{d.name}': dimension {i} is {want}, the model's is {got} "
                                 f"(shape {dims})")

    def check_values(self, values):
        """Fed values against model_desc's input shapes (rank, fixed dimensions)."""
        for d, v in zip(self.inputs, values):
            shape = getattr(v, "shape", None)
            shape = [int(x) for x in (np.shape(v) if shape is None else shape)]
            if len(shape) != len(d.shape) or any(isinstance(w, int) and w != g for w, g in zip(d.shape, shape)):
                raise ValueError(f"input '{d.name}' has shape {shape}, model_desc says {d.shape}")

    def check_against(self, inputs, outputs, shapes=None, allow_unused=False):
        """Names, order and shapes against the ONNX model's graph inputs (non-initializers) and
        outputs (`shapes`: name -> declared dims or None). ``allow_unused``: described inputs the
        graph lacks are accepted (torch.onnx.export drops the inputs forward() does not use;
        onnxruntime then fed only the graph's)."""
        want = [d.name for d in self.inputs]
        if allow_unused:
            want = [n for n in want if n in inputs]
        if want != inputs:
            raise ValueError(f"model_desc['inputs'] names {want} do not match the model's inputs {inputs} "
                             "(same names in the same order)")
        want = [d.name for d in self.outputs]
        missing = [n for n in want if n not in outputs]
        if missing:
            raise ValueError(f"model_desc['outputs'] names {missing} are not outputs of the model {outputs}")
        order = [n for n in outputs if n in want]
        if order != want:
            raise ValueError(f"model_desc['outputs'] order {want} differs from the model's {order}")
        for d in self.inputs:
            self.check_shape(d, (shapes or {}).get(d.name), "input")
        for d in self.outputs:
            self.check_shape(d, (shapes or {}).get(d.name), "output")


def bind_inputs(names, args, kwargs):
    """``{name: value}`` from positional values (in ``names`` order) and keywords; ValueError for
    too many values, an unknown name or a name given twice."""
    if len(args) > len(names):
        raise ValueError(f"{len(args)} positional inputs for the {len(names)} expected: {names}")
    values = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            raise ValueError(f"unknown input '{k}' (expected: {names})")
        if k in values:
            raise ValueError(f"input '{k}' given twice")
        values[k] = v
    return values


def _torch():
    import torch
    return torch


class _CombinedModel:
    """model + loss_fn as one torch module: forward(*inputs, label) -> (loss, *model outputs)."""

    @staticmethod
    def make(model, loss_fn, by_name=None):
        """``by_name``: forward()'s parameter names to pass the model inputs as (keywords), or None
        (positional)."""
        torch = _torch()

        class Combined(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, *inputs):
                args = inputs[:-1] if loss_fn is not None else inputs
                out = self.model(**dict(zip(by_name, args))) if by_name else self.model(*args)
                if loss_fn is None:
                    return out
                outs = list(out) if isinstance(out, (tuple, list)) else [out]
                return (loss_fn(outs[0], inputs[-1]), *outs)

        return Combined()


class StateDictMismatch(KeyError, RuntimeError):
    """load_state_dict (strict): the state dict's weights or optimizer states differ from the
    trainer's (a RuntimeError as onnxruntime raised; a KeyError as onnxtrain raised before)."""


class _TrainingSessionView:
    """``ORTTrainer._training_session``: onnxruntime's training-session state methods over an
    onnxtrain TrainingSession (other attributes are the session's)."""

    def __init__(self, session, optimizer_name):
        self._session = session
        self._optimizer_name = optimizer_name  # onnxruntime's (AdamOptimizer runs as onnxtrain's AdamW)

    def __getattr__(self, name):
        return getattr(self._session, name)

    def get_state(self):
        """onnxruntime's state tensors: trained weights and optimizer state by onnxruntime's names."""
        return self._session.get_state()

    def get_model_state(self, include_mixed_precision_weights=False):
        """``{'full_precision': {weight: array}}`` for the trained weights."""
        return self._session.get_model_state(include_mixed_precision_weights)

    def get_optimizer_state(self):
        """``{weight: {'Moment_1': ..., 'Moment_2': ...[, 'Update_Count': int64 [1]]}[,
        'shared_optimizer_state': {'Step': int64 [1]}]}``: Adam's counter per weight, the other
        optimizers' shared, as onnxruntime 1.13's state dicts."""
        opt = self._session.get_optimizer_state()
        shared = opt.pop("shared_optimizer_state", {})
        step = np.asarray(shared.get("Step", np.array(0, np.int64)), dtype=np.int64).reshape(1)
        out = {w: dict(states) for w, states in opt.items()}
        if self._optimizer_name == "AdamOptimizer":
            for states in out.values():
                states["Update_Count"] = step.copy()
        else:
            out["shared_optimizer_state"] = {"Step": step.copy()}
        return out

    def get_partition_info_map(self):
        """``{weight: {'original_dim': int64 array}}`` for the weights whose optimizer state this rank
        holds a part of (ZeRO stage 1: its block of the flattened weights, as onnxruntime's views);
        weights themselves are whole on every rank."""
        weights = self._session.get_model_state().get("full_precision", {})
        info = {}
        for w, states in self.get_optimizer_state().items():
            shape = np.shape(weights[w]) if w in weights else None
            if shape is not None and any(k in ("Moment_1", "Moment_2") and np.shape(v) != shape
                                         for k, v in states.items()):
                info[w] = {"original_dim": np.array(shape, dtype=np.int64)}
        return info


class ORTTrainer:
    """Trains an ONNX model or a torch module with onnxruntime-training's ORTTrainer contract.

    ``optim_config`` is an ``optim.SGDConfig``, ``optim.AdamConfig`` or ``optim.LambConfig`` (with
    per-group hyper-parameters); ``options`` an ``ORTTrainerOptions`` (an option onnxtrain does not
    implement yet, when enabled, raises NotImplementedError naming it).
    """

    def __init__(self, model, model_desc, optim_config, loss_fn=None, options=None):
        if not isinstance(optim_config, _OptimizerConfig):
            raise TypeError("optim_config must be an optim.SGDConfig, optim.AdamConfig or optim.LambConfig, got "
                            f"{type(optim_config).__name__}")
        if options is None:
            options = ORTTrainerOptions()
        elif isinstance(options, dict):
            options = ORTTrainerOptions(options)
        elif not isinstance(options, ORTTrainerOptions):
            raise TypeError(f"options must be an ORTTrainerOptions, got {type(options).__name__}")
        check_supported(options)
        mp = options.mixed_precision
        if mp.enabled and mp.loss_scaler is None:  # onnxruntime's default
            from .amp import DynamicLossScaler
            mp.loss_scaler = DynamicLossScaler()
        elif not mp.enabled and mp.loss_scaler is not None:
            raise ValueError("Loss Scaler cannot be specified when Mixed Precision is not enabled")
        if loss_fn is not None and not callable(loss_fn):
            raise ValueError("loss_fn must be callable")
        self.options = options
        self.optim_config = optim_config
        self.model_desc = _ModelDesc(model_desc)
        self.loss_fn = loss_fn
        self._train_step_info = TrainStepInfo(optimizer_config=optim_config)
        self._torch_model = None  # what is exported: the user's module, or it wrapped with loss_fn
        self._user_module = None
        self._fed = set()  # the graph's inputs: what is fed of model_desc's
        self._onnx_model = None
        self._session = None
        self._session_override = None  # what ORTTrainer._training_session was assigned
        self._session_scales = False  # the session's loss scaler is options.mixed_precision.loss_scaler's state
        self._pending_state = None
        torch_module = None
        try:
            torch_module = _torch().nn.Module
        except ImportError:  # pragma: no cover - torch is optional
            pass
        if torch_module is not None and isinstance(model, torch_module):
            self._torch_model = self._user_module = model
            by_name = forward_names(model, loss_fn, [d.name for d in self.model_desc.inputs])
            if loss_fn is not None or by_name:
                self._torch_model = _CombinedModel.make(model, loss_fn, by_name)
        else:
            if loss_fn is not None:
                raise ValueError("loss_fn is only supported with a torch.nn.Module model; an ONNX model carries its "
                                 "loss (flag it is_loss=True in model_desc['outputs'])")
            self._onnx_model = self._load_onnx(model)
            self._check_onnx_model(self._onnx_model)
            # An ONNX model needs no sample input: its session is made now, as onnxruntime's
            # constructor makes it (state_dict() holds every initializer before the first step).
            self._make_session(None)

    # ------------------------------------------------------------------ model preparation
    @staticmethod
    def _load_onnx(model):
        import onnx
        if isinstance(model, onnx.ModelProto):
            return model
        if isinstance(model, (bytes, bytearray)):
            return onnx.load_model_from_string(bytes(model))
        if isinstance(model, (str, os.PathLike)):
            return onnx.load(os.fspath(model))
        raise TypeError(f"model must be a torch.nn.Module, an onnx.ModelProto, bytes or a path, got "
                        f"{type(model).__name__}")

    def _check_onnx_model(self, model, exported=False):
        inits = {i.name for i in model.graph.initializer}
        inputs = [i.name for i in model.graph.input if i.name not in inits]
        outputs = [o.name for o in model.graph.output]

        def dims(vi):
            t = vi.type.tensor_type
            if not vi.type.HasField("tensor_type") or not t.HasField("shape"):
                return None
            return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]

        shapes = {vi.name: dims(vi) for vi in list(model.graph.input) + list(model.graph.output)}
        self.model_desc.check_against(inputs, outputs, shapes, allow_unused=exported)
        self._fed = set(inputs)
        self._add_types(model)

    def _add_types(self, model):
        """As onnxruntime once the model is known (an ONNX model: at construction; a torch model:
        exported at the first step): each model_desc input/output becomes its typed description
        (``dtype``: the torch type of the graph's element type)."""
        torch = _torch()
        elem = {vi.name: dtype_onnx_to_torch(vi.type.tensor_type.elem_type)
                for vi in list(model.graph.input) + list(model.graph.output)
                if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type}
        elem = {k: v for k, v in elem.items() if isinstance(v, torch.dtype)}
        for i, d in enumerate(self.model_desc.inputs):
            if d.name in elem:
                self.model_desc.add_type_to_input_description(i, elem[d.name])
        for i, d in enumerate(self.model_desc.outputs):
            if d.name in elem:
                self.model_desc.add_type_to_output_description(i, elem[d.name])

    def _export(self, sample_inputs):
        torch = _torch()
        names_in = [d.name for d in self.model_desc.inputs]
        names_out = [d.name for d in self.model_desc.outputs]
        dynamic = {}
        for d in self.model_desc.inputs + self.model_desc.outputs:
            axes = {k: v for k, v in enumerate(d.shape) if isinstance(v, str)}
            if axes:
                dynamic[d.name] = axes
        f = io.BytesIO()
        self._torch_model.train()
        torch.onnx.export(self._torch_model, tuple(sample_inputs), f, input_names=names_in, output_names=names_out,
                          opset_version=self.options._internal_use.onnx_opset_version, do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING, dynamic_axes=dynamic or None,
                          export_params=True, keep_initializers_as_inputs=False)
        import onnx
        model = onnx.load_model_from_string(f.getvalue())
        wrapped = self._torch_model is not self._user_module
        if wrapped:
            strip_export_scope(model, "model")
        # torch buffers (register_buffer) are not trained: onnxruntime added them to frozen_weights
        inits = {i.name for i in model.graph.initializer}
        frozen = self.options.utils.frozen_weights
        frozen.extend([n for n, _ in self._user_module.named_buffers() if n in inits and n not in frozen])
        post = self.options._internal_use.extra_postprocess
        if post is not None:
            model = post(model)
        self._check_onnx_model(model, exported=True)
        return model

    def _inputs(self, args, kwargs):
        names = [d.name for d in self.model_desc.inputs]
        values = bind_inputs(names, args, kwargs)
        missing = [n for n in names if n not in values]
        if missing:
            raise ValueError(f"missing inputs {missing}")
        return [values[n] for n in names]

    def _feed(self, values):
        """{name: numpy array} of the model_desc inputs the graph has (see check_against)."""
        return {d.name: self._to_numpy(v) for d, v in zip(self.model_desc.inputs, values) if d.name in self._fed}

    @staticmethod
    def _to_numpy(v):
        if hasattr(v, "detach") and hasattr(v, "cpu"):
            return v.detach().cpu().numpy()
        return np.asarray(v)

    def _make_session(self, sample_inputs):
        if self._onnx_model is None:
            self._onnx_model = self._export(sample_inputs)
            if self.options.debug.check_model_export:
                self._check_export(sample_inputs)
        if self.options.utils.run_symbolic_shape_infer:  # onnxruntime replaces _onnx_model by the inferred model
            self._onnx_model = infer_symbolic_shapes(self._onnx_model)
        model = self._onnx_model
        inits = [i for i in model.graph.initializer]
        float_types = {1, 10, 11, 16}
        frozen = set(self.options.utils.frozen_weights)
        unknown = sorted(frozen - {i.name for i in inits})
        if unknown:
            raise ValueError(f"utils.frozen_weights: {unknown} are not initializers of the model")
        trainable = [i.name for i in inits if i.data_type in float_types and i.name not in frozen]
        p = TrainingParameters()
        p.loss_output_name = self.model_desc.loss
        p.weights_to_train = set(trainable)
        if frozen:
            p.weights_not_to_train = frozen
        self.optim_config.apply_to_training_parameters(p, trainable, frozen_weights=sorted(frozen),
                                                       grad_norm_clip=self.options.utils.grad_norm_clip)
        p.gradient_accumulation_steps = self.options.batch.gradient_accumulation_steps
        p.deterministic_compute = bool(self.options.debug.deterministic_compute)
        gt = self.options.graph_transformer
        p.attn_dropout_recompute = bool(gt.attn_dropout_recompute)
        p.gelu_recompute = bool(gt.gelu_recompute)
        p.transformer_layer_recompute = bool(gt.transformer_layer_recompute)
        p.number_recompute_layers = int(gt.number_recompute_layers)
        if self.options.utils.memory_efficient_gradient:
            why = [w for w, c in (("utils.grad_norm_clip", self.options.utils.grad_norm_clip),
                                  ("batch.gradient_accumulation_steps > 1",
                                   self.options.batch.gradient_accumulation_steps > 1),
                                  ("mixed_precision.enabled", self.options.mixed_precision.enabled),
                                  ("distributed.world_size > 1", int(self.options.distributed.world_size) > 1)) if c]
            if why:
                warnings.warn("utils.memory_efficient_gradient has no effect with " + ", ".join(why) +
                              " (the update needs every gradient first)", UserWarning, stacklevel=3)
            else:
                p.use_memory_efficient_gradient = True
        dist = self.options.distributed
        p.world_rank = int(dist.world_rank)
        p.world_size = int(dist.world_size)
        p.local_rank = int(dist.local_rank)
        p.data_parallel_size = int(dist.data_parallel_size)
        p.allreduce_post_accumulation = bool(dist.allreduce_post_accumulation)
        p.enable_adasum = bool(dist.enable_adasum)
        p.deepspeed_zero_stage = int(dist.deepspeed_zero_optimization.stage)
        p.use_mixed_precision = bool(self.options.mixed_precision.enabled)
        paths = self.options.debug.graph_save_paths
        if paths.model_with_gradient_graph_path:
            p.model_with_gradient_graph_path = paths.model_with_gradient_graph_path
        if paths.model_with_training_graph_path:
            p.model_with_training_graph_path = paths.model_with_training_graph_path
        if paths.model_after_graph_transforms_path:
            from .._files import write_bytes
            write_bytes(paths.model_after_graph_transforms_path, model.SerializeToString(), "model file")
        if paths.model_with_training_graph_after_optimization_path:
            p.model_with_training_graph_path = p.model_with_training_graph_path or \
                paths.model_with_training_graph_after_optimization_path
        self._lr_feed = p.lr_params_feed_name
        self._session = TrainingSession(model.SerializeToString(), p, self.options.session_options)
        self._session_scales = False
        if self.options.mixed_precision.enabled:
            from .amp import DynamicLossScaler
            scaler = self.options.mixed_precision.loss_scaler
            scaler.input_name = self._session.loss_scale_input_name
            # The default scaler is the session's own (one scaler, one rule): the session feeds its
            # scale and applies the rule at each update; the scaler object reads and writes it. A
            # scaler of the user's own (a subclass, or automatic_update off) is fed and updated here.
            if type(scaler) is DynamicLossScaler and scaler.automatic_update:
                scaler._attach(self._session.loss_scaler)
                self._session_scales = True
        if paths.model_with_training_graph_after_optimization_path and \
                p.model_with_training_graph_path != paths.model_with_training_graph_after_optimization_path:
            import shutil
            shutil.copyfile(p.model_with_training_graph_path, paths.model_with_training_graph_after_optimization_path)
        if self._pending_state is not None:
            state, strict = self._pending_state
            self._pending_state = None
            self._load_state(state, strict)

    def _check_export(self, sample_inputs):
        """debug.check_model_export as onnxruntime: the torch model in eval mode against the exported
        model with its Dropouts muted (ratio 0, training_mode False), run by an InferenceSession."""
        torch = _torch()
        was_training = self._torch_model.training
        self._torch_model.eval()
        try:
            with torch.no_grad():
                expected = self._torch_model(*sample_inputs)
        finally:
            self._torch_model.train(was_training)
        expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
        sess = InferenceSession(mute_dropouts(self._onnx_model).SerializeToString())
        feed = self._feed(sample_inputs)
        got = sess.run([d.name for d in self.model_desc.outputs], feed)
        for d, e, g in zip(self.model_desc.outputs, expected, got):
            e = self._to_numpy(e)
            if e.shape != g.shape or not np.allclose(e, g, rtol=1e-3, atol=1e-5):
                raise RuntimeError(f"debug.check_model_export: output '{d.name}' of the exported ONNX model differs from "
                                   f"the torch model (max abs difference {np.max(np.abs(e - g)) if e.shape == g.shape else 'shape'})")

    # ------------------------------------------------------------------ steps
    def _wrap(self, results, inputs=()):
        """The outputs as onnxruntime's ORTTrainer returns them: torch tensors for a torch model or
        torch inputs (an ONNX model fed numpy arrays gets numpy arrays); one output alone."""
        if self._torch_model is not None or any(self._is_tensor(v) for v in inputs):
            torch = _torch()
            results = [torch.from_numpy(np.array(r)) for r in results]
        return results[0] if len(results) == 1 else results

    @staticmethod
    def _is_tensor(v):
        torch = sys.modules.get("torch")
        return torch is not None and isinstance(v, torch.Tensor)

    def train_step(self, *args, **kwargs):
        """One training step (an optimizer update every ``batch.gradient_accumulation_steps`` steps);
        returns the model_desc outputs."""
        inputs = self._inputs(args, kwargs)
        self.model_desc.check_values(inputs)
        if self._session is None:
            self._make_session(inputs)
        lr = self.optim_config.lr
        if self.options.lr_scheduler is not None:
            lr = self.options.lr_scheduler._step(self._train_step_info)[0]
        feed = self._feed(inputs)
        feed[self._lr_feed] = np.array([lr], dtype=np.float32)
        names = [d.name for d in self.model_desc.outputs]
        fetches = list(self._train_step_info.fetches or [])
        request = fetches or names
        scaler = self.options.mixed_precision.loss_scaler if self.options.mixed_precision.enabled else None
        update = self._session._sess.update_due
        finite_name = None
        if scaler is not None:
            # Mixed precision: the scaler's loss scale is fed, and an update step also returns
            # whether every gradient was finite (the session skipped the update otherwise).
            if not self._session_scales:
                feed[self._session.loss_scale_input_name] = np.array([scaler.loss_scale], dtype=np.float32)
            if update:
                finite_name = self._session.all_finite_output_name
                request = [*request, finite_name]
        results = self._session.run(request, feed)
        self._sync_progress()  # the session counted the run and, once applied, the update
        if finite_name is not None:
            all_finite = bool(np.asarray(results[-1]).reshape(-1)[0])
            results = results[:-1]
            self._train_step_info.all_finite = all_finite
            if not self._session_scales and getattr(scaler, "automatic_update", True):
                scaler.update(self._train_step_info)
        else:
            self._train_step_info.all_finite = bool(all(np.all(np.isfinite(r)) for r in results
                                                        if isinstance(r, np.ndarray) and r.dtype.kind == "f"))
        return self._wrap(results, inputs)

    def _sync_progress(self):
        """TrainStepInfo's step and optimization_step are the session's counters (its step driver
        counts runs and applied updates; nothing is counted here)."""
        self._train_step_info.step = self._session._sess.run_count()
        self._train_step_info.optimization_step = self._session._sess.step()

    def eval_step(self, *args, **kwargs):
        """Forward pass only (weights and optimizer state untouched); returns the model_desc outputs."""
        inputs = self._inputs(args, kwargs)
        self.model_desc.check_values(inputs)
        if self._session is None:
            self._make_session(inputs)
        feed = self._feed(inputs)
        names = list(self._train_step_info.fetches or []) or [d.name for d in self.model_desc.outputs]
        return self._wrap(self._session.eval(names, feed), inputs)

    # ------------------------------------------------------------------ persistence
    def _require_session(self, what):
        if self._session is None:
            raise RuntimeError(f"{what}: the model is not initialized yet; call train_step or eval_step first")

    def save_as_onnx(self, path):
        """Writes the model this trainer trains, as onnxruntime 1.13: ``_onnx_model`` (the ONNX model
        given, or the torch model's export: graph unchanged, loss and Dropout's training_mode kept)
        with its initializers replaced by the trained state (``_update_onnx_model_initializers`` of
        ``_training_session.get_state()``, so ``_onnx_model`` holds the trained weights afterwards).
        Before the first step (torch models) raises RuntimeWarning; a path whose folder does not
        exist raises ValueError."""
        if self._training_session is None:
            warnings.warn("save_as_onnx: neither train_step nor eval_step was called", RuntimeWarning)
            raise RuntimeWarning("save_as_onnx: neither train_step nor eval_step was called")
        if not isinstance(path, (str, os.PathLike)) or not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise ValueError(f"save_as_onnx: '{path}' is not a valid path")
        self._update_onnx_model_initializers(self._training_session.get_state())
        from .._files import save_model
        save_model(self._onnx_model, os.fspath(path), "save_as_onnx")

    @property
    def _training_session(self):
        """onnxruntime's ``ORTTrainer._training_session``: the training session's state methods
        (``get_state``, ``get_model_state``, ``get_optimizer_state`` in the layout of state_dict's
        "optimizer", ``get_partition_info_map``) over this trainer's TrainingSession; None before
        the first step. Assigning replaces what state_dict reads (onnxruntime's tests assign a
        mock)."""
        if self._session_override is not None:
            return self._session_override
        return None if self._session is None else _TrainingSessionView(self._session, self.optim_config.name)

    @_training_session.setter
    def _training_session(self, session):
        self._session_override = session

    @property
    def _load_state_dict(self):
        """What load_state_dict / load_checkpoint hold until the session exists (applied at the
        first step), as onnxruntime's: a ``functools.partial`` whose ``args[0]`` is the state dict
        (calling it loads it into the session); None when nothing is held."""
        if self._pending_state is None:
            return None
        import functools
        state, strict = self._pending_state
        return functools.partial(self._load_state, state, strict)

    def _job(self):
        """(world_rank, world_size): the session's job, or the options' before it exists."""
        if self._session is not None:
            return int(self._session.world_rank), int(self._session.world_size)
        d = self.options.distributed
        return int(d.world_rank), int(d.world_size)

    def state_dict(self, pytorch_format=False):
        """The trainer's state: ``{'model': {'full_precision': {w: array}}, 'optimizer': {w: {...}},
        'trainer_options': {...}, 'train_step_info': {...}}`` (and 'partition_info' with ZeRO or
        Megatron options, as onnxruntime), or ``{w: torch.Tensor}`` with ``pytorch_format=True``.
        Before the first step: a UserWarning (onnxruntime's) and the state dict held by
        load_state_dict, or {}."""
        sess = self._training_session
        if sess is None:
            warnings.warn("ONNX Runtime training session is not initialized yet. Please run train_step or eval_step "
                          "at least once before calling ORTTrainer.state_dict().", UserWarning)
            return copy.deepcopy(self._pending_state[0]) if self._pending_state is not None else {}
        model = {p: dict(ws) for p, ws in sess.get_model_state(include_mixed_precision_weights=False).items()}
        frozen = [w for w in self.options.utils.frozen_weights if w not in model.get("full_precision", {})]
        if frozen:  # the model's weights, trained or not, so that a torch module loads them all
            if self._session is not None and self._session_override is None:
                everything = self._session._initializers()
            else:
                import onnx.numpy_helper
                everything = {i.name: onnx.numpy_helper.to_array(i) for i in self._onnx_model.graph.initializer}
            model.setdefault("full_precision", {}).update({w: everything[w] for w in frozen if w in everything})
        if pytorch_format:
            d = self.options.distributed
            if d.deepspeed_zero_optimization.stage > 0:
                warnings.warn("Incomplete state_dict: ZeRO enabled", UserWarning)
            if d.horizontal_parallel_size > 1:
                warnings.warn("Incomplete state_dict: Megatron enabled", UserWarning)
            torch = _torch()
            return {k: torch.from_numpy(np.array(v)) for k, v in model.get("full_precision", {}).items()}
        rank, size = self._job()
        d = self.options.distributed
        state = {
            "model": model,
            "optimizer": sess.get_optimizer_state(),
            "trainer_options": {
                "mixed_precision": bool(self.options.mixed_precision.enabled),
                # The session's own job (the launcher fills options left at their defaults).
                "zero_stage": int(d.deepspeed_zero_optimization.stage) if size > 1 else 0,
                "world_rank": rank,
                "world_size": size,
                "optimizer_name": self.optim_config.name,
                "data_parallel_size": size,
                "horizontal_parallel_size": int(d.horizontal_parallel_size),
            },
            "train_step_info": {"optimization_step": int(self._train_step_info.optimization_step),
                                "step": int(self._train_step_info.step)},
        }
        if d.deepspeed_zero_optimization.stage > 0 or d.horizontal_parallel_size > 1:
            state["partition_info"] = sess.get_partition_info_map()
        return state

    def load_state_dict(self, state_dict, strict=True):
        """Loads a state_dict() (onnxtrain/onnxruntime format). With ``strict``, keys that differ from
        this trainer's raise StateDictMismatch naming them. Before the first step, it is applied when
        the model is initialized."""
        if not isinstance(state_dict, dict):
            raise TypeError("state_dict must be a dict")
        if self._training_session is None:
            self._pending_state = (copy.deepcopy(state_dict), strict)
            tsi = state_dict.get("train_step_info")
            if tsi:  # shown until the session exists, then set there (_load_state)
                self._train_step_info.optimization_step = int(tsi["optimization_step"])
                self._train_step_info.step = int(tsi["step"])
            return
        self._load_state(state_dict, strict)

    def _load_state(self, state_dict, strict):
        mine = self.state_dict()
        state_dict = self._from_wrapped_names(state_dict, mine)
        for top in ("model", "optimizer", "train_step_info"):
            if top not in state_dict:  # onnxruntime's warning; the rest of the state is loaded
                warnings.warn(f"Missing key: {top} in state_dict", UserWarning)
        if strict:
            problems = []
            got_p, want_p = set(state_dict.get("model", {})), set(mine.get("model", {}))
            if "model" in state_dict and got_p != want_p:
                problems.append(f"model: missing {sorted(want_p - got_p)}, unexpected {sorted(got_p - want_p)}")
            got_w = set(state_dict.get("model", {}).get("full_precision", {}))
            want_w = set(mine.get("model", {}).get("full_precision", {}))
            if "model" in state_dict and got_w != want_w:
                problems.append(f"model.full_precision: missing {sorted(want_w - got_w)}, unexpected {sorted(got_w - want_w)}")
            if "optimizer" in state_dict:
                got_o = set(state_dict["optimizer"])
                want_o = set(mine.get("optimizer", {}))
                if got_o != want_o:
                    problems.append(f"optimizer: missing {sorted(want_o - got_o)}, unexpected {sorted(got_o - want_o)}")
                for w in got_o & want_o:
                    gk, wk = set(state_dict["optimizer"][w]), set(mine["optimizer"][w])
                    if w == "shared_optimizer_state":  # onnxruntime writes 'Step', its docs say 'step'
                        gk, wk = ({"Step" if k == "step" else k for k in keys} for keys in (gk, wk))
                    if gk != wk:
                        problems.append(f"optimizer.{w}: missing {sorted(wk - gk)}, unexpected {sorted(gk - wk)}")
            if problems:
                raise StateDictMismatch("load_state_dict (strict): " + "; ".join(problems))
        if self._session is None:  # a session object assigned to _training_session: onnxruntime's hooks
            self._load_into_assigned_session(state_dict, mine, strict)
            return
        weights = {w: self._to_numpy(v) for w, v in state_dict.get("model", {}).get("full_precision", {}).items()}
        if not strict:
            weights = {w: v for w, v in weights.items() if w in mine.get("model", {}).get("full_precision", {})}
        opt, step = {}, None
        for w, states in state_dict.get("optimizer", {}).items():
            if w == "shared_optimizer_state":
                step = states.get("Step", states.get("step"))
                continue
            if not strict and w not in mine.get("optimizer", {}):
                continue
            for k, v in states.items():
                if k == "Update_Count":
                    step = v
                    continue
                opt[f"{k}_{w}"] = self._to_numpy(v)
        if step is not None:
            opt["step"] = np.asarray(self._to_numpy(step), dtype=np.int64).reshape(())
        self._session._sess.load_state(weights, False)
        if opt:
            self._session._sess.load_optimizer_state(opt, False)
        tsi = state_dict.get("train_step_info")
        if tsi:
            self._session._sess.set_progress(int(tsi["step"]), int(tsi["optimization_step"]))
        self._sync_progress()

    def _load_into_assigned_session(self, state_dict, mine, strict):
        """onnxruntime's load into an assigned ``_training_session``: the train step info is set, the
        weights the ONNX model holds are written into it (``_update_onnx_model_initializers``) and the
        session is made again with the optimizer state (the held one updated by ``state_dict``'s) by
        ``_init_session``."""
        tsi = state_dict.get("train_step_info")
        if tsi:
            self._train_step_info.optimization_step = int(tsi["optimization_step"])
            self._train_step_info.step = int(tsi["step"])
        names = {i.name for i in self._onnx_model.graph.initializer}
        weights = {w: v for w, v in state_dict.get("model", {}).get("full_precision", {}).items() if w in names}
        if strict:
            missing = sorted(names & set(mine.get("model", {}).get("full_precision", {})) - set(weights))
            if missing:
                raise RuntimeError(f"Missing keys: {missing} in state_dict[model][full_precision]")
        self._update_onnx_model_initializers(weights)
        optimizer = copy.deepcopy(mine.get("optimizer", {}))
        for w, states in state_dict.get("optimizer", {}).items():
            optimizer.setdefault(w, {}).update(states)
        self._init_session(optimizer, session_options=self.options.session_options,
                           provider_options=self.options._validated_opts.get("provider_options"))

    def _update_onnx_model_initializers(self, state_tensors):
        """onnxruntime's: replaces the initializers of ``_onnx_model`` named in ``state_tensors``
        (``{name: array}``) by those values."""
        if not isinstance(state_tensors, dict):
            raise TypeError("state_tensors must be a dict")
        graph = self._onnx_model.graph
        for i, init in enumerate(list(graph.initializer)):
            if init.name in state_tensors:
                graph.initializer[i].CopyFrom(onnx.numpy_helper.from_array(self._to_numpy(state_tensors[init.name]),
                                                                           init.name))

    def _init_session(self, optimizer_state_dict={}, session_options=None, provider_options=None):  # noqa: B006
        """onnxruntime's hook that makes the training session again from ``_onnx_model`` holding
        ``optimizer_state_dict``. onnxtrain makes its session from the model at the first step (its
        own path); on a trainer whose ``_training_session`` was assigned (onnxruntime's tests assign a
        mock) it raises NotImplementedError."""
        raise NotImplementedError("ORTTrainer._init_session: the assigned ORTTrainer._training_session is not an "
                                  "onnxtrain TrainingSession; onnxtrain cannot make it again with a loaded state")

    def _from_wrapped_names(self, state_dict, mine):
        """``state_dict`` of an earlier onnxtrain, whose weights of a torch model trained with a
        loss_fn were named "model.<w>", renamed to this version's (onnxruntime's) "<w>" when that,
        and only that, makes it fit this trainer's weights."""
        if self.loss_fn is None or not isinstance(state_dict.get("model"), dict):
            return state_dict
        full = state_dict["model"].get("full_precision")
        want = set(mine.get("model", {}).get("full_precision", {}))
        if not isinstance(full, dict) or not full or set(full) == want:
            return state_dict
        if not all(isinstance(n, str) and n.startswith("model.") for n in full):
            return state_dict
        if {n[len("model."):] for n in full} != want:
            return state_dict

        def bare(n):
            return n[len("model."):] if isinstance(n, str) and n.startswith("model.") else n

        out = dict(state_dict, model=dict(state_dict["model"], full_precision={bare(k): v for k, v in full.items()}))
        if isinstance(state_dict.get("optimizer"), dict):
            out["optimizer"] = {bare(k): v for k, v in state_dict["optimizer"].items()}
        return out

    def save_checkpoint(self, path, user_dict={}, include_optimizer_states=True):  # noqa: B006 (onnxruntime's signature)
        """Writes state_dict() and ``user_dict`` to ``path`` (a path or a writable file-like object;
        an existing file is never overwritten) as onnxruntime 1.13 does: ``user_dict`` (when not
        empty) is stored as ``state['user_dict'] = _checkpoint_storage.to_serialized_hex(user_dict)``
        and the state written by ``_checkpoint_storage.save(state, path)`` (onnxtrain's format: a CRC
        per tensor, written atomically). Before the first step the state is what state_dict()
        returns then (with its warning). ``user_dict`` comes back from load_checkpoint as it was
        saved: dicts (keys str, int, float, bool or None), lists, tuples, numpy arrays and scalars,
        torch tensors (on the CPU, detached), str, int, float, bool, None. Anything else raises
        TypeError, nesting deeper than 64 InvalidArgument, before anything is written."""
        if not isinstance(user_dict or {}, dict):
            raise TypeError(f"save_checkpoint: user_dict must be a dict, got {type(user_dict).__name__}")
        if not hasattr(path, "write") and os.path.exists(os.fspath(path)):
            raise FileExistsError(f"save_checkpoint: '{os.fspath(path)}' exists; checkpoints are never overwritten")
        state = self.state_dict()
        if user_dict:
            _check_user_dict(user_dict)
            state["user_dict"] = _checkpoint_storage.to_serialized_hex(user_dict)
        if not include_optimizer_states:
            state.pop("optimizer", None)
        _checkpoint_storage.save(state, path)

    def load_checkpoint(self, *paths, strict=True):
        """Loads a checkpoint written by save_checkpoint (or the files of every rank of a ZeRO /
        Megatron run); returns its ``user_dict``. As onnxruntime 1.13: reads
        ``_checkpoint_storage.load(paths[0], key='trainer_options')``; when the run was partitioned
        (zero_stage > 0 or horizontal_parallel_size > 1) the state is
        ``checkpoint.aggregate_checkpoints(paths, pytorch_format=False)``, else the one file's
        ``_checkpoint_storage.load(path)``. Files of earlier onnxtrain versions load too. A file that is
        not such a checkpoint (truncated, damaged, malformed), or whose names or weights do not fit this
        model, raises ``InvalidArgument`` naming it."""
        if not paths:
            raise TypeError("load_checkpoint: give the checkpoint file (or every rank's file of a distributed run)")
        options = load_saved(paths[0], "trainer_options")
        if int(options["zero_stage"]) > 0 or int(options["horizontal_parallel_size"]) > 1:
            from . import checkpoint
            state = checkpoint.aggregate_checkpoints(paths, pytorch_format=False)
        elif len(paths) != 1:
            raise ValueError(f"load_checkpoint: expected number of files to load: 1, got {len(paths)} (the "
                             "checkpoint is not partitioned: zero_stage 0, horizontal_parallel_size 1)")
        else:
            state = load_saved(paths[0])
        user = {}
        if "user_dict" in state:
            user = _checkpoint_storage.from_serialized_hex(state.pop("user_dict"))
        if "optimizer" not in state:
            strict = False
        try:
            self.load_state_dict(state, strict=strict)
        except (KeyError, ValueError, _errors.OnnxTrainError) as e:  # names or weights the model refuses
            names = ", ".join(f"'{os.fspath(p)}'" for p in paths)
            detail = e.args[0] if isinstance(e, KeyError) and e.args else e
            raise _errors.InvalidArgument(f"load_checkpoint: checkpoint {names} does not fit this model: "
                                          f"{detail}") from e
        return user


def _check_user_dict(user_dict):
    """Raises (TypeError / InvalidArgument naming the entry) for what a checkpoint's user_dict cannot
    hold, before anything is written."""
    _Packer().pack(user_dict, ["user"])


def load_saved(path, key=None):
    """``_checkpoint_storage.load(path)`` (``key``: one top-level entry, ``load(path, key=key)``) of a
    checkpoint of ORTTrainer.save_checkpoint. A file of an earlier onnxtrain (its ORTTrainer
    checkpoint format) is read as that; its user_dict comes back as a to_serialized_hex string, as
    this version writes it. Any other file raises InvalidArgument naming it."""
    try:
        return _checkpoint_storage.load(path) if key is None else _checkpoint_storage.load(path, key=key)
    except ValueError as e:
        if hasattr(path, "read"):
            raise _errors.InvalidArgument(f"load_checkpoint: {e}") from None
        storage_error = e
    try:
        state, user = _read_checkpoint(path)
    except _errors.InvalidArgument:
        with open(path, "rb") as f:
            archive = f.read(4) == b"PK\x03\x04"
        if archive or "onnxtrain.ORTTrainer" in str(storage_error):
            raise  # a file of an earlier version: its reader names what is wrong
        raise _errors.InvalidArgument(f"load_checkpoint: {storage_error}") from None
    if user:
        state = dict(state, user_dict=_checkpoint_storage.to_serialized_hex(user))
    if key is None:
        return state
    if key not in state:
        raise KeyError(f"load_checkpoint: '{os.fspath(path)}' has no '{key}' entry")
    return state[key]
