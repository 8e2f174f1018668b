"""onnxruntime-training's ``onnxruntime.training._checkpoint_storage``: a nested dict persisted to a
file and read back as numpy values (what ORTTrainer checkpoints were made of in onnxruntime 1.13).

onnxruntime wrote these files with h5py (HDF5); onnxtrain writes its own checkpoint format
(``include/onnxtrain/checkpoint.h``: CRC-checked tensors and a JSON index, nothing pickled), so a file
of one cannot be read by the other. The behaviour is onnxruntime's:

* ``save(save_obj, path)``: ``save_obj`` must be a dict (ValueError otherwise) with str keys; values
  are dicts (saved as nested groups), torch tensors and numpy arrays, numpy scalars, bool, int,
  float, str, bytes, and lists/tuples of numbers or strings (saved as arrays); anything else (sets,
  None, objects) raises TypeError naming it before a file is written. An existing file is never
  overwritten (FileExistsError), as h5py's mode ``"w-"``. ``path`` may be a file-like object.
* ``load(path, key=None)``: the dict back with numpy equivalents (a tensor or list comes back as a
  numpy array, int as numpy.int64, float as numpy.float64, bool as numpy.bool\\_; str stays str);
  ``key`` "a/b" returns the value at that level (a dict or a value). A missing file raises
  FileNotFoundError, another file ValueError.
* ``to_serialized_hex(obj)`` / ``from_serialized_hex(text)``: ``pickle`` bytes as a hex string and
  back (how onnxruntime stored a checkpoint's ``user_dict``). ``from_serialized_hex`` reads plain
  data only (dicts, lists, tuples, str, int, float, bool, None, numpy arrays and scalars, torch
  tensors) and refuses, with InvalidArgument naming it, a pickle that names any other class or
  function (onnxruntime unpickled anything).
"""
import os
import pickle
import shutil
import tempfile
from collections.abc import Mapping

import numpy as np

from .._errors import InvalidArgument
from ._trainer_checkpoint import _Damaged, _is_tensor, _Packer, read_indexed, write_indexed

_KIND = "onnxtrain.checkpoint_storage"
_FORMAT = "onnxtrain.checkpoint_storage/1"


def _normalized(value, where):
    """``value`` with h5py's conversions applied (numpy values, nested dicts); TypeError naming
    ``where`` for what cannot be stored."""
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str) or not k or "/" in k:
                raise TypeError(f"_checkpoint_storage.save: key {k!r} in '{where}' is not a non-empty str without "
                                "'/'")
            out[k] = _normalized(v, f"{where}/{k}")
        return out
    if _is_tensor(value):
        return value.detach().cpu().numpy()
    if isinstance(value, (str, np.ndarray, np.generic)):
        if isinstance(value, np.ndarray) and value.dtype.hasobject:
            raise TypeError(f"_checkpoint_storage.save: '{where}' is an array of Python objects")
        return value
    if isinstance(value, (bool, int, float, bytes)):
        return np.asarray(value)[()]
    if type(value) in (list, tuple):
        array = np.asarray(value)
        if array.dtype.hasobject:
            raise TypeError(f"_checkpoint_storage.save: '{where}' is a {type(value).__name__} that is not an array "
                            "of numbers or strings")
        return array
    raise TypeError(f"_checkpoint_storage.save: '{where}' holds a {type(value).__module__}."
                    f"{type(value).__qualname__}, which cannot be stored (dicts, tensors, numpy arrays and scalars, "
                    "bool, int, float, str, bytes, lists of numbers or strings)")


def save(save_obj: dict, path):
    """Persists the dict ``save_obj`` to ``path`` (a file path or a writable file-like object);
    values come back from ``load`` as their numpy equivalents. Raises ValueError when
    ``save_obj`` is not a dict, TypeError for a value that cannot be stored, FileExistsError when
    the file exists."""
    if not isinstance(save_obj, Mapping):
        raise ValueError("Object to be saved must be a dictionary")
    arrays = {}
    meta = {"format": _FORMAT, "root": _Packer(arrays).pack(_normalized(save_obj, ""), ["save_obj"])}
    if hasattr(path, "write"):
        with tempfile.TemporaryDirectory() as tmp:
            name = os.path.join(tmp, "storage")
            write_indexed(name, _KIND, meta, arrays)
            with open(name, "rb") as f:
                shutil.copyfileobj(f, path)
        return
    if os.path.exists(path):
        raise FileExistsError(f"_checkpoint_storage.save: '{os.fspath(path)}' already exists (it is never "
                              "overwritten)")
    write_indexed(path, _KIND, meta, arrays)


def _read(path):
    try:
        meta, unpacker = read_indexed(path, _KIND, _FORMAT)
        return unpacker.unpack(meta.get("root"), "save_obj")
    except _Damaged as e:
        raise ValueError(f"_checkpoint_storage.load: '{path}' {e}") from None
    except InvalidArgument as e:
        raise ValueError(f"_checkpoint_storage.load: '{path}' is not a file of _checkpoint_storage.save ({e})") \
            from None
    except RecursionError:
        raise ValueError(f"_checkpoint_storage.load: '{path}' is damaged (nested too deeply)") from None
    except Exception as e:  # numpy's .npy reader (a pickle refused), json, a malformed index
        raise ValueError(f"_checkpoint_storage.load: '{path}' is damaged: {type(e).__name__}: {e}") from None


def load(path, key=None):
    """The dict saved at ``path`` (a file path or a readable file-like object) with numpy values;
    with ``key`` ("a/b"), the value at that level of it. Raises FileNotFoundError for a missing
    file, ValueError for a file ``save`` did not write, KeyError for a key it does not hold."""
    if hasattr(path, "read"):
        with tempfile.TemporaryDirectory() as tmp:
            name = os.path.join(tmp, "storage")
            with open(name, "wb") as f:
                shutil.copyfileobj(path, f)
            obj = _read(name)
    else:
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"_checkpoint_storage.load: no file '{path}'")
        obj = _read(path)
    if key:
        walked = []
        for part in (p for p in key.split("/") if p):
            if not isinstance(obj, dict) or part not in obj:
                raise KeyError(f"_checkpoint_storage.load: key '{key}' not found ('{'/'.join(walked + [part])}' "
                               "does not exist)")
            obj = obj[part]
            walked.append(part)
    return obj


def to_serialized_hex(user_dict):
    """``pickle.dumps(user_dict)`` as a hex string."""
    return pickle.dumps(user_dict).hex()


def from_serialized_hex(serialized_hex):
    """The object of a ``to_serialized_hex`` string (str or bytes), read by onnxtrain's restricted
    unpickler: plain data only (dicts, lists, tuples, str, int, float, bool, None, numpy arrays and
    scalars, torch tensors); a pickle that names any other class or function (a user class, a
    callable) raises InvalidArgument naming it instead of running it (onnxruntime unpickled anything)."""
    import io

    from .. import _plain_torch

    if isinstance(serialized_hex, (bytes, bytearray)):
        serialized_hex = serialized_hex.decode()
    try:
        obj = _plain_torch.DataUnpickler(io.BytesIO(bytes.fromhex(serialized_hex))).load()
    except _plain_torch._Refused as e:
        raise InvalidArgument(f"from_serialized_hex: the pickle names {e}, which onnxtrain does not unpickle "
                              "(plain data only)") from None
    except (ValueError, EOFError, pickle.UnpicklingError) as e:
        raise InvalidArgument(f"from_serialized_hex: not the hex of a pickle ({e})") from None
    _plain_torch.check(obj, "from_serialized_hex", "user_dict", allow_numpy=True)
    return obj
