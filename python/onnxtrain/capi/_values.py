"""onnxruntime's Python value and device classes (``OrtValue``, ``OrtDevice`` and
``get_ort_device_type`` of ``onnxruntime.capi.onnxruntime_inference_collection``) over the C objects
of ``onnxruntime_pybind11_state``.

The wrapper holds the C object (``_ortvalue``, ``_ort_device``) and, like onnxruntime's, the numpy
array a CPU value views (``_numpy_obj``). The C object keeps that array alive by itself too, so a
C OrtValue taken out with ``_get_c_value()`` stays valid on its own.
"""
from . import onnxruntime_pybind11_state as C
from .._errors import InvalidArgument


def get_ort_device_type(device_type, device_index=0):
    """The C device type (an int, as ``C.OrtDevice.cpu()``) of a device name: ``'cpu'``, ``'cuda'``,
    ``'cann'`` or ``'dml'`` (case-insensitive). ``device_index`` is accepted for onnxruntime's call
    shape."""
    if not isinstance(device_type, str):
        raise InvalidArgument(f"Unsupported device type: {device_type!r} (expected 'cpu', 'cuda', 'cann' or 'dml')")
    name = device_type.lower()
    if name == "cuda":
        return C.OrtDevice.cuda()
    if name == "cann":
        return C.OrtDevice.cann()
    if name == "cpu":
        return C.OrtDevice.cpu()
    if name == "dml":
        return C.OrtDevice.dml()
    raise InvalidArgument("Unsupported device type: " + device_type)


def _c_device(device_type, device_id):
    return C.OrtDevice(get_ort_device_type(device_type, device_id), C.OrtDevice.default_memory(), device_id)


