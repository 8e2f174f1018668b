"""ORTTrainer's checkpoint files (``ORTTrainer.save_checkpoint`` / ``load_checkpoint``, and
``onnxtrain.training.checkpoint.aggregate_checkpoints``): the trainer's state dict and the user's
``user_dict`` in onnxtrain's one checkpoint format (``include/onnxtrain/checkpoint.h``:
``CheckpointFile``, written and verified in C++: a CRC per tensor and for the header, written
atomically), never pickled. Nothing of the file format is implemented here; this module only maps
Python objects onto named tensors and a JSON index.

A file holds kind ``onnxtrain.ORTTrainer``, text ``index`` (JSON)::

    {"format": _CHECKPOINT_FORMAT, "state": <node>, "user": <node>, "npy": [<member>, ...]}

where a node is {"dict": [[key, <node>], ...]} (keys str, int, float, bool or None, in order),
{"list": [<node>, ...]}, {"tuple": [...]}, {"array": <member>} (numpy array), {"scalar": <member>}
(numpy scalar), {"tensor": <member>, "dtype": <torch dtype name>} (torch tensor) or {"value": <str,
int, float, bool, null>}; a member names a tensor of the file. Arrays of numbers in native byte
order are tensors as they are; the others (strings, complex, big-endian...) are the uint8 bytes of
their ``.npy`` serialization (listed in "npy", read back with ``allow_pickle=False``).

Files of earlier versions (a numpy ``.npz`` archive with the same index in "__meta__", formats /2
and /1) are still read.
"""
import io
import json
import os

import numpy as np

from .. import _C, _errors

_KIND = "onnxtrain.ORTTrainer"
_CHECKPOINT_FORMAT = "onnxtrain.ORTTrainer.checkpoint/3"
_NPZ_FORMAT = "onnxtrain.ORTTrainer.checkpoint/2"
_NPZ_FORMAT_V1 = "onnxtrain.ORTTrainer.checkpoint/1"  # path-keyed entries (ambiguous for keys holding '/')
_CKPT_MAGIC = b"ONNXTRAIN-CKPT\0\0"


def _torch():
    import torch
    return torch


_MAX_NESTING = 64
_PLAIN = (str, int, float, bool, type(None))


def _is_tensor(obj):
    if not type(obj).__module__.startswith("torch"):
        return False
    return isinstance(obj, _torch().Tensor)


class _Packer:
    """save_checkpoint's side: the meta node of an object, its arrays collected in ``arrays``."""

    def __init__(self, arrays=None):
        self.arrays = {} if arrays is None else arrays

    def _member(self, path, array):
        if array.dtype.hasobject:
            raise TypeError(f"save_checkpoint: '{self._where(path)}' is an array of Python objects, which a checkpoint "
                            "does not store (nothing is pickled)")
        name = "/".join(str(p).replace("%", "%25").replace("/", "%2F") for p in path)
        while name in self.arrays or name == "__meta__":  # keys of other types with the same text
            name += "%"
        self.arrays[name] = array
        return name

    @staticmethod
    def _where(path):
        return path[0] + "".join(f"[{p!r}]" for p in path[1:])

    def pack(self, obj, path):
        if len(path) > _MAX_NESTING:
            raise _errors.InvalidArgument(f"save_checkpoint: '{self._where(path[:4])}...' is nested deeper than "
                                          f"{_MAX_NESTING} levels (or contains itself)")
        if isinstance(obj, dict):
            items = []
            for k, v in obj.items():
                if type(k) not in _PLAIN:
                    raise TypeError(f"save_checkpoint: '{self._where(path)}' has a key of type {type(k).__name__} "
                                    "(str, int, float, bool or None keys only)")
                items.append([k, self.pack(v, path + [k])])
            return {"dict": items}
        if type(obj) in (list, tuple):
            return {type(obj).__name__: [self.pack(v, path + [i]) for i, v in enumerate(obj)]}
        if type(obj) in _PLAIN:
            return {"value": obj}
        if isinstance(obj, np.ndarray):
            return {"array": self._member(path, obj)}
        if isinstance(obj, np.generic):
            return {"scalar": self._member(path, np.asarray(obj))}
        if _is_tensor(obj):
            torch = _torch()
            t = obj.detach().cpu()
            if t.layout != torch.strided:
                raise TypeError(f"save_checkpoint: '{self._where(path)}' is a {t.layout} tensor (dense tensors only)")
            dtype = str(t.dtype).replace("torch.", "")
            array = t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()
            return {"tensor": self._member(path, array), "dtype": dtype}
        raise TypeError(f"save_checkpoint: '{self._where(path)}' holds a {type(obj).__module__}."
                        f"{type(obj).__qualname__}, which a checkpoint cannot store (dicts, lists, tuples, numpy "
                        "arrays and scalars, torch tensors, str, int, float, bool, None)")


