"""onnxruntime's value and device objects: the C OrtValue, OrtValueVector, OrtDevice, OrtMemoryInfo
and enums of onnxruntime_pybind11_state, and the Python OrtValue/OrtDevice wrappers. Expected values
come from numpy, torch and onnx, never from onnxtrain itself."""
import ctypes
import gc
import re
import sys
import weakref

import numpy as np
import pytest
import torch
from onnx import TensorProto, mapping

import onnxtrain
from onnxtrain.capi import onnxruntime_pybind11_state as C
from onnxtrain.capi._values import OrtDevice, OrtValue, get_ort_device_type

CPU = C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0)
CUDA = C.OrtDevice(C.OrtDevice.cuda(), C.OrtDevice.default_memory(), 0)
HAS_CUDA = "CUDAExecutionProvider" in C.get_available_providers()

NUMERIC = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64,
           np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]


def sample(dtype, shape=(2, 3), seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    return (rng.standard_normal(shape) * 10).astype(dtype)


def onnx_type(dtype):
    return mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype(dtype)]


def type_string(dtype):
    return f"tensor({TensorProto.DataType.Name(onnx_type(dtype)).lower()})"


def alive_after_gc(ref):
    gc.collect()
    return ref() is not None


# ---- OrtDevice, OrtMemoryInfo, enums --------------------------------------------------------------

def test_ortdevice_descriptor():
    d = C.OrtDevice(C.OrtDevice.cuda(), C.OrtDevice.default_memory(), 3)
    assert (d.device_type(), d.device_id()) == (C.OrtDevice.cuda(), 3)
    # onnxruntime's OrtDevice::DeviceType and MemType values.
    assert (C.OrtDevice.cpu(), C.OrtDevice.cuda(), C.OrtDevice.fpga(), C.OrtDevice.npu()) == (0, 1, 2, 3)
    assert C.OrtDevice.cann() == C.OrtDevice.npu()
    assert C.OrtDevice.default_memory() == 0
    assert "device_id=3" in repr(d)


@pytest.mark.parametrize("args", [(-1, 0, 0), (0, -1, 0), (0, 0, -1), (0, 0, 1 << 20), (500, 0, 0)])
def test_ortdevice_rejects_out_of_range(args):
    with pytest.raises(onnxtrain.InvalidArgument, match="OrtDevice"):
        C.OrtDevice(*args)


def test_ortdevice_rejects_non_integers():
    with pytest.raises(TypeError):
        C.OrtDevice("cpu", 0, 0)


def test_enums_have_onnxruntime_values():
    # onnxruntime_c_api.h: OrtInvalidAllocator = -1, OrtDeviceAllocator = 0, OrtArenaAllocator = 1;
    # OrtMemTypeCPUInput = -2, OrtMemTypeCPUOutput = -1, OrtMemTypeCPU = OrtMemTypeCPUOutput, OrtMemTypeDefault = 0.
    A, M = C.OrtAllocatorType, C.OrtMemType
    assert [int(A.INVALID), int(A.ORT_DEVICE_ALLOCATOR), int(A.ORT_ARENA_ALLOCATOR)] == [-1, 0, 1]
    assert [int(M.CPU_INPUT), int(M.CPU_OUTPUT), int(M.CPU), int(M.DEFAULT)] == [-2, -1, -1, 0]


@pytest.mark.parametrize("name", ["Cpu", "Cuda", "CudaPinned"])
def test_ortmemoryinfo(name):
    info = C.OrtMemoryInfo(name, C.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, C.OrtMemType.DEFAULT)
    assert name in repr(info)


def test_ortmemoryinfo_rejects_unknown_memory():
    with pytest.raises(onnxtrain.InvalidArgument, match="'gpu'"):
        C.OrtMemoryInfo("gpu", C.OrtAllocatorType.ORT_DEVICE_ALLOCATOR, 0, C.OrtMemType.DEFAULT)


def test_names_exported_by_the_native_state_module():
    from onnxtrain.capi import _pybind_state
    for name in ("OrtValue", "OrtValueVector", "OrtDevice", "OrtMemoryInfo", "OrtAllocatorType", "OrtMemType",
                 "is_dlpack_uint8_tensor"):
        assert getattr(_pybind_state, name) is getattr(onnxtrain._C, name)


# ---- OrtValue from numpy ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", NUMERIC)
def test_from_numpy_is_zero_copy(dtype):
    a = sample(dtype)
    v = C.OrtValue.ortvalue_from_numpy(a, CPU)
    assert v.is_tensor() and v.has_value() and not v.is_tensor_sequence() and not v.is_sparse_tensor()
    assert v.shape() == list(a.shape)
    assert v.data_type() == type_string(dtype)
    assert v.element_type() == onnx_type(dtype)
    assert v.device_name() == "Cpu"
    assert v.data_ptr() == a.ctypes.data
    n = v.numpy()
    assert n.dtype == a.dtype and n.shape == a.shape
    np.testing.assert_array_equal(n, a)
    assert np.shares_memory(n, a)
    # Writes through either side are seen by the other.
    a.flat[0] = np.array(1, dtype=dtype)
    n.flat[1] = np.array(0, dtype=dtype)
    np.testing.assert_array_equal(v.numpy(), a)
    assert a.flat[1] == 0