class OrtValue:
    """A tensor, a sequence of tensors or an empty optional, on a device; the value type that
    ``run_with_ort_values`` and ``IOBinding`` exchange. CPU tensors made from numpy arrays share the
    array's memory."""

    def __init__(self, ortvalue, numpy_obj=None):
        """Wraps a C OrtValue (``onnxruntime_pybind11_state.OrtValue``); ``numpy_obj`` is the array
        whose memory it views, kept alive as long as this object."""
        if not isinstance(ortvalue, C.OrtValue):
            raise InvalidArgument("`Provided ortvalue` needs to be of type "
                                  "`onnxruntime.capi.onnxruntime_pybind11_state.OrtValue`, got "
                                  + type(ortvalue).__name__)
        self._ortvalue = ortvalue
        self._numpy_obj = numpy_obj

    def _get_c_value(self):
        """The C OrtValue."""
        return self._ortvalue

    def __repr__(self):
        return repr(self._ortvalue)

    @staticmethod
    def ortvalue_from_numpy(numpy_obj, device_type="cpu", device_id=0):
        """An OrtValue over a numpy array. On the CPU it shares the array's memory when the array is
        C-contiguous (otherwise it holds a converted copy); strings are copied. On ``'cuda'`` (a
        build with the CUDA provider and a device) it holds a device copy of the array; a device
        this build cannot use raises InvalidArgument naming why."""
        c_value = C.OrtValue.ortvalue_from_numpy(numpy_obj, _c_device(device_type, device_id))
        return OrtValue(c_value, numpy_obj if device_type.lower() == "cpu" else None)

    @staticmethod
    def ortvalue_from_numpy_with_onnx_type(data, onnx_element_type: int):
        """An OrtValue viewing a numpy array reinterpreted as an ONNX element type of the same item
        size (e.g. uint16 bit patterns as ``onnx.TensorProto.BFLOAT16``)."""
        return OrtValue(C.OrtValue.ortvalue_from_numpy_with_onnx_type(data, onnx_element_type), data)

    @staticmethod
    def ortvalue_from_shape_and_type(shape=None, element_type=None, device_type="cpu", device_id=0):
        """A new, uninitialized OrtValue of the given shape and element type: a numpy type
        (``numpy.float32``) or an ONNX TensorProto element type (``onnx.TensorProto.BFLOAT16``)."""
        if shape is None or element_type is None:
            raise ValueError("`element_type` and `shape` are to be provided if pre-allocated memory is provided")
        device = _c_device(device_type, device_id)
        if isinstance(element_type, int) and not isinstance(element_type, bool):
            return OrtValue(C.OrtValue.ortvalue_from_shape_and_onnx_type(shape, element_type, device))
        return OrtValue(C.OrtValue.ortvalue_from_shape_and_type(shape, element_type, device))

    @staticmethod
    def ort_value_from_sparse_tensor(sparse_tensor):
        """An OrtValue holding a ``SparseTensor`` (shared, not copied). A session densifies it where it
        takes it in (an input declared ``sparse_tensor``)."""
        if not isinstance(sparse_tensor, SparseTensor):
            raise TypeError("sparse_tensor must be an onnxruntime SparseTensor, got " + type(sparse_tensor).__name__)
        return OrtValue(C.OrtValue.ort_value_from_sparse_tensor(sparse_tensor._get_c_tensor()))

    @staticmethod
    def from_dlpack(data, is_bool_tensor=False):
        """An OrtValue taking over a DLPack capsule, or an object with ``__dlpack__`` (a torch
        tensor, a numpy array), sharing its memory. ``is_bool_tensor`` reads uint8 as bool."""
        return OrtValue(C.OrtValue.from_dlpack(data, is_bool_tensor))

    def as_sparse_tensor(self):
        """The ``SparseTensor`` this OrtValue holds (shared); raises RuntimeError for any other value."""
        return SparseTensor(self._ortvalue.as_sparse_tensor())

    def data_ptr(self):
        """The address of the first element of the tensor's data buffer."""
        return self._ortvalue.data_ptr()

    def tensor_size_in_bytes(self):
        """The size of the tensor's data in bytes: element count times element size (as
        onnxruntime, a string element counts as its std::string object, 32 bytes). Only tensors."""
        return self._ortvalue.tensor_size_in_bytes()

    def device_name(self):
        """The name of the device holding the data, e.g. ``'cpu'``."""
        return self._ortvalue.device_name().lower()

    def shape(self):
        """The tensor's shape as a list of integers."""
        return self._ortvalue.shape()

    def data_type(self):
        """The type string, e.g. ``'tensor(int64)'`` or ``'seq(tensor(float))'``."""
        return self._ortvalue.data_type()

    def element_type(self):
        """The ONNX TensorProto element type (an int) of the tensor or of the sequence's tensors."""
        return self._ortvalue.element_type()

    def has_value(self):
        """False when the OrtValue is an empty optional."""
        return self._ortvalue.has_value()

    def is_tensor(self):
        """True when the OrtValue holds a tensor."""
        return self._ortvalue.is_tensor()

    def is_sparse_tensor(self):
        """True when the OrtValue holds a sparse tensor."""
        return self._ortvalue.is_sparse_tensor()

    def is_tensor_sequence(self):
        """True when the OrtValue holds a sequence of tensors."""
        return self._ortvalue.is_tensor_sequence()

    def numpy(self):
        """The tensor as a numpy array sharing the OrtValue's memory (a list of arrays for a
        sequence, None for an empty optional)."""
        return self._ortvalue.numpy()

    def update_inplace(self, np_arr):
        """Copies a numpy array (same element count and element type) into the OrtValue's memory,
        whose address does not change."""
        self._ortvalue.update_inplace(np_arr)

    def to_dlpack(self):
        """A DLPack capsule sharing the tensor's memory (bool tensors travel as uint8)."""
        return self._ortvalue.to_dlpack()

    def __dlpack__(self, stream=None):
        """DLPack protocol (``numpy.from_dlpack``, ``torch.utils.dlpack.from_dlpack``)."""
        return self._ortvalue.__dlpack__(stream)

    def __dlpack_device__(self):
        """DLPack protocol: ``(device type, device id)``."""
        return self._ortvalue.__dlpack_device__()


