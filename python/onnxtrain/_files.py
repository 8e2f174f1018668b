"""File writing for the Python writers: onnxtrain's one writer (``_C.AtomicFile``, src/core/atomic_file.h).

The rule, by what the path names: nothing or a regular file is replaced atomically (temporary file
beside it, fsync, rename, fsync of the folder; its permission bits kept); a character device, FIFO
or this process's descriptor (``/dev/null``, a pipe, ``/dev/stdout``) is written through, never
replaced; a symbolic link is followed and stays a link; a directory, socket or block device is
refused. Failures raise ``ModelFileError`` (an ``OSError``) naming the path, leave no temporary
file and the path as it was.
"""
import contextlib
import io
import os

from . import _C


def write_bytes(path, data, what="file"):
    """Writes ``data`` (bytes or any contiguous buffer) to ``path`` by the rule above."""
    _C.write_file_atomic(os.fspath(path), data, what)


class AtomicWriter(io.RawIOBase):
    """A write-only, unseekable file object over ``_C.AtomicFile`` for writers that stream
    (``torch.save``, ``np.savez``). ``commit()`` puts the file in place; ``close()`` without it
    discards what was written."""

    def __init__(self, path, what="file"):
        super().__init__()
        self._f = _C.AtomicFile(os.fspath(path), what)
        self._n = 0

    def writable(self):
        return True

    def write(self, b):
        view = memoryview(b)
        n = self._f.write(view if view.c_contiguous else view.tobytes())
        self._n += n
        return n

    def tell(self):
        return self._n

    def commit(self):
        self._f.commit()
        super().close()

    def close(self):
        f = getattr(self, "_f", None)  # None: __init__ failed
        if f is not None:
            f.discard()
        super().close()


@contextlib.contextmanager
def atomic_open(path, what="file"):
    """``with atomic_open(path) as f: torch.save(obj, f)``: committed when the block ends normally,
    discarded (the path as it was) when it raises."""
    f = AtomicWriter(path, what)
    try:
        yield f
        f.commit()
    finally:
        f.close()


def save_model(model, path, what="model file"):
    """Writes an onnx ModelProto to ``path``; past protobuf's 2 GiB limit the initializers of 1 KiB or
    more go to ``<file name>.data`` beside it (written first, by the same rule), the model last."""
    if model.ByteSize() < 2**31 - 1:
        write_bytes(path, model.SerializeToString(), what)
        return
    from onnx import external_data_helper as ext
    path = os.fspath(path)
    location = os.path.basename(path) + ".data"
    data_path = os.path.join(os.path.dirname(path), location)
    if os.path.islink(data_path):  # as save_model in C++: the loader reads no external data through a link
        from ._errors import ModelFileError
        raise ModelFileError(f"cannot write external data file '{data_path}': it is a symbolic link, and external "
                             "data is read only from a file in the model's folder")
    with atomic_open(data_path, "external data file") as data:
        offset = 0
        for t in ext._get_all_tensors(model):
            if not t.HasField("raw_data") or len(t.raw_data) < 1024:
                continue
            pad = -offset % 4096
            data.write(b"\0" * pad)
            offset += pad
            raw = t.raw_data
            data.write(raw)
            ext.set_external_data(t, location, offset, len(raw))
            t.data_location = t.EXTERNAL
            t.ClearField("raw_data")
            offset += len(raw)
    write_bytes(path, model.SerializeToString(), what)  # the model, which points to the data, last