@pytest.mark.parametrize("make", [
    lambda a: a[:, ::2],                             # strided
    lambda a: np.asfortranarray(a),                  # column-major
    lambda a: a.astype(a.dtype.newbyteorder(">")),   # big-endian
    lambda a: np.frombuffer(b"\0" + a.tobytes(), dtype=a.dtype, offset=1).reshape(a.shape),  # unaligned
])
def test_from_numpy_copies_what_it_cannot_view(make):
    a = make(sample(np.float32, (3, 4)))
    expected = np.array(a, dtype=np.float32)
    v = C.OrtValue.ortvalue_from_numpy(a, CPU)
    assert v.data_ptr() != a.ctypes.data
    n = v.numpy()
    assert n.dtype == np.float32 and n.dtype.isnative
    np.testing.assert_array_equal(n, expected)
    assert not np.shares_memory(n, a)


def test_scalar_and_empty_tensors():
    s = C.OrtValue.ortvalue_from_numpy(np.array(2.5, dtype=np.float64), CPU)
    assert s.shape() == [] and s.numpy().shape == () and s.numpy() == 2.5
    e = C.OrtValue.ortvalue_from_numpy(np.zeros((0, 3), dtype=np.float32), CPU)
    assert e.shape() == [0, 3] and e.data_ptr() == 0
    assert e.numpy().shape == (0, 3) and e.numpy().dtype == np.float32


@pytest.mark.parametrize("a", [
    np.array([["ab", "cde"], ["", "é"]]),
    np.array([b"ab", b"xyz"]),
    np.array(["a", "bb", "ccc"], dtype=object),
])
def test_string_tensors_are_copied(a):
    v = C.OrtValue.ortvalue_from_numpy(a, CPU)
    assert v.data_type() == "tensor(string)" and v.element_type() == TensorProto.STRING
    expected = [x.decode() if isinstance(x, bytes) else x for x in a.ravel().tolist()]
    a.flat[0] = a.flat[1]  # the value holds its own copy
    n = v.numpy()
    assert n.dtype == object and n.shape == a.shape
    assert n.ravel().tolist() == expected


@pytest.mark.parametrize("bad, what", [
    ([1.0, 2.0], "list"),
    (np.float32(1.0), "float32"),
    (None, "NoneType"),
    ("abc", "str"),
])
def test_from_numpy_rejects_non_arrays(bad, what):
    with pytest.raises(onnxtrain.InvalidArgument, match=f"numpy array, got {what}"):
        C.OrtValue.ortvalue_from_numpy(bad, CPU)


@pytest.mark.parametrize("a", [
    np.zeros(3, dtype=np.complex64),
    np.zeros(3, dtype="datetime64[s]"),
    np.zeros(3, dtype=[("x", np.int32), ("y", np.float32)]),
    np.zeros(3, dtype=np.longdouble) if np.dtype(np.longdouble).itemsize > 8 else np.zeros(3, dtype=np.complex128),
])
def test_from_numpy_rejects_unsupported_dtypes(a):
    with pytest.raises(onnxtrain.InvalidArgument, match="ortvalue_from_numpy: numpy dtype"):
        C.OrtValue.ortvalue_from_numpy(a, CPU)


def test_value_keeps_its_array_alive():
    a = sample(np.float32, (4, 5))
    expected = a.copy()
    before = sys.getrefcount(a)
    v = C.OrtValue.ortvalue_from_numpy(a, CPU)
    assert sys.getrefcount(a) > before
    ref = weakref.ref(a)
    del a
    assert alive_after_gc(ref)
    np.testing.assert_array_equal(v.numpy(), expected)
    del v
    assert not alive_after_gc(ref)


def test_numpy_result_outlives_the_value():
    v = C.OrtValue.ortvalue_from_shape_and_type([3, 2], np.int64, CPU)
    v.update_inplace(np.arange(6, dtype=np.int64).reshape(3, 2))
    n = v.numpy()
    assert n.ctypes.data == v.data_ptr()
    del v
    gc.collect()
    np.testing.assert_array_equal(n, np.arange(6).reshape(3, 2))
    n[0, 0] = 7  # still writable memory
    assert n[0, 0] == 7


def test_numpy_view_of_a_numpy_backed_value_outlives_both():
    a = sample(np.float64, (3,))
    expected = a.copy()
    v = C.OrtValue.ortvalue_from_numpy(a, CPU)
    n = v.numpy()
    ref = weakref.ref(a)
    del a, v
    assert alive_after_gc(ref)
    np.testing.assert_array_equal(n, expected)
    del n
    assert not alive_after_gc(ref)