class OrtDevice:
    """A device description (type, memory type, id) over the C ``OrtDevice``."""

    def __init__(self, c_ort_device):
        """Wraps a C OrtDevice (``onnxruntime_pybind11_state.OrtDevice``)."""
        if not isinstance(c_ort_device, C.OrtDevice):
            raise InvalidArgument("`Provided object` needs to be of type "
                                  "`onnxruntime.capi.onnxruntime_pybind11_state.OrtDevice`, got "
                                  + type(c_ort_device).__name__)
        self._ort_device = c_ort_device

    def _get_c_device(self):
        """The C OrtDevice."""
        return self._ort_device

    def __repr__(self):
        return repr(self._ort_device)

    @staticmethod
    def make(ort_device_name, device_id, vendor_id=-1):
        """The OrtDevice of a device name (``'cpu'``, ``'cuda'``, ``'cann'``) and id, default memory;
        ``vendor_id`` (a PCI vendor id, onnxruntime 1.22's argument) when given (>= 0)."""
        if vendor_id is None or vendor_id < 0:
            return OrtDevice(_c_device(ort_device_name, device_id))
        return OrtDevice(C.OrtDevice(get_ort_device_type(ort_device_name, device_id), C.OrtDevice.default_memory(),
                                     vendor_id, device_id))

    def device_vendor_id(self):
        """The device's PCI vendor id (0: none)."""
        return self._ort_device.vendor_id()

    def device_mem_type(self):
        """The memory type (``C.OrtDevice.default_memory()`` is 0)."""
        return self._ort_device.mem_type()

    def device_id(self):
        """The device id."""
        return self._ort_device.device_id()

    def device_type(self):
        """The device type, an int: ``C.OrtDevice.cpu()``, ``cuda()``, ..."""
        return self._ort_device.device_type()


class SparseTensor:
    """onnxruntime's SparseTensor: a sparse tensor in CPU memory, in COO, CSR(C) or BlockSparse
    format, over the C ``onnxruntime_pybind11_state.SparseTensor``. Numeric values and indices are
    the numpy arrays it was made from (referenced, not copied); what it hands back (``values()``,
    the views' indices) are read-only arrays over that memory."""

    def __init__(self, sparse_tensor):
        """Wraps a C SparseTensor (``onnxruntime_pybind11_state.SparseTensor``)."""
        if not isinstance(sparse_tensor, C.SparseTensor):
            raise ValueError("`Provided object` needs to be of type "
                             "`onnxruntime.capi.onnxruntime_pybind11_state.SparseTensor`")
        self._tensor = sparse_tensor

    def _get_c_tensor(self):
        """The C SparseTensor."""
        return self._tensor

    @staticmethod
    def sparse_coo_from_numpy(dense_shape, values, coo_indices, ort_device):
        """A COO SparseTensor: ``values`` a 1-D array of the NNZ values, ``coo_indices`` int64 of shape
        [NNZ] (linear indices) or [NNZ, rank] (coordinates), ``ort_device`` an ``OrtDevice`` (the CPU).
        Numeric arrays must be C-contiguous and are referenced; str values are copied."""
        return SparseTensor(C.SparseTensor.sparse_coo_from_numpy(dense_shape, values, coo_indices,
                                                                 ort_device._get_c_device()))

    @staticmethod
    def sparse_csr_from_numpy(dense_shape, values, inner_indices, outer_indices, ort_device):
        """A CSR(C) SparseTensor of a 2-D dense shape: ``inner_indices`` the NNZ column indices,
        ``outer_indices`` the rows + 1 row starts (int64)."""
        return SparseTensor(C.SparseTensor.sparse_csr_from_numpy(dense_shape, values, inner_indices, outer_indices,
                                                                 ort_device._get_c_device()))

    def values(self):
        """The values: a read-only numpy array over the tensor's memory (strings: a copy)."""
        return self._tensor.values()

    def as_coo_view(self):
        """The COO view (``.indices()``); raises RuntimeError when the tensor is not COO."""
        return self._tensor.get_coo_data()

    def as_csrc_view(self):
        """The CSR(C) view (``.inner()``, ``.outer()``); raises RuntimeError when not CSR(C)."""
        return self._tensor.get_csrc_data()

    def as_blocksparse_view(self):
        """The BlockSparse view (``.indices()``); raises RuntimeError when not BlockSparse."""
        return self._tensor.get_blocksparse_data()

    def to_cuda(self, ort_device):
        """Raises RuntimeError: this build has no CUDA device (as onnxruntime's CPU build)."""
        return SparseTensor(self._tensor.to_cuda(ort_device._get_c_device()))

    def format(self):
        """The ``OrtSparseFormat``."""
        return self._tensor.format

    def dense_shape(self):
        """The dense shape, a list of ints."""
        return self._tensor.dense_shape()

    def data_type(self):
        """The type string, e.g. ``'sparse_tensor(float)'``."""
        return self._tensor.data_type()

    def device_name(self):
        """The device holding the buffers: ``'cpu'``."""
        return self._tensor.device_name().lower()
