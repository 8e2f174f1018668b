"""``torch.save`` files that hold plain data only: the ``.ort.pt`` checkpoints of onnxruntime-training.

``load(path)`` reads a ``torch.save`` zip archive with an unpickler that resolves no global other
than the tensor rebuild functions and ``collections.OrderedDict``, so that a file naming any other
callable (``os.system``, a class, ``torch.jit.load``) is refused before anything in it runs, then
checks that the result is plain data (``check``). Any failure — refused pickle, TorchScript archive,
legacy (pre zip) format, truncated or damaged file, nesting deeper than ``MAX_DEPTH`` — raises
``InvalidArgument`` naming the file, as the native core does for damaged checkpoints.

Plain data: dicts (``OrderedDict`` too) whose keys are ``str``, ``int``, ``float``, ``bool`` or
``None``; lists; tuples; ``str``, ``int``, ``float``, ``bool``, ``None``; dense ``torch.Tensor`` /
``torch.nn.Parameter`` without hooks. torch 1.13's own ``torch.load(weights_only=True)`` refuses
Python floats (its unpickler lacks that opcode) and still hands TorchScript archives to
``torch.jit.load``, and the torch 1.13 build here ignores a ``pickle_module`` given to
``torch.load``: hence this reader, torch's own zip reader (``torch.serialization._load``) with the
unpickler above.
"""
import collections
import os
import pickle
import types

from ._errors import InvalidArgument

MAX_DEPTH = 64
_SCALARS = (str, int, float, bool, type(None))


class _Refused(pickle.UnpicklingError):
    """The pickle names a global outside the allow-list."""


def _allowed_globals():
    import torch
    return {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2"): torch._utils._rebuild_tensor_v2,
        ("torch._utils", "_rebuild_tensor"): torch._utils._rebuild_tensor,
        ("torch._utils", "_rebuild_parameter"): torch._utils._rebuild_parameter,
    }


class _Unpickler(pickle.Unpickler):
    """pickle.Unpickler resolving only the allow-listed globals (every way a pickle reaches a
    callable — GLOBAL, STACK_GLOBAL, INST, OBJ, EXT* — goes through find_class)."""

    def find_class(self, module, name):
        found = _allowed_globals().get((module, name))
        if found is None:
            raise _Refused(f"{module}.{name}")
        return found


def _storage_from_bytes(data):
    """``torch.storage._load_from_bytes`` (how ``pickle.dumps`` of a tensor stores its storage: a
    legacy ``torch.save`` of it) read with the restricted unpickler."""
    import io

    import torch
    return torch.serialization._legacy_load(io.BytesIO(data), "cpu", _pickle_module(), encoding="utf-8")


class DataUnpickler(_Unpickler):
    """The unpickler of ``pickle.dumps`` of plain data, numpy arrays and scalars and torch tensors
    (``_checkpoint_storage.from_serialized_hex``): the allow-list plus numpy's array and scalar
    rebuilders and torch's storage bytes (read by this unpickler again); nothing else resolves."""

    def find_class(self, module, name):
        import numpy as np
        extra = {
            ("torch.storage", "_load_from_bytes"): _storage_from_bytes,
            ("numpy", "ndarray"): np.ndarray,
            ("numpy", "dtype"): np.dtype,
            ("numpy.core.multiarray", "_reconstruct"): np.core.multiarray._reconstruct,
            ("numpy.core.multiarray", "scalar"): np.core.multiarray.scalar,
        }
        found = extra.get((module, name))
        return found if found is not None else super().find_class(module, name)


def _pickle_module():
    """The ``pickle_module`` of torch's zip reader: torch subclasses its ``Unpickler`` (storage
    types are resolved by torch's subclass before find_class)."""
    m = types.ModuleType("onnxtrain._plain_torch_pickle")
    m.Unpickler = _Unpickler
    m.load = lambda f, **kw: _Unpickler(f, **kw).load()
    return m