def test_read_only_arrays_stay_read_only():
    a = sample(np.float32)
    a.setflags(write=False)
    v = C.OrtValue.ortvalue_from_numpy(a, CPU)
    assert v.data_ptr() == a.ctypes.data
    n = v.numpy()
    assert not n.flags.writeable
    with pytest.raises(onnxtrain.InvalidArgument, match="read-only"):
        v.update_inplace(np.zeros_like(a))


# ---- shape and type ----------------------------------------------------------------------------------

@pytest.mark.parametrize("element_type", [np.float32, "int64", np.dtype(np.uint8), np.bool_, np.float16, np.object_])
def test_from_shape_and_type(element_type):
    v = C.OrtValue.ortvalue_from_shape_and_type([2, 0, 3] if element_type == "int64" else [2, 3], element_type, CPU)
    dtype = np.dtype(element_type)
    assert v.element_type() == onnx_type(dtype)
    assert v.data_type() == type_string(dtype)
    n = v.numpy()
    assert n.shape == tuple(v.shape())
    assert n.dtype == dtype


def test_from_shape_and_type_accepts_numpy_integers_and_tuples():
    v = C.OrtValue.ortvalue_from_shape_and_type((np.int64(2), np.int32(3)), np.float32, CPU)
    assert v.shape() == [2, 3]


@pytest.mark.parametrize("shape, message", [
    ([2, -1], "negative"),
    ([2.0, 3], "integers, got float"),
    (5, "sequence of integers, got int"),
    ("23", "sequence of integers, got str"),
    ([2 ** 70], "too large"),
    ([2 ** 40, 2 ** 40], "multiplying past 2\\^52"),
    ([0, 2 ** 62, 4], "multiplying past 2\\^52"),  # empty, but its strides would overflow
])
def test_from_shape_and_type_rejects_bad_shapes(shape, message):
    with pytest.raises(onnxtrain.InvalidArgument, match=message):
        C.OrtValue.ortvalue_from_shape_and_type(shape, np.float32, CPU)


def test_from_shape_and_type_refuses_shapes_past_the_allocation_limit():
    with pytest.raises(onnxtrain.Fail, match="allocation limit"):
        C.OrtValue.ortvalue_from_shape_and_type([2 ** 31, 2 ** 20], np.float64, CPU)


@pytest.mark.parametrize("element_type, message", [
    (None, "required"),
    ("no-such-type", "not a numpy type"),
    (np.complex64, "not supported"),
])
def test_from_shape_and_type_rejects_bad_element_types(element_type, message):
    with pytest.raises(onnxtrain.InvalidArgument, match=message):
        C.OrtValue.ortvalue_from_shape_and_type([2], element_type, CPU)


def test_from_shape_and_onnx_type_bfloat16():
    v = C.OrtValue.ortvalue_from_shape_and_onnx_type([4], TensorProto.BFLOAT16, CPU)
    assert v.data_type() == "tensor(bfloat16)" and v.element_type() == TensorProto.BFLOAT16
    x = np.array([1.0, -2.5, 3.14159, 1e-3], dtype=np.float32)
    v.update_inplace(x)
    # numpy has no bfloat16: the value reads back as float32, rounded as torch rounds.
    expected = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(v.numpy(), expected)
    with pytest.raises(onnxtrain.InvalidArgument, match="ONNX element type 99"):
        C.OrtValue.ortvalue_from_shape_and_onnx_type([4], 99, CPU)


def test_from_numpy_with_onnx_type_reinterprets_bits():
    x = torch.tensor([0.5, -1.75, 100.0]).to(torch.bfloat16)
    bits = x.view(torch.int16).numpy().view(np.uint16)
    v = C.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
    assert v.data_type() == "tensor(bfloat16)"
    assert v.data_ptr() == bits.ctypes.data
    np.testing.assert_array_equal(v.numpy(), x.float().numpy())
    with pytest.raises(onnxtrain.InvalidArgument, match="cannot be reinterpreted"):
        C.OrtValue.ortvalue_from_numpy_with_onnx_type(np.zeros(3, np.float32), TensorProto.BFLOAT16)


# ---- update_inplace ------------------------------------------------------------------------------------

def test_update_inplace_keeps_the_address():
    v = C.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32, CPU)
    address = v.data_ptr()
    new = sample(np.float32, (2, 3), seed=5)
    v.update_inplace(new)
    assert v.data_ptr() == address
    np.testing.assert_array_equal(v.numpy(), new)
    v.update_inplace(new.T.copy().T)          # same count, other layout
    np.testing.assert_array_equal(v.numpy(), new)
    v.update_inplace(np.arange(6, dtype=np.float32))  # same count, other shape (onnxruntime allows it)
    np.testing.assert_array_equal(v.numpy().ravel(), np.arange(6))
    v.update_inplace([[1, 2, 3], [4, 5, 6]])  # lists are read as the value's element type
    np.testing.assert_array_equal(v.numpy(), [[1, 2, 3], [4, 5, 6]])


