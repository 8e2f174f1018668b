"""onnxruntime-training's ``onnxruntime.training.checkpoint``: the experimental checkpoint functions
over an ``ORTTrainer`` (flat ``{name: torch.Tensor}`` state, files written with ``torch.save`` as
onnxruntime wrote them) and ``aggregate_checkpoints`` over files of ``ORTTrainer.save_checkpoint``.

``aggregate_checkpoints`` merges the files of the ranks of a run as onnxruntime 1.13 (through
``_checkpoint_storage.load``): replicas (checked to agree), ZeRO and Megatron shards named by the
files' ``partition_info`` (concatenated in rank order, reshaped to ``original_dim``). The experimental
functions handle unpartitioned files only: ZeRO rank files (``<prefix>.ZeRO.<rank>.<size>.ort.pt``)
and Megatron (horizontally) partitioned checkpoints raise NotImplementedError — save and resume
ZeRO runs with ``ORTTrainer.save_checkpoint`` / ``load_checkpoint(*paths)``. onnxtrain adds
``average_checkpoints`` (weight averaging) and ``to_pytorch_state_dict``.
"""
import os
import re
import warnings

import numpy as np

from .. import _plain_torch
from .orttrainer import load_saved

_OPTIMIZER_PREFIXES = ("Moment_1_", "Moment_2_", "Update_Count_")
_SINGLE_NAME = "{prefix}.ort.pt"
_ZERO_NAME = "{prefix}.ZeRO.{world_rank}.{world_size}.ort.pt"
_NOT_PARTITIONED = ("the experimental checkpoint functions do not handle partitioned (ZeRO / Megatron) files; "
                    "ZeRO stage 1 runs save and resume with ORTTrainer.save_checkpoint / load_checkpoint(*paths)")


def _torch():
    import torch
    return torch


def _numpy(v):
    return v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)


# ---------------------------------------------------------------------------------- experimental API
def experimental_state_dict(ort_trainer, include_optimizer_state=True):
    """The trainer's state as onnxruntime's flat ``{name: torch.Tensor}``: every weight (frozen ones
    too) and, with ``include_optimizer_state``, the optimizer states (``Moment_1_<w>``,
    ``Moment_2_<w>``, ``Update_Count_<w>``, ``Step``)."""
    warnings.warn("experimental_state_dict() will be deprecated soon. Please use ORTTrainer.state_dict() instead.",
                  DeprecationWarning)
    if ort_trainer._session is None:
        warnings.warn("ONNX Runtime training session is not initialized yet. "
                      "Please run train_step or eval_step at least once before calling state_dict().")
        return {}
    torch = _torch()
    names = {i.name for i in ort_trainer._onnx_model.graph.initializer}
    state = {k: torch.from_numpy(np.array(v)) for k, v in ort_trainer._session._initializers().items() if k in names}
    if include_optimizer_state:
        for w, states in ort_trainer.state_dict().get("optimizer", {}).items():
            for k, v in states.items():
                key = "Step" if w == "shared_optimizer_state" else f"{k}_{w}"
                state[key] = torch.from_numpy(np.array(v))
    return state


def _split_state_dict(state_dict):
    """Flat state -> ``{'optimizer': ..., 'fp32_param': ..., 'fp16_param': ...}`` by name."""
    split = {"optimizer": {}, "fp32_param": {}, "fp16_param": {}}
    for k, v in state_dict.items():
        if k == "Step" or k.startswith(_OPTIMIZER_PREFIXES):
            split["optimizer"][k] = v
        elif k.endswith("_fp16"):
            split["fp16_param"][k] = v
        else:
            split["fp32_param"][k] = v
    return split