def _describe(obj):
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def check(obj, where, what="checkpoint", allow_numpy=False):
    """Raises ``InvalidArgument`` ("<what> '<where>': ...", naming the entry) unless ``obj`` is plain
    data (see the module docstring), at most ``MAX_DEPTH`` containers deep and without cycles. The
    savers call it before writing, so that what they write is what ``load`` accepts. With
    ``allow_numpy``, numpy arrays (not of Python objects) and numpy scalars are plain data too."""
    import numpy as np
    import torch
    done, path = set(), set()

    def fail(msg, at):
        at = at if len(at) <= 120 else at[:120] + "..."
        raise InvalidArgument(f"{what} '{where}': {msg} at {at or 'the top level'}")

    def visit(o, at, depth):
        if isinstance(o, _SCALARS) and type(o) in _SCALARS:
            return
        if type(o) in (torch.Tensor, torch.nn.Parameter):
            if o.layout != torch.strided:
                fail(f"a {o.layout} tensor (dense tensors only)", at)
            if getattr(o, "_backward_hooks", None):
                fail("a tensor with backward hooks", at)
            return
        if allow_numpy and (type(o) is np.ndarray or isinstance(o, np.generic)):
            if o.dtype.hasobject:
                fail("a numpy array of Python objects", at)
            return
        if type(o) not in (dict, collections.OrderedDict, list, tuple):
            hint = " (convert numpy arrays to torch tensors)" if type(o).__module__ == "numpy" else ""
            fail(f"a {_describe(o)}, which is not plain data (tensors, dicts, lists, tuples, str, int, float, "
                 f"bool, None){hint}", at)
        if depth >= MAX_DEPTH:
            fail(f"containers nested deeper than {MAX_DEPTH}", at)
        if id(o) in path:
            fail("a container that contains itself", at)
        if id(o) in done:
            return
        path.add(id(o))
        if isinstance(o, dict):
            for k, v in o.items():
                if not (isinstance(k, _SCALARS) and type(k) in _SCALARS):
                    fail(f"a dict key of type {_describe(k)} (str, int, float, bool or None only)", at)
                visit(v, f"{at}[{k!r}]", depth + 1)
        else:
            for i, v in enumerate(o):
                visit(v, f"{at}[{i}]", depth + 1)
        path.discard(id(o))
        done.add(id(o))

    visit(obj, "", 0)


def load(path, what="checkpoint"):
    """The plain data of the ``torch.save`` zip archive at ``path``, tensors on the CPU. Nothing in
    the file is run; anything but plain data, or a damaged file, raises ``InvalidArgument`` naming
    the file."""
    import torch
    path = os.fspath(path)
    with open(path, "rb") as f:
        try:
            if f.read(4) != b"PK\x03\x04":  # what torch.load takes for a zip archive (else its legacy readers)
                raise ValueError("no zip signature")
            f.seek(0)
            reader = torch._C.PyTorchFileReader(f)
            records = reader.get_all_records()
        except Exception as e:
            raise InvalidArgument(f"{what} '{path}' is not a torch.save zip archive (truncated, damaged or another "
                                  f"format: {_first_line(e)})") from None
        if "constants.pkl" in records:  # torch.load would hand the archive to torch.jit.load
            raise InvalidArgument(f"{what} '{path}' is a TorchScript archive, not a checkpoint of tensors")
        try:
            # torch.load's zip reader with this pickle module (torch.load itself may dispatch elsewhere:
            # TorchScript archives to torch.jit.load, and some releases drop a given pickle_module).
            obj = torch.serialization._load(reader, "cpu", _pickle_module(), encoding="utf-8")
        except _Refused as e:
            raise InvalidArgument(f"{what} '{path}' refers to '{e}', which onnxtrain does not load (only tensors "
                                  "and plain containers; nothing from the file was run)") from None
        except RecursionError:
            raise InvalidArgument(f"{what} '{path}' is nested too deeply") from None
        except Exception as e:
            raise InvalidArgument(f"{what} '{path}' is damaged: {_first_line(e)}") from None
    check(obj, path, what)
    return obj


def load_checkpoint(path, writer):
    """``load(path)`` of a checkpoint written by ``writer`` (named in errors): a dict whose ``'model'``
    entry maps names (str) to tensors. Returns a shallow copy of the dict."""
    import torch
    state = load(path)
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise InvalidArgument(f"checkpoint '{path}' is not a checkpoint of {writer} (no 'model' dict)")
    odd = sorted(str(k) for k, v in state["model"].items() if not isinstance(k, str) or not isinstance(v, torch.Tensor))
    if odd:
        raise InvalidArgument(f"checkpoint '{path}': model entries {odd[:5]} are not tensors named by strings")
    return dict(state)


def _first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def check_prefix(prefix, name="checkpoint_prefix"):
    """Refuses a file-name prefix that is not one plain name: empty, ``.`` or ``..``, or holding a path
    separator (``/`` or ``\\``) or a NUL, so that ``<dir>/<prefix>...`` stays inside ``<dir>``."""
    if not isinstance(prefix, str):
        raise TypeError(f"{name} must be a str, got {type(prefix).__name__}")
    bad = [c for c in ("/", "\\", "\0") if c in prefix]
    if not prefix or prefix in (".", "..") or bad:
        why = "is empty" if not prefix else f"holds {bad[0]!r}" if bad else f"is {prefix!r}"
        raise InvalidArgument(f"{name} {prefix!r} {why}: it must be a plain file-name prefix (no path separators, "
                              "'..' or NUL), the files go in the checkpoint directory")