def test_update_inplace_writes_into_the_viewed_array():
    a = np.zeros(4, dtype=np.int32)
    v = C.OrtValue.ortvalue_from_numpy(a, CPU)
    v.update_inplace(np.array([4, 3, 2, 1], dtype=np.int32))
    np.testing.assert_array_equal(a, [4, 3, 2, 1])
    v.update_inplace(v.numpy())  # overlapping source and destination
    np.testing.assert_array_equal(a, [4, 3, 2, 1])


def test_update_inplace_strings():
    v = C.OrtValue.ortvalue_from_numpy(np.array(["a", "b"]), CPU)
    v.update_inplace(np.array(["xy", "z"], dtype=object))
    assert v.numpy().tolist() == ["xy", "z"]


@pytest.mark.parametrize("new, message", [
    (np.zeros(5, np.float32), "5 elements"),
    (np.zeros(6, np.float64), "element type is double"),
    (np.array(["a"] * 6), "element type is string"),
])
def test_update_inplace_rejects_mismatches(new, message):
    v = C.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32, CPU)
    with pytest.raises(onnxtrain.InvalidArgument, match=message):
        v.update_inplace(new)


# ---- sequences and empty optionals --------------------------------------------------------------------

def test_sequence_values():
    arrays = [sample(np.float32, (2,), seed=1), sample(np.float32, (3, 1), seed=2)]
    v = C.OrtValue.ortvalue_from_sequence(arrays, CPU)
    assert v.is_tensor_sequence() and not v.is_tensor() and v.has_value()
    assert v.data_type() == "seq(tensor(float))"
    assert v.element_type() == TensorProto.FLOAT
    out = v.numpy()
    assert isinstance(out, list) and len(out) == 2
    for got, want in zip(out, arrays):
        np.testing.assert_array_equal(got, want)
    for method in ("shape", "data_ptr", "to_dlpack", "update_inplace"):
        args = (np.zeros(2, np.float32),) if method == "update_inplace" else ()
        with pytest.raises(onnxtrain.InvalidArgument, match=r"seq\(tensor\(float\)\)"):
            getattr(v, method)(*args)
    with pytest.raises(onnxtrain.InvalidArgument, match="one element type"):
        C.OrtValue.ortvalue_from_sequence([np.zeros(2, np.float32), np.zeros(2, np.int64)], CPU)


def test_empty_optional():
    v = C.OrtValue.ortvalue_empty_optional()
    assert not v.has_value() and not v.is_tensor() and not v.is_tensor_sequence()
    assert v.numpy() is None
    for method in ("data_type", "element_type", "shape", "data_ptr", "device_name"):
        with pytest.raises(onnxtrain.InvalidArgument, match="empty optional"):
            getattr(v, method)()


def test_c_ortvalue_has_no_constructor_and_a_tensor_is_not_sparse():
    with pytest.raises(TypeError):
        C.OrtValue()
    v = C.OrtValue.ortvalue_from_numpy(np.zeros(2, np.float32), CPU)
    with pytest.raises(RuntimeError, match="does not contain a SparseTensor"):  # onnxruntime's refusal
        v.as_sparse_tensor()


# ---- devices that are not there -----------------------------------------------------------------------

ELSEWHERE = "onnxtrain places tensors on the CPU and, with its CUDA provider, on cuda:0"


@pytest.mark.parametrize("device, label, why", [
    (CUDA, "cuda:0", " (CUDAExecutionProvider is not available: "),
    (C.OrtDevice(C.OrtDevice.cuda(), 0, 2), "cuda:2", ": the CUDA provider serves cuda:0 only"),
    (C.OrtDevice(C.OrtDevice.fpga(), 0, 0), "fpga:0", ": " + ELSEWHERE),
    (C.OrtDevice(C.OrtDevice.npu(), 0, 1), "npu:1", ": " + ELSEWHERE),
])
def test_values_on_missing_devices_are_refused(device, label, why):
    if label == "cuda:0" and HAS_CUDA:
        pytest.skip("a CUDA device answers here (test_cuda_values.py runs instead)")
    message = re.escape(f"device '{label}' is not available" + why)
    with pytest.raises(onnxtrain.InvalidArgument, match=message):
        C.OrtValue.ortvalue_from_numpy(np.zeros(2, np.float32), device)
    with pytest.raises(onnxtrain.InvalidArgument, match=message):
        C.OrtValue.ortvalue_from_shape_and_type([2], np.float32, device)
    with pytest.raises(onnxtrain.InvalidArgument, match=message):
        C.OrtValue.ortvalue_from_sequence([np.zeros(2, np.float32)], device)


# ---- DLPack --------------------------------------------------------------------------------------------