def _to_trainer_state(flat):
    """Flat onnxruntime state -> ORTTrainer.state_dict() schema (model and optimizer parts)."""
    split = _split_state_dict(flat)
    # onnxruntime's fp16 runs saved float16 copies "<w>_fp16" beside the float32 master weights:
    # onnxtrain casts the masters on the fly, so a copy whose master is present carries nothing.
    orphans = sorted(k for k in split["fp16_param"] if k[:-len("_fp16")] not in split["fp32_param"])
    if orphans:
        raise NotImplementedError(f"mixed-precision weights {orphans} without their float32 master weights: onnxtrain "
                                  "trains from float32 masters")
    state = {"model": {"full_precision": {k: _numpy(v) for k, v in split["fp32_param"].items()}}, "optimizer": {}}
    for k, v in split["optimizer"].items():
        if k == "Step":
            state["optimizer"]["shared_optimizer_state"] = {"Step": _numpy(v)}
            continue
        prefix = next(p for p in _OPTIMIZER_PREFIXES if k.startswith(p))
        state["optimizer"].setdefault(k[len(prefix):], {})[prefix[:-1]] = _numpy(v)
    return state


def experimental_load_state_dict(ort_trainer, state_dict, strict=False):
    """Loads a flat state (experimental_state_dict's). With ``strict``, a name that is not a weight
    of the model raises RuntimeError. Before the first step it is applied when the model is built."""
    warnings.warn("experimental_load_state_dict() will be deprecated soon. "
                  "Please use ORTTrainer.load_state_dict() instead.", DeprecationWarning)
    if not isinstance(state_dict, dict):
        raise TypeError(f"state_dict must be a dict, got {type(state_dict).__name__}")
    state = _to_trainer_state(state_dict)
    if strict and ort_trainer._onnx_model is not None:
        names = {i.name for i in ort_trainer._onnx_model.graph.initializer}
        for name in list(state["model"]["full_precision"]) + [w for w in state["optimizer"]
                                                               if w != "shared_optimizer_state"]:
            if name not in names:
                raise RuntimeError(f"Checkpoint tensor: {name} is not present in the model.")
    ort_trainer.load_state_dict(state, strict=False)


def _get_checkpoint_name(prefix, is_partitioned, world_rank=None, world_size=None):
    """``<prefix>.ort.pt``, or ``<prefix>.ZeRO.<rank>.<world_size - 1>.ort.pt`` when partitioned."""
    if is_partitioned:
        return _ZERO_NAME.format(prefix=prefix, world_rank=world_rank, world_size=world_size - 1)
    return _SINGLE_NAME.format(prefix=prefix)


def experimental_save_checkpoint(ort_trainer, checkpoint_dir, checkpoint_prefix="ORT_checkpoint",
                                 checkpoint_state_dict=None, include_optimizer_state=True):
    """Writes ``{'model': experimental_state_dict(...), **checkpoint_state_dict}`` with ``torch.save``
    to ``<checkpoint_dir>/<checkpoint_prefix>.ort.pt`` (overwriting it with a warning, as onnxruntime did).
    ``checkpoint_prefix`` must be a plain name (no separator, ``..`` or NUL) and
    ``checkpoint_state_dict`` plain data (tensors, dicts, lists, tuples, str, int, float, bool, None):
    else ``InvalidArgument`` before anything is written."""
    warnings.warn("experimental_save_checkpoint() will be deprecated soon. "
                  "Please use ORTTrainer.save_checkpoint() instead.", DeprecationWarning)
    _plain_torch.check_prefix(checkpoint_prefix)
    if not os.path.isdir(checkpoint_dir):
        raise FileNotFoundError(f"checkpoint_dir ({checkpoint_dir}) directory doesn't exist")
    if checkpoint_state_dict is not None and not isinstance(checkpoint_state_dict, dict):
        raise TypeError("checkpoint_state_dict must be a dict")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        content = dict(checkpoint_state_dict or {})
        content["model"] = experimental_state_dict(ort_trainer, include_optimizer_state)
    dist = ort_trainer.options.distributed
    name = _get_checkpoint_name(checkpoint_prefix, dist.deepspeed_zero_optimization.stage, dist.world_rank,
                                dist.world_size)
    path = os.path.join(checkpoint_dir, name)
    _plain_torch.check(content, path)  # what the loader accepts: nothing but plain data
    if os.path.exists(path):
        warnings.warn(f"{path} already exists, overwriting.")
    from .._files import atomic_open
    with atomic_open(path, "checkpoint") as f:
        _torch().save(content, f)