class _Damaged(Exception):
    """What is wrong with a checkpoint file (raised as InvalidArgument naming the file)."""


class _Unpacker:
    """load_checkpoint's side: rebuilds the objects from the meta nodes and the archive's arrays."""

    def __init__(self, archive):
        self.z = archive
        self.members = set(archive.files)

    def array(self, name, where):
        if not isinstance(name, str) or name not in self.members:
            raise _Damaged(f"{where}: array {name!r} is missing")
        return np.array(self.z[name])

    def unpack(self, node, where, depth=0):
        if depth > _MAX_NESTING:
            raise _Damaged(f"{where}: nested deeper than {_MAX_NESTING} levels")
        if not isinstance(node, dict) or not node:
            raise _Damaged(f"{where}: malformed index entry")
        kind = next(iter(node))
        body = node[kind]
        if kind == "dict" and isinstance(body, list) and len(node) == 1:
            out = {}
            for item in body:
                if not (isinstance(item, list) and len(item) == 2 and type(item[0]) in _PLAIN) or item[0] in out:
                    raise _Damaged(f"{where}: malformed or repeated dict key")
                out[item[0]] = self.unpack(item[1], f"{where}[{item[0]!r}]", depth + 1)
            return out
        if kind in ("list", "tuple") and isinstance(body, list) and len(node) == 1:
            items = [self.unpack(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(body)]
            return items if kind == "list" else tuple(items)
        if kind == "value" and type(body) in _PLAIN and len(node) == 1:
            return body
        if kind == "array" and len(node) == 1:
            return self.array(body, where)
        if kind == "scalar" and len(node) == 1:
            a = self.array(body, where)
            if a.shape != ():
                raise _Damaged(f"{where}: scalar of shape {list(a.shape)}")
            return a[()]
        if kind == "tensor" and set(node) == {"tensor", "dtype"}:
            torch = _torch()
            a = self.array(body, where)
            if node["dtype"] == "bfloat16" and a.dtype == np.int16:
                return torch.from_numpy(a).view(torch.bfloat16)
            t = torch.from_numpy(a)
            if str(t.dtype) != f"torch.{node['dtype']}":
                raise _Damaged(f"{where}: tensor stored as {a.dtype}, index says {node['dtype']!r}")
            return t
        raise _Damaged(f"{where}: malformed index entry (kind {kind!r})")

    def unpack_v1(self, meta, prefix, depth=0):
        """Format /1: entries keyed by the '/'-joined path."""
        if depth > _MAX_NESTING:
            raise _Damaged(f"{prefix}: nested deeper than {_MAX_NESTING} levels")
        m = meta.get(prefix)
        if not isinstance(m, dict):
            raise _Damaged(f"index entry '{prefix}' is missing")
        kind = m.get("kind")
        if kind == "dict" and isinstance(m.get("keys"), list) and all(isinstance(k, str) for k in m["keys"]):
            return {k: self.unpack_v1(meta, f"{prefix}/{k}", depth + 1) for k in m["keys"]}
        if kind == "array":
            return self.array(prefix, prefix)
        if kind == "json" and "value" in m:
            return m["value"]
        raise _Damaged(f"index entry '{prefix}' is malformed")


def _numeric(a):
    return isinstance(a, np.ndarray) and a.dtype.kind in "biuf"


def _check_state(state):
    """The checkpoint's state has the shape of ORTTrainer.state_dict() (arrays of numbers)."""
    if not isinstance(state, dict):
        raise _Damaged("its state is not a dict")
    weights = state.get("model", {}).get("full_precision") if isinstance(state.get("model"), dict) else None
    if not isinstance(weights, dict):
        raise _Damaged("no model.full_precision weights")
    bad = [k for k, v in weights.items() if not isinstance(k, str) or not _numeric(v)]
    opt = state.get("optimizer", {})
    if not isinstance(opt, dict) or not all(isinstance(s, dict) for s in opt.values()):
        raise _Damaged("optimizer state is not a dict of dicts")
    bad += [f"optimizer.{w}.{k}" for w, s in opt.items() for k, v in s.items() if not _numeric(v)]
    if bad:
        raise _Damaged(f"{sorted(map(str, bad))[:5]} are not numeric arrays")
    for key in ("trainer_options", "train_step_info"):
        if not isinstance(state.get(key, {}), dict):
            raise _Damaged(f"{key} is not a dict")
    for k, v in state.get("train_step_info", {}).items():
        if type(v) is not int:
            raise _Damaged(f"train_step_info.{k} is {v!r}, not an int")


def _flatten(obj, prefix, arrays, meta):
    """Puts the index node of ``obj`` in ``meta[prefix]`` ("state" or "user"), its arrays in ``arrays``."""
    meta[prefix] = _Packer(arrays).pack(obj, [prefix])


def _as_tensor(array):
    """True when the format stores ``array`` as a tensor as it is (numbers in native byte order)."""
    return array.dtype.isnative and array.dtype.kind in "biuf" and array.dtype.itemsize <= 8


def write_indexed(path, kind, meta, arrays):
    """Writes ``arrays`` ({member: numpy array}) and the JSON ``meta`` (its "npy" list set here) as
    an onnxtrain checkpoint file of ``kind``, atomically."""
    tensors, npy = [], []
    for name, a in arrays.items():
        if not _as_tensor(a):
            buf = io.BytesIO()
            np.save(buf, a, allow_pickle=False)
            a = np.frombuffer(buf.getvalue(), dtype=np.uint8)
            npy.append(name)
        tensors.append((name, a))
    meta["npy"] = npy
    _C.write_checkpoint_file(os.fspath(path), kind, {}, {"index": json.dumps(meta)}, tensors)


def write_checkpoint(path, state, user_dict):
    """Writes ``state`` (ORTTrainer.state_dict()) and ``user_dict`` to ``path`` atomically. Objects
    a checkpoint cannot store raise before anything is written."""
    arrays, meta = {}, {"format": _CHECKPOINT_FORMAT}
    _flatten(state, "state", arrays, meta)
    _flatten(user_dict, "user", arrays, meta)
    write_indexed(path, _KIND, meta, arrays)


class _Members:
    """The tensors of a checkpoint file, as the unpacker reads an archive's members."""

    def __init__(self, tensors, npy):
        self._arrays = dict(tensors)
        self._npy = set(npy)
        self.files = list(self._arrays)

    def __getitem__(self, name):
        a = self._arrays[name]
        if name in self._npy:
            if a.dtype != np.uint8 or a.ndim != 1:
                raise _Damaged(f"member {name!r} is {a.dtype}{list(a.shape)}, not .npy bytes")
            return np.load(io.BytesIO(a.tobytes()), allow_pickle=False)
        return a


def read_indexed(path, kind, format_name):
    """(meta, unpacker) of a file written by ``write_indexed`` with ``kind`` and meta["format"] ==
    ``format_name``; _Damaged otherwise."""
    try:
        found, _, text, tensors = _C.read_checkpoint_file(path)
    except _errors.InvalidArgument as e:
        raise _Damaged(f"is truncated or damaged: {e}") from None
    if found != kind:
        raise _Damaged(f"is not {'an ORTTrainer checkpoint' if kind == _KIND else 'a ' + kind + ' file'} (an "
                       f"onnxtrain checkpoint of {found or 'a TrainingSession'}: load it with that)")
    meta = json.loads(text.get("index", "null"))
    if not isinstance(meta, dict) or meta.get("format") != format_name:
        raise _Damaged(f"has index format {meta.get('format') if isinstance(meta, dict) else meta!r}, expected "
                       f"{format_name!r}")
    npy = meta.get("npy", [])
    if not isinstance(npy, list) or not all(isinstance(n, str) for n in npy):
        raise _Damaged("its index lists malformed .npy members")
    return meta, _Unpacker(_Members(tensors, npy))


def _read_file(path):
    """(state, user) of a file in onnxtrain's checkpoint format."""
    meta, unpacker = read_indexed(path, _KIND, _CHECKPOINT_FORMAT)
    return unpacker.unpack(meta.get("state"), "state"), unpacker.unpack(meta.get("user"), "user")


def _read_npz(f):
    """(state, user) of an .npz archive of earlier versions (f: the open file)."""
    with np.load(f, allow_pickle=False) as z:
        if "__meta__" not in z.files:
            raise _Damaged("is not an ORTTrainer checkpoint written by onnxtrain (no __meta__ index)")
        raw = z["__meta__"]
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise _Damaged(f"its __meta__ index is {raw.dtype}{list(raw.shape)}, not uint8 bytes")
        meta = json.loads(raw.tobytes().decode("utf-8"))
        if not isinstance(meta, dict):
            raise _Damaged("its __meta__ index is not a JSON object")
        unpacker = _Unpacker(z)
        if meta.get("format") == _NPZ_FORMAT:
            return unpacker.unpack(meta.get("state"), "state"), unpacker.unpack(meta.get("user"), "user")
        if meta.get("format") == _NPZ_FORMAT_V1:
            return unpacker.unpack_v1(meta, "state"), unpacker.unpack_v1(meta, "user")
        raise _Damaged(f"has format {meta.get('format')!r}, expected {_NPZ_FORMAT!r}")


def read_checkpoint(path):
    """(state, user_dict) of a file of ORTTrainer.save_checkpoint, this version's or an earlier
    one's. Only tensors, arrays and the JSON index are read (no pickle); anything wrong raises
    InvalidArgument naming the file."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            head = f.read(16)
            f.seek(0)
            if head == _CKPT_MAGIC:
                state, user = _read_file(path)
            elif head[:4] == b"PK\x03\x04":
                state, user = _read_npz(f)
            else:
                raise _Damaged("is not an ORTTrainer checkpoint written by onnxtrain (truncated, damaged or another "
                               "format)")
        _check_state(state)
        if not isinstance(user, dict):
            raise _Damaged("its user_dict is not a dict")
    except _Damaged as e:
        text = str(e)
        sep = " " if text.startswith(("is ", "has ")) else ": "
        raise _errors.InvalidArgument(f"load_checkpoint: checkpoint '{path}'{sep}{text}") from None
    except RecursionError:
        raise _errors.InvalidArgument(f"load_checkpoint: checkpoint '{path}' is damaged (nested too deeply)") from None
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except Exception as e:  # zipfile, zlib, numpy's .npy reader, json: the file is not what it should be
        raise _errors.InvalidArgument(f"load_checkpoint: checkpoint '{path}' is truncated or damaged: "
                                      f"{type(e).__name__}: {e}") from None
    return state, user