def capsule_name(capsule):
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return get_name(capsule).decode()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int8, np.int32, np.int64, np.uint8])
def test_to_dlpack_into_torch_shares_memory(dtype):
    a = sample(dtype, (3, 4))
    v = C.OrtValue.ortvalue_from_numpy(a, CPU)
    capsule = v.to_dlpack()
    assert capsule_name(capsule) == "dltensor"
    t = torch.utils.dlpack.from_dlpack(capsule)
    assert capsule_name(capsule) == "used_dltensor"
    np.testing.assert_array_equal(t.numpy(), a)
    assert t.data_ptr() == a.ctypes.data
    t[0, 0] = 9
    assert a[0, 0] == 9
    ref = weakref.ref(a)
    del a, v, capsule
    assert alive_after_gc(ref)  # the torch tensor still uses the memory
    del t
    assert not alive_after_gc(ref)


def test_dlpack_protocol_with_numpy_and_torch():
    a = sample(np.float32, (2, 5))
    v = C.OrtValue.ortvalue_from_numpy(a, CPU)
    assert v.__dlpack_device__() == (1, 0)  # kDLCPU
    n = np.from_dlpack(v)
    np.testing.assert_array_equal(n, a)
    assert np.shares_memory(n, a)
    t = torch.utils.dlpack.from_dlpack(v)
    assert t.data_ptr() == a.ctypes.data


def test_unconsumed_capsule_releases_the_memory():
    a = sample(np.float32)
    v = C.OrtValue.ortvalue_from_numpy(a, CPU)
    capsule = v.to_dlpack()
    ref = weakref.ref(a)
    del a, v
    assert alive_after_gc(ref)
    del capsule
    assert not alive_after_gc(ref)


def test_bool_travels_as_uint8():
    a = np.array([True, False, True])
    v = C.OrtValue.ortvalue_from_numpy(a, CPU)
    capsule = v.to_dlpack()
    assert C.is_dlpack_uint8_tensor(capsule)
    t = torch.utils.dlpack.from_dlpack(capsule)
    assert t.dtype == torch.uint8 and t.tolist() == [1, 0, 1]
    back = C.OrtValue.from_dlpack(torch.utils.dlpack.to_dlpack(t), True)
    assert back.data_type() == "tensor(bool)"
    np.testing.assert_array_equal(back.numpy(), a)
    assert not C.is_dlpack_uint8_tensor(torch.utils.dlpack.to_dlpack(torch.zeros(2)))


@pytest.mark.parametrize("from_dlpack", [C.OrtValue.from_dlpack, C.OrtValue.ortvalue_from_dlpack])
def test_from_dlpack_shares_torch_memory(from_dlpack):
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    capsule = torch.utils.dlpack.to_dlpack(t)
    v = from_dlpack(capsule)
    assert capsule_name(capsule) == "used_dltensor"
    assert v.data_ptr() == t.data_ptr() and v.shape() == [3, 4]
    t[1, 1] = -1
    np.testing.assert_array_equal(v.numpy(), t.numpy())
    with pytest.raises(onnxtrain.InvalidArgument, match="already consumed"):
        from_dlpack(capsule)


def test_from_dlpack_takes_objects_with_dlpack_and_bfloat16():
    t = torch.tensor([1.5, -2.0, 3.25]).to(torch.bfloat16)
    v = C.OrtValue.from_dlpack(t)
    assert v.data_type() == "tensor(bfloat16)" and v.data_ptr() == t.data_ptr()
    np.testing.assert_array_equal(v.numpy(), t.float().numpy())
    a = np.arange(5, dtype=np.int16)
    w = C.OrtValue.from_dlpack(a)
    assert w.data_ptr() == a.ctypes.data
    ref = weakref.ref(a)
    del a
    assert alive_after_gc(ref)
    del w
    assert not alive_after_gc(ref)


def test_from_dlpack_round_trip_through_onnxtrain():
    a = sample(np.int64, (2, 2))
    v = C.OrtValue.from_dlpack(C.OrtValue.ortvalue_from_numpy(a, CPU).to_dlpack())
    assert v.data_ptr() == a.ctypes.data
    np.testing.assert_array_equal(v.numpy(), a)


def test_from_dlpack_refuses_non_contiguous_and_leaves_the_capsule_usable():
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3).t()
    capsule = torch.utils.dlpack.to_dlpack(t)
    with pytest.raises(onnxtrain.InvalidArgument, match="not contiguous"):
        C.OrtValue.from_dlpack(capsule)
    assert capsule_name(capsule) == "dltensor"
    assert torch.equal(torch.utils.dlpack.from_dlpack(capsule), t)  # still owned by its producer


@pytest.mark.parametrize("bad, message", [
    (42, "DLPack capsule or an object with __dlpack__, got int"),
    ([1, 2], "got list"),
])
def test_from_dlpack_rejects_non_capsules(bad, message):
    with pytest.raises(onnxtrain.InvalidArgument, match=message):
        C.OrtValue.from_dlpack(bad)