def _rank_of(path):
    m = re.search(r"\.ZeRO\.(\d+)\.(\d+)\.[^/\\]*$", os.path.basename(path))
    return (int(m.group(1)), path) if m else (-1, path)


def _list_checkpoint_files(checkpoint_dir, checkpoint_prefix, extension=".ort.pt"):
    """Paths of the files ``<checkpoint_prefix>*<extension>`` in ``checkpoint_dir``, in rank order
    (``.ZeRO.<rank>.`` names), else by name. FileNotFoundError when there is none."""
    if not os.path.isdir(checkpoint_dir):
        raise FileNotFoundError(f"checkpoint_dir ({checkpoint_dir}) directory doesn't exist")
    names = [f for f in os.listdir(checkpoint_dir) if f.startswith(checkpoint_prefix) and f.endswith(extension)]
    if not names:
        raise FileNotFoundError(f"No checkpoint found with prefix '{checkpoint_prefix}' at '{checkpoint_dir}'")
    return [p for _, p in sorted(_rank_of(os.path.join(checkpoint_dir, f)) for f in names)]


def experimental_load_checkpoint(ort_trainer, checkpoint_dir, checkpoint_prefix="ORT_checkpoint", strict=False):
    """Loads ``<checkpoint_dir>/<checkpoint_prefix>.ort.pt`` (experimental_save_checkpoint's, or
    onnxruntime's) into the trainer; returns the file's other entries. Several ZeRO rank files raise
    NotImplementedError. Only tensors and plain containers are read (nothing in the file is run): a
    file holding anything else, or damaged, raises ``InvalidArgument`` naming it."""
    warnings.warn("experimental_load_checkpoint() will be deprecated soon. "
                  "Please use ORTTrainer.load_checkpoint() instead.", DeprecationWarning)
    _plain_torch.check_prefix(checkpoint_prefix)
    files = _list_checkpoint_files(checkpoint_dir, checkpoint_prefix)
    if len(files) > 1:
        raise NotImplementedError(f"experimental_load_checkpoint: {len(files)} files with prefix "
                                  f"'{checkpoint_prefix}' in '{checkpoint_dir}' (a ZeRO checkpoint): {_NOT_PARTITIONED}")
    dist = ort_trainer.options.distributed
    path = os.path.join(checkpoint_dir, _get_checkpoint_name(checkpoint_prefix, False))
    if files[0] != path:
        if _rank_of(files[0])[0] >= 0:
            raise NotImplementedError(f"experimental_load_checkpoint: '{files[0]}' is a partitioned checkpoint: "
                                      f"{_NOT_PARTITIONED}")
        raise FileNotFoundError(f"Couldn't find checkpoint file {path}.")
    if dist.deepspeed_zero_optimization.stage:
        raise NotImplementedError(f"experimental_load_checkpoint with ZeRO enabled: {_NOT_PARTITIONED}")
    content = _plain_torch.load_checkpoint(path, "experimental_save_checkpoint")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        experimental_load_state_dict(ort_trainer, content.pop("model"), strict=strict)
    return content


# ----------------------------------------------------------------- files of ORTTrainer.save_checkpoint
def _load_state(checkpoint):
    """The state of a checkpoint path (ORTTrainer.save_checkpoint's), or the state dict given."""
    if isinstance(checkpoint, dict):
        return checkpoint
    if not isinstance(checkpoint, (str, os.PathLike)):
        raise TypeError(f"a checkpoint is a path or a state dict, got {type(checkpoint).__name__}")
    if not os.path.isfile(checkpoint):
        raise FileNotFoundError(f"checkpoint '{os.fspath(checkpoint)}' does not exist")
    return load_saved(checkpoint)


