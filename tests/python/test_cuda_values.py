"""onnxruntime's Python device surface on "cuda": OrtValues on the device (ortvalue_from_numpy,
ortvalue_from_shape_and_type, update_inplace, numpy, device_name, data_ptr), IOBinding with device
inputs and outputs (bound OrtValues, raw device pointers, outputs the run places on the device,
copy_outputs_to_cpu), run_with_ort_values with device feeds, and sessions with
providers=["CUDAExecutionProvider", ...]. Each result is compared with numpy's reference of the
model (an MLP: x @ W + b, Relu, @ V) and with the CPU session. Without a CUDA device (or a build
without the provider) every test reports itself skipped with the reason; scripts/gpu_check.sh runs
them on a GPU machine."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain as ort
from onnxtrain.capi import onnxruntime_pybind11_state as C

HAS_CUDA = "CUDAExecutionProvider" in C.get_available_providers()
pytestmark = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device answers here (or this build has no CUDA "
                                                     "provider): the device tests run under scripts/gpu_check.sh")
PROVIDERS = ["CUDAExecutionProvider", "CPUExecutionProvider"]


@pytest.fixture(scope="module")
def mlp():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 8)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    v = rng.standard_normal((8, 3)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("MatMul", ["r", "v"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
                               numpy_helper.from_array(v, "v")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8

    def reference(x):
        return np.maximum(x.astype(np.float64) @ w + b, 0) @ v

    return model.SerializeToString(), reference


def x_of(n, seed=1):
    return np.random.default_rng(seed).standard_normal((n, 6)).astype(np.float32)


def device_in_device_out(sess, x):
    """A run with a device OrtValue bound as input and output y placed on the device by the run:
    the binding and y."""
    io = sess.io_binding()
    io.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0))
    io.bind_output("y", "cuda")
    sess.run_with_iobinding(io)
    (y,) = io.get_outputs()
    assert y.device_name() == "cuda"
    return io, y


def test_ortvalues_live_on_the_device_and_come_back():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    v = ort.OrtValue.ortvalue_from_numpy(a, "cuda", 0)
    assert v.device_name() == "cuda" and v.shape() == [4, 6] and v.data_type() == "tensor(float)"
    assert v.data_ptr() != 0 and v.data_ptr() != a.ctypes.data  # device memory, not the array's
    np.testing.assert_array_equal(v.numpy(), a)
    a[0, 0] = -1  # a copy was taken: the device value does not follow the array
    assert v.numpy()[0, 0] == 0
    v.update_inplace(np.full((4, 6), 2.5, np.float32))
    np.testing.assert_array_equal(v.numpy(), np.full((4, 6), 2.5, np.float32))
    for dt in (np.int64, np.bool_, np.float16, np.uint8):
        x = (np.arange(10) % 3).astype(dt)
        np.testing.assert_array_equal(ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0).numpy(), x)
    s = ort.OrtValue.ortvalue_from_shape_and_type([2, 3], np.int32, "cuda", 0)
    assert s.device_name() == "cuda" and s.shape() == [2, 3]
    s.update_inplace(np.arange(6, dtype=np.int32).reshape(2, 3))
    np.testing.assert_array_equal(s.numpy(), np.arange(6, dtype=np.int32).reshape(2, 3))
    with pytest.raises(ort.InvalidArgument, match="string tensors live on the CPU only"):
        ort.OrtValue.ortvalue_from_numpy(np.array(["a"]), "cuda", 0)
    with pytest.raises(ort.InvalidArgument, match="serves cuda:0 only"):
        ort.OrtValue.ortvalue_from_numpy(a, "cuda", 1)
    with pytest.raises(ort.NotImplemented, match="not exported through DLPack"):
        v._get_c_value().to_dlpack()


def test_sessions_on_cuda_match_numpy_and_the_cpu(mlp):
    data, reference = mlp
    cpu = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    gpu = ort.InferenceSession(data, providers=PROVIDERS)
    assert gpu.get_providers()[0] == "CUDAExecutionProvider"
    x = x_of(33)
    (y_cpu,) = cpu.run(None, {"x": x})
    (y_gpu,) = gpu.run(None, {"x": x})
    np.testing.assert_allclose(y_gpu, reference(x), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(y_gpu, y_cpu, rtol=1e-4, atol=1e-4)
    # Feeds on the device, through run_with_ort_values.
    feeds = {"x": ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0)._get_c_value()}
    (out,) = gpu._sess.run_with_ort_values(feeds, ["y"], None)
    np.testing.assert_allclose(out.numpy(), y_gpu, rtol=1e-6, atol=1e-6)


def test_iobinding_with_device_inputs_and_outputs(mlp):
    data, reference = mlp
    sess = ort.InferenceSession(data, providers=PROVIDERS)
    x = x_of(7, seed=2)
    y_ref = reference(x)
    io, y = device_in_device_out(sess, x)
    np.testing.assert_allclose(y.numpy(), y_ref, rtol=1e-4, atol=1e-4)
    (copied,) = io.copy_outputs_to_cpu()
    np.testing.assert_allclose(copied, y_ref, rtol=1e-4, atol=1e-4)
    # Raw device pointers in and out (onnxruntime's bind_input / bind_output with buffer_ptr).
    xin = ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    yout = ort.OrtValue.ortvalue_from_shape_and_type([7, 3], np.float32, "cuda", 0)
    io = sess.io_binding()
    io.bind_input("x", "cuda", 0, np.float32, [7, 6], xin.data_ptr())
    io.bind_output("y", "cuda", 0, np.float32, [7, 3], yout.data_ptr())
    sess.run_with_iobinding(io)
    np.testing.assert_allclose(yout.numpy(), y_ref, rtol=1e-4, atol=1e-4)  # the bound device buffer was written
    assert io.get_outputs()[0].data_ptr() == yout.data_ptr()
    # The bound input is read at run time from device memory.
    xin.update_inplace(-x)
    sess.run_with_iobinding(io)
    np.testing.assert_allclose(yout.numpy(), reference(-x), rtol=1e-4, atol=1e-4)
    # An OrtValue output buffer on the device, written in place.
    buf = ort.OrtValue.ortvalue_from_shape_and_type([7, 3], np.float32, "cuda", 0)
    io = sess.io_binding()
    io.bind_cpu_input("x", x)
    io.bind_ortvalue_output("y", buf)
    sess.run_with_iobinding(io)
    np.testing.assert_allclose(buf.numpy(), y_ref, rtol=1e-4, atol=1e-4)


def test_a_cpu_session_takes_device_values_too(mlp):
    data, reference = mlp
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    x = x_of(5, seed=3)
    _, y = device_in_device_out(sess, x)
    np.testing.assert_allclose(y.numpy(), reference(x), rtol=1e-5, atol=1e-5)