def test_from_dlpack_rejects_other_capsules():
    import datetime  # its C API is a capsule of another name
    capsule = datetime.datetime_CAPI
    with pytest.raises(onnxtrain.InvalidArgument, match="'datetime.datetime_CAPI' is not a DLPack tensor"):
        C.OrtValue.from_dlpack(capsule)


def test_from_dlpack_is_bool_tensor_needs_uint8():
    with pytest.raises(onnxtrain.InvalidArgument, match="is_bool_tensor"):
        C.OrtValue.from_dlpack(torch.utils.dlpack.to_dlpack(torch.zeros(2)), True)


# A DLManagedTensor built by hand (ctypes) to reach what no library produces: other devices,
# vector lanes, and a deleter that counts its calls.
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


class HandMadeCapsule:
    def __init__(self, array, device_type=1, device_id=0, lanes=1, code=2):
        self.array = array
        self.deleted = 0
        self.shape = (ctypes.c_int64 * array.ndim)(*array.shape)
        self.deleter = _DELETER(self._delete)
        self.managed = _DLManagedTensor()
        self.managed.dl_tensor = _DLTensor(array.ctypes.data, _DLDevice(device_type, device_id), array.ndim,
                                           _DLDataType(code, array.itemsize * 8, lanes), self.shape, None, 0)
        self.managed.deleter = self.deleter
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        self.capsule = new(ctypes.addressof(self.managed), b"dltensor", None)

    def _delete(self, _):
        self.deleted += 1


def test_from_dlpack_calls_the_producers_deleter_once():
    a = np.arange(4, dtype=np.float32)
    made = HandMadeCapsule(a)
    v = C.OrtValue.from_dlpack(made.capsule)
    assert v.data_ptr() == a.ctypes.data and made.deleted == 0
    np.testing.assert_array_equal(v.numpy(), a)
    n = v.numpy()
    del v
    gc.collect()
    assert made.deleted == 0  # the numpy view still holds the memory
    del n
    gc.collect()
    assert made.deleted == 1


@pytest.mark.parametrize("kwargs, message", [
    (dict(device_type=2, device_id=1), "device 'cuda:1' is not available"),
    (dict(device_type=10), "device 'rocm:0' is not available"),
    (dict(lanes=4), "4 lanes"),
    (dict(code=5), "code 5"),
])
def test_from_dlpack_refusals_leave_the_tensor_to_its_producer(kwargs, message):
    made = HandMadeCapsule(np.zeros(3, dtype=np.float32), **kwargs)
    with pytest.raises(onnxtrain.InvalidArgument, match=message):
        C.OrtValue.from_dlpack(made.capsule)
    assert capsule_name(made.capsule) == "dltensor" and made.deleted == 0


def test_to_dlpack_refuses_strings():
    v = C.OrtValue.ortvalue_from_numpy(np.array(["a"]), CPU)
    with pytest.raises(onnxtrain.InvalidArgument, match="string tensors cannot be exported"):
        v.to_dlpack()


# ---- OrtValueVector ---------------------------------------------------------------------------------------

def test_ortvaluevector_basics():
    arrays = [sample(np.float32, (2,), seed=i) for i in range(3)]
    vec = C.OrtValueVector()
    vec.reserve(3)
    assert len(vec) == 0
    for a in arrays:
        vec.push_back(C.OrtValue.ortvalue_from_numpy(a, CPU))
    vec.shrink_to_fit()
    assert len(vec) == 3
    np.testing.assert_array_equal(vec[1].numpy(), arrays[1])
    np.testing.assert_array_equal(vec[-1].numpy(), arrays[2])
    assert [v.data_ptr() for v in vec] == [a.ctypes.data for a in arrays]
    with pytest.raises(IndexError):
        vec[3]
    with pytest.raises(IndexError):
        vec[-4]
    with pytest.raises(IndexError):
        vec.element_type_at(5)


def test_ortvaluevector_iterator_keeps_the_vector_alive():
    vec = C.OrtValueVector()
    vec.push_back(C.OrtValue.ortvalue_from_numpy(np.ones(2, np.float32), CPU))
    it = iter(vec)
    del vec
    gc.collect()
    np.testing.assert_array_equal(next(it).numpy(), [1, 1])


def test_ortvaluevector_element_types_and_bool_indices():
    vec = C.OrtValueVector()
    dtypes = [np.float32, np.bool_, np.int64, np.bool_]
    for d in dtypes:
        vec.push_back(C.OrtValue.ortvalue_from_numpy(sample(d), CPU))
    assert [vec.element_type_at(i) for i in range(4)] == [onnx_type(d) for d in dtypes]
    assert vec.bool_tensor_indices() == [1, 3]