def _weights(state, where):
    try:
        return state["model"]["full_precision"]
    except (KeyError, TypeError):
        raise ValueError(f"{where} has no model.full_precision weights (not an ORTTrainer state)") from None


def _to_pytorch_format(state_dict, strip_prefix=""):
    """ORTTrainer state (hierarchical) -> flat ``{name: torch.Tensor}``; ``strip_prefix`` is removed
    from the names that start with it."""
    torch = _torch()
    out = {}
    for k, v in _weights(state_dict, "the state").items():
        name = k[len(strip_prefix):] if strip_prefix and k.startswith(strip_prefix) else k
        if name in out:
            raise ValueError(f"stripping '{strip_prefix}' makes two weights named '{name}'")
        out[name] = torch.tensor(np.asarray(_numpy(v)))
    return out


def to_pytorch_state_dict(checkpoint, strip_prefix=""):
    """A checkpoint (path written by ``ORTTrainer.save_checkpoint``, or a ``state_dict()``) as a PyTorch
    state dict ``{name: torch.Tensor}``. For a torch model trained with ``loss_fn``, the weights are
    named ``model.<name>``: ``strip_prefix="model."`` gives the names the module's ``load_state_dict``
    takes. Frozen weights are not part of the trained state."""
    state = _load_state(checkpoint)
    return _to_pytorch_format(state, strip_prefix)


_ZERO, _MEGATRON = "Zero", "Megatron"
_SHARDED_OPTIMIZER_KEYS = ("Moment_1", "Moment_2")


def _parallel_groups(data_parallel_size, horizontal_parallel_size, world_size):
    """onnxruntime's rank groups: data-parallel groups (rank g + horizontal_parallel_size * i) and
    horizontal groups (horizontal_parallel_size consecutive ranks)."""
    data = [[g + horizontal_parallel_size * i for i in range(data_parallel_size)]
            for g in range(world_size // data_parallel_size)]
    horizontal = [[g * horizontal_parallel_size + i for i in range(horizontal_parallel_size)]
                  for g in range(world_size // horizontal_parallel_size)]
    return data, horizontal


def aggregate_checkpoints(paths, pytorch_format=True):
    """Merges the checkpoint files of the ranks of one run (``ORTTrainer.save_checkpoint``) into one
    state, as onnxruntime 1.13: ``{name: torch.Tensor}`` with ``pytorch_format``, else the
    ``ORTTrainer.state_dict()`` schema of a world of size 1 (with the first rank's user_dict, as
    saved: a to_serialized_hex string). Files are read with ``_checkpoint_storage.load`` (first
    ``key='trainer_options'`` of ``paths[0]``, then of every path to order them by rank, then each
    whole). States named in a file's ``partition_info`` are shards: ZeRO (zero_stage > 0) optimizer
    Moment_1/Moment_2 (and, with mixed precision, the weights) are concatenated in rank order and
    reshaped to ``original_dim``; Megatron (horizontal_parallel_size > 1) shards are concatenated on
    the axis ``megatron_row_partition`` gives. Every other state must be the same in every file
    (ValueError "Value mismatch for model state ..."). Files of an unpartitioned data-parallel run
    (onnxruntime returned None for them) merge as replicas. The files must be those of ranks
    0..world_size-1."""
    if isinstance(paths, (str, os.PathLike)) or not paths:
        raise ValueError("paths must be a non-empty list of checkpoint files")
    paths = list(paths)
    opts = load_saved(paths[0], "trainer_options")
    dp, hp, world = (int(opts[k]) for k in ("data_parallel_size", "horizontal_parallel_size", "world_size"))
    if dp < 1 or hp < 1 or dp * hp != world:
        raise ValueError(f"aggregate_checkpoints: '{paths[0]}' has data_parallel_size {dp} and horizontal_parallel_size "
                         f"{hp} for world_size {world}")
    data_groups, horizontal_groups = _parallel_groups(dp, hp, world)
    ranked = sorted(((int(load_saved(p, "trainer_options")["world_rank"]), i, p) for i, p in enumerate(paths)),
                    key=lambda e: e[0])
    ranks = [r for r, _, _ in ranked]
    if ranks != list(range(world)):
        raise ValueError(f"aggregate_checkpoints: expected the files of ranks 0..{world - 1} of one run, got ranks "
                         f"{ranks}")
    by_rank = [p for _, _, p in ranked]
    dims = {}
    if int(opts["zero_stage"]) > 0 and hp > 1:
        partial = [_over_ranks([by_rank[r] for r in g], g, dims, _ZERO, False, partial=True) for g in data_groups]
        return _over_ranks(partial, horizontal_groups[0], dims, _MEGATRON, pytorch_format)
    if hp > 1:
        group = horizontal_groups[0]
        return _over_ranks([by_rank[r] for r in group], group, dims, _MEGATRON, pytorch_format)
    return _over_ranks([by_rank[r] for r in data_groups[0]], data_groups[0], dims, _ZERO, pytorch_format)


def _over_ranks(items, ranks, dims, mode, pytorch_format, partial=False):
    """One state from ``items`` (paths, or states of a partial aggregation) of ``ranks``; ``dims``
    collects the original shapes of sharded states. A partial aggregation keeps its first rank and
    the Megatron partition info, and reshapes nothing."""
    merged, first = {}, None
    for i, item in enumerate(items):
        state = item if isinstance(item, dict) else load_saved(item)
        where = f"partial aggregate {i}" if isinstance(item, dict) else os.fspath(item)
        opts = state.get("trainer_options")
        if not isinstance(opts, dict):
            raise ValueError(f"aggregate_checkpoints: '{where}': missing trainer_options")
        info = state.get("partition_info", {})
        if int(opts["world_rank"]) != ranks[i]:
            raise ValueError(f"Unexpected rank in file at path {where}. Expected {ranks[i]}, got {opts['world_rank']}")
        if first is None:
            first = opts
        for key, what in (("mixed_precision", "Mixed precision state"), ("world_size", "World size state"),
                          ("zero_stage", "Zero stage"), ("optimizer_name", "Optimizer name")):
            if opts.get(key) != first.get(key):
                raise ValueError(f"{what} mismatch among checkpoint files. File: {where}")
        mixed = bool(first["mixed_precision"])
        if "model" in state:
            model = merged.setdefault("model", {}).setdefault("full_precision", {})
            for w, v in _weights(state, where).items():
                if w in info and (mode == _MEGATRON or mixed):
                    _add_shard(model, w, v, w, info[w], dims, mode)
                else:
                    _add_same(model, w, v, f"Value mismatch for model state {w}")
        if pytorch_format:
            continue
        for w, states in state.get("optimizer", {}).items():
            entry = merged.setdefault("optimizer", {}).setdefault(w, {})
            for k, v in states.items():
                if k in _SHARDED_OPTIMIZER_KEYS and w in info:
                    _add_shard(entry, k, v, w, info[w], dims, mode)
                else:
                    _add_same(entry, k, v, f"Value mismatch for model state {w} and optimizer state {k}")
        if partial:
            kept = merged.setdefault("partition_info", {})
            for w, winfo in info.items():
                if w not in kept and int(winfo.get("megatron_row_partition", -1)) >= 0:
                    kept[w] = winfo
        if "trainer_options" not in merged:
            merged["trainer_options"] = {"mixed_precision": opts["mixed_precision"], "zero_stage": 0,
                                         "world_rank": opts["world_rank"] if partial else 0, "world_size": 1,
                                         "optimizer_name": opts.get("optimizer_name"), "data_parallel_size": 1,
                                         "horizontal_parallel_size": 1}
        for key in ("user_dict", "train_step_info"):  # train_step_info: onnxtrain's files carry it
            if key not in merged and key in state:
                merged[key] = state[key]
    if not partial:
        for w, dim in dims.items():
            if bool(first["mixed_precision"]) and "model" in merged:
                merged["model"]["full_precision"][w] = np.reshape(merged["model"]["full_precision"][w], dim)
            for k, v in merged.get("optimizer", {}).get(w, {}).items():
                if k in _SHARDED_OPTIMIZER_KEYS:
                    merged["optimizer"][w][k] = np.reshape(v, dim)
    return _to_pytorch_format(merged) if pytorch_format else merged


def _add_shard(entry, key, value, weight, winfo, dims, mode):
    """Appends the shard ``value`` of ``key`` (a state of ``weight``) to ``entry``. A value already
    of the original shape is whole (onnxtrain's weights under ZeRO with mixed precision), checked
    as an unsharded one."""
    dims[weight] = [int(d) for d in np.asarray(winfo["original_dim"]).ravel()]
    axis = -1 if mode == _MEGATRON and int(winfo.get("megatron_row_partition", -1)) == 0 else 0
    value = np.asarray(_numpy(value))
    whole = list(value.shape) == dims[weight] and (value.ndim > 1 or key in entry and entry[key].shape == value.shape)
    if whole:
        _add_same(entry, key, value, f"Value mismatch for model state {weight} ({key})")
        return
    entry[key] = np.concatenate((entry[key], value), axis) if key in entry else value


def _add_same(entry, key, value, mismatch):
    """Adds the unsharded ``value``, or checks that it equals the one already there."""
    value = np.asarray(_numpy(value))
    if key in entry:
        if entry[key].shape != value.shape or not np.array_equal(entry[key], value):
            raise ValueError(mismatch)
    else:
        entry[key] = value


def average_checkpoints(checkpoints, pytorch_format=True, strip_prefix=""):
    """Element-wise mean of the weights of several checkpoints (paths of ``ORTTrainer.save_checkpoint``
    or ``state_dict()``s), computed in float64 and returned in each weight's type: ``{name: torch.Tensor}``
    with ``pytorch_format`` (names without ``strip_prefix``), else ``{'model': {'full_precision': ...}}``
    for ``ORTTrainer.load_state_dict(..., strict=False)``. Optimizer states are not averaged."""
    if isinstance(checkpoints, (str, os.PathLike, dict)) or not checkpoints:
        raise ValueError("checkpoints must be a non-empty list of checkpoint paths or state dicts")
    all_weights = []
    for i, c in enumerate(checkpoints):
        state = _load_state(c)
        where = f"checkpoint {i}" if isinstance(c, dict) else f"'{os.fspath(c)}'"
        weights = {k: _numpy(v) for k, v in _weights(state, where).items()}
        all_weights.append((where, weights))
    ref_where, ref = all_weights[0]
    for where, weights in all_weights[1:]:
        if set(weights) != set(ref):
            raise ValueError(f"average_checkpoints: {where} has weights missing {sorted(set(ref) - set(weights))}, "
                             f"unexpected {sorted(set(weights) - set(ref))} compared with {ref_where}")
        for k, v in weights.items():
            if v.shape != ref[k].shape or v.dtype != ref[k].dtype:
                raise ValueError(f"average_checkpoints: weight '{k}' is {v.dtype}{list(v.shape)} in {where} but "
                                 f"{ref[k].dtype}{list(ref[k].shape)} in {ref_where}")
    averaged = {}
    for k, v in ref.items():
        if v.dtype.kind != "f":
            raise ValueError(f"average_checkpoints: weight '{k}' has non-float type {v.dtype}")
        mean = np.mean(np.stack([w[k].astype(np.float64) for _, w in all_weights]), axis=0)
        averaged[k] = mean.astype(v.dtype)
    state = {"model": {"full_precision": averaged}}
    return _to_pytorch_format(state, strip_prefix) if pytorch_format else state