def test_ortvaluevector_dlpack_push_and_to_dlpacks():
    tensors = [torch.arange(3, dtype=torch.float32), torch.tensor([1, 0], dtype=torch.uint8)]
    vec = C.OrtValueVector()
    vec.push_back(torch.utils.dlpack.to_dlpack(tensors[0]))
    vec.push_back(torch.utils.dlpack.to_dlpack(tensors[1]), True)
    assert vec[0].data_ptr() == tensors[0].data_ptr()
    assert vec[1].data_type() == "tensor(bool)" and vec.bool_tensor_indices() == [1]
    capsules = vec.to_dlpacks(None)
    assert [capsule_name(c) for c in capsules] == ["dltensor", "dltensor"]
    out = vec.to_dlpacks(torch.utils.dlpack.from_dlpack)
    assert [t.data_ptr() for t in out] == [t.data_ptr() for t in tensors]
    assert torch.equal(out[0], tensors[0]) and out[1].dtype == torch.uint8
    assert torch.utils.dlpack.from_dlpack(vec.dlpack_at(-2)).data_ptr() == tensors[0].data_ptr()
    with pytest.raises(onnxtrain.InvalidArgument, match="DLPack capsule"):
        vec.push_back(None)


def test_ortvaluevector_takes_python_ortvalues_as_they_are():
    vec = C.OrtValueVector()
    v = OrtValue.ortvalue_from_numpy(np.array([True, False]))
    vec.push_back(v)
    assert vec[0] is v._get_c_value() and vec[0].data_type() == "tensor(bool)"


def test_empty_tensors_through_dlpack():
    v = C.OrtValue.ortvalue_from_numpy(np.zeros((0, 4), np.float32), CPU)
    t = torch.utils.dlpack.from_dlpack(v.to_dlpack())
    assert tuple(t.shape) == (0, 4)
    w = C.OrtValue.from_dlpack(torch.zeros(2, 0, dtype=torch.int32))
    assert w.shape() == [2, 0] and w.numpy().shape == (2, 0) and w.data_ptr() == 0


def test_ortvaluevector_push_back_batch():
    tensors = [torch.arange(6, dtype=torch.float32).reshape(2, 3), torch.arange(4, dtype=torch.int64)]
    vec = C.OrtValueVector()
    vec.push_back_batch(tensors, [t.data_ptr() for t in tensors], [np.float32, np.int64],
                        [list(t.shape) for t in tensors], [CPU, CPU])
    assert [v.data_ptr() for v in vec] == [t.data_ptr() for t in tensors]
    np.testing.assert_array_equal(vec[0].numpy(), tensors[0].numpy())
    ref_holder = tensors[1]
    del tensors
    gc.collect()
    np.testing.assert_array_equal(vec[1].numpy(), ref_holder.numpy())
    with pytest.raises(onnxtrain.InvalidArgument, match="one entry per tensor"):
        vec.push_back_batch([ref_holder], [], [np.int64], [[4]], [CPU])
    with pytest.raises(onnxtrain.InvalidArgument, match="cuda:0"):
        vec.push_back_batch([ref_holder], [ref_holder.data_ptr()], [np.int64], [[4]], [CUDA])


# ---- Python wrappers -------------------------------------------------------------------------------------

def test_wrapper_ortvalue_from_numpy():
    a = sample(np.float32, (3, 2))
    v = OrtValue.ortvalue_from_numpy(a)
    assert isinstance(v._get_c_value(), C.OrtValue) and v._numpy_obj is a
    assert v.device_name() == "cpu" and v.shape() == [3, 2] and v.data_type() == "tensor(float)"
    assert v.element_type() == TensorProto.FLOAT and v.has_value() and v.is_tensor()
    assert not v.is_tensor_sequence() and not v.is_sparse_tensor()
    assert v.data_ptr() == a.ctypes.data
    assert np.shares_memory(v.numpy(), a)
    v.update_inplace(np.ones((3, 2), np.float32))
    np.testing.assert_array_equal(a, np.ones((3, 2)))
    np.testing.assert_array_equal(np.from_dlpack(v), a)
    assert torch.utils.dlpack.from_dlpack(v.to_dlpack()).data_ptr() == a.ctypes.data
    w = OrtValue.from_dlpack(torch.zeros(3))
    assert w.shape() == [3]


def test_wrapper_ortvalue_from_shape_and_type():
    v = OrtValue.ortvalue_from_shape_and_type([2, 2], np.int32)
    assert v.data_type() == "tensor(int32)" and v._numpy_obj is None
    b = OrtValue.ortvalue_from_shape_and_type([2], TensorProto.BFLOAT16, "cpu", 0)
    assert b.data_type() == "tensor(bfloat16)"
    with pytest.raises(ValueError):
        OrtValue.ortvalue_from_shape_and_type([2])


def test_wrapper_refuses_missing_devices_and_bad_objects():
    with pytest.raises(onnxtrain.InvalidArgument, match="device 'cuda:1' is not available"):
        OrtValue.ortvalue_from_numpy(np.zeros(2, np.float32), "cuda", 1)
    if not HAS_CUDA:
        with pytest.raises(onnxtrain.InvalidArgument, match="device 'cuda:0' is not available"):
            OrtValue.ortvalue_from_shape_and_type([2], np.float32, "CUDA", 0)
    with pytest.raises(onnxtrain.InvalidArgument, match="Unsupported device type: tpu"):
        OrtValue.ortvalue_from_numpy(np.zeros(2, np.float32), "tpu")
    with pytest.raises(ValueError, match="OrtValue"):
        OrtValue(np.zeros(2))
    with pytest.raises(ValueError, match="OrtDevice"):
        OrtDevice(0)
    with pytest.raises(RuntimeError, match="does not contain a SparseTensor"):
        OrtValue.ortvalue_from_numpy(np.zeros(2, np.float32)).as_sparse_tensor()


def test_device_vendor_and_memory_types_and_memory_info_properties():
    # onnxruntime 1.22+: OrtDevice(type, mem, vendor, id), vendor_id()/mem_type(); the wrapper's
    # device_vendor_id()/device_mem_type(); OrtMemoryInfo's properties and create_v2. Values of its C
    # API: OrtDeviceMemoryType_DEFAULT = 0, _HOST_ACCESSIBLE = 5; OrtMemoryInfoDeviceType CPU 0, GPU 1,
    # FPGA 2, NPU 3; NVIDIA's PCI vendor id 0x10DE.
    assert [int(C.OrtDeviceMemoryType.DEFAULT), int(C.OrtDeviceMemoryType.HOST_ACCESSIBLE)] == [0, 5]
    T = C.OrtMemoryInfoDeviceType
    assert [int(T.CPU), int(T.GPU), int(T.FPGA), int(T.NPU)] == [0, 1, 2, 3]
    d = C.OrtDevice(C.OrtDevice.cuda(), C.OrtDevice.default_memory(), 0x10DE, 2)
    assert (d.device_type(), d.mem_type(), d.vendor_id(), d.device_id()) == (1, 0, 0x10DE, 2)
    assert CPU.vendor_id() == 0 and CPU.mem_type() == 0
    w = OrtDevice.make("cuda", 1, 0x10DE)
    assert (w.device_type(), w.device_id(), w.device_vendor_id(), w.device_mem_type()) == (1, 1, 0x10DE, 0)
    assert OrtDevice.make("cpu", 0).device_vendor_id() == 0
    with pytest.raises(onnxtrain.InvalidArgument, match="vendor id"):
        C.OrtDevice(0, 0, -3, 0)

    info = C.OrtMemoryInfo("Cpu", C.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, C.OrtMemType.DEFAULT)
    assert (info.name, info.device_id, info.mem_type, info.allocator_type) == (
        "Cpu", 0, C.OrtMemType.DEFAULT, C.OrtAllocatorType.ORT_ARENA_ALLOCATOR)
    assert info.device_mem_type == C.OrtDeviceMemoryType.DEFAULT and info.device_vendor_id == 0
    pinned = C.OrtMemoryInfo("CudaPinned", C.OrtAllocatorType.ORT_DEVICE_ALLOCATOR, 0, C.OrtMemType.CPU_OUTPUT)
    assert pinned.device_mem_type == C.OrtDeviceMemoryType.HOST_ACCESSIBLE and pinned.mem_type == C.OrtMemType.CPU
    v2 = C.OrtMemoryInfo.create_v2("MyGpuMemory", T.GPU, 0x10DE, 1, C.OrtDeviceMemoryType.HOST_ACCESSIBLE, 0,
                                   C.OrtAllocatorType.ORT_DEVICE_ALLOCATOR)
    assert (v2.name, v2.device_id, v2.device_vendor_id, v2.device_mem_type, v2.mem_type, v2.allocator_type) == (
        "MyGpuMemory", 1, 0x10DE, C.OrtDeviceMemoryType.HOST_ACCESSIBLE, C.OrtMemType.DEFAULT,
        C.OrtAllocatorType.ORT_DEVICE_ALLOCATOR)
    with pytest.raises(onnxtrain.InvalidArgument, match="alignment"):
        C.OrtMemoryInfo.create_v2("m", T.CPU, 0, 0, C.OrtDeviceMemoryType.DEFAULT, -1,
                                  C.OrtAllocatorType.ORT_DEVICE_ALLOCATOR)


def test_wrapper_ortdevice():
    d = OrtDevice.make("cuda", 1)  # a description only
    assert d.device_type() == C.OrtDevice.cuda() and d.device_id() == 1
    assert isinstance(d._get_c_device(), C.OrtDevice)
    c = OrtDevice.make("CPU", 0)
    assert c.device_type() == C.OrtDevice.cpu()
    assert [get_ort_device_type(n, 0) for n in ("cpu", "cuda", "cann")] == [
        C.OrtDevice.cpu(), C.OrtDevice.cuda(), C.OrtDevice.cann()]
    with pytest.raises(onnxtrain.InvalidArgument, match="Unsupported device type"):
        get_ort_device_type(3)
