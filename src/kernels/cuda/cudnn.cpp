#include "kernels/cuda/cudnn.h"

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <mutex>
#include <vector>

#include "kernels/cuda/cuda_common.h"

namespace onnxtrain::kernels::cuda {

namespace {

struct Loaded {
  CudnnApi api;
  bool ok = false;
  std::string why;
};

const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded r;
    // The soname first (LD_LIBRARY_PATH, the loader's cache), then the toolkit's folder.
    void* lib = nullptr;
    for (const char* name : {"libcudnn.so.9", "/usr/local/cuda/lib64/libcudnn.so.9"})
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!lib) {
      const char* e = dlerror();
      r.why = std::string("cuDNN 9 is not installed (libcudnn.so.9: ") + (e ? e : "not found") + ")";
      return r;
    }
#define OT_CUDNN_LOAD(name)                                                             \
  r.api.name = reinterpret_cast<decltype(r.api.name)>(dlsym(lib, #name));               \
  if (!r.api.name) {                                                                    \
    r.why = "libcudnn.so.9 lacks " #name;                                               \
    return r;                                                                           \
  }
    OT_CUDNN_FUNCTIONS(OT_CUDNN_LOAD)
#undef OT_CUDNN_LOAD
    r.api.version = r.api.cudnnGetVersion();
    if (r.api.version < 90000 || r.api.version >= 100000) {
      r.why = "libcudnn.so.9 reports version " + std::to_string(r.api.version) + ", not 9.x";
      return r;
    }
    r.ok = true;
    return r;
  }();
  return l;
}

}  // namespace

const CudnnApi* cudnn_api(std::string* why) {
  const Loaded& l = loaded();
  if (!l.ok && why) *why = l.why;
  return l.ok ? &l.api : nullptr;
}

void check_cudnn(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  const CudnnApi* a = cudnn_api();
  throw_error<RuntimeError>("cuDNN: ", what, " failed: ", a ? a->cudnnGetErrorString(s) : "cuDNN not loaded", " (status ",
                            int(s), ")");
}

std::mutex& cudnn_query_lock() {
  static std::mutex m;
  return m;
}

cudnnHandle_t cudnn_query_handle() {
  static cudnnHandle_t h = [] {
    const CudnnApi* a = cudnn_api();
    if (!a) throw_error<RuntimeError>("internal: cudnn_query_handle without cuDNN");
    OT_CUDA(cudaSetDevice(0));
    cudnnHandle_t q = nullptr;
    check_cudnn(a->cudnnCreate(&q), "cudnnCreate");
    return q;  // lives to the end of the process
  }();
  return h;
}

cudnnHandle_t cudnn_handle(CudaContext& c) {
  void*& slot = c.dnn_slot();
  if (!slot) {
    const CudnnApi* a = cudnn_api();
    if (!a) throw_error<RuntimeError>("internal: cudnn_handle without cuDNN");
    cudnnHandle_t h = nullptr;
    check_cudnn(a->cudnnCreate(&h), "cudnnCreate");
    check_cudnn(a->cudnnSetStream(h, c.stream()), "cudnnSetStream");
    slot = h;
    c.dnn_destroy = [](void* p) {
      if (const CudnnApi* api = cudnn_api()) api->cudnnDestroy(static_cast<cudnnHandle_t>(p));
    };
  }
  return static_cast<cudnnHandle_t>(slot);
}

namespace {

struct DnnType {
  cudnnDataType_t data, compute;
};
DnnType dnn_type(DType dt) {
  switch (dt) {
    case DType::kFloat64: return {CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE};
    case DType::kFloat16: return {CUDNN_DATA_HALF, CUDNN_DATA_FLOAT};
    case DType::kBFloat16: return {CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT};
    default: return {CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT};
  }
}

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

void set_tensor(const CudnnApi& a, cudnnTensorDescriptor_t d, cudnnDataType_t t, const std::vector<int>& dims) {
  std::vector<int> strides(dims.size(), 1);
  for (size_t i = dims.size() - 1; i > 0; --i) strides[i - 1] = strides[i] * std::max(dims[i], 1);
  check_cudnn(a.cudnnSetTensorNdDescriptor(d, t, int(dims.size()), dims.data(), strides.data()),
              "cudnnSetTensorNdDescriptor");
}

}  // namespace

void ConvDescs::reset() {
  const CudnnApi* a = cudnn_api();
  if (!a) return;
  if (x) a->cudnnDestroyTensorDescriptor(x);
  if (y) a->cudnnDestroyTensorDescriptor(y);
  if (w) a->cudnnDestroyFilterDescriptor(w);
  if (conv) a->cudnnDestroyConvolutionDescriptor(conv);
  x = y = nullptr, w = nullptr, conv = nullptr;
}

std::string ConvDescs::make(const CudnnApi& a, const shape::ConvShape& p, const Shape& xs, const Shape& ws, DType dt) {
  reset();
  if (p.transposed) return "ConvTranspose is not implemented with cuDNN";
  const shape::WindowGeom& g = p.g;
  if (g.nd < 1 || g.nd > 3) return "cuDNN takes 1-D to 3-D convolutions";
  if (p.C == 0 || p.kk == 0 || p.N == 0 || shape_numel(p.y) == 0) return "an empty batch, channel, kernel or output";
  for (size_t i = 0; i < g.nd; ++i)
    if (g.pad_b[i] != g.pad_e[i]) return "asymmetric pads (cuDNN pads both ends alike)";
  if (!fits_int(shape_numel(xs)) || !fits_int(shape_numel(ws)) || !fits_int(shape_numel(p.y)))
    return "a tensor of 2^31 elements or more";
  // Spatial arrays: a 1-D convolution is a 2-D one of height 1.
  const size_t lead = g.nd == 1 ? 1 : 0, sd = g.nd + lead;
  std::vector<int> pad(sd, 0), stride(sd, 1), dil(sd, 1);
  for (size_t i = 0; i < g.nd; ++i) {
    if (!fits_int(g.pad_b[i]) || !fits_int(g.stride[i]) || !fits_int(g.dilation[i])) return "a pad, stride or dilation over 2^31";
    pad[lead + i] = int(g.pad_b[i]), stride[lead + i] = int(g.stride[i]), dil[lead + i] = int(g.dilation[i]);
  }
  auto dims = [&](const Shape& s) {
    std::vector<int> d = {int(s[0]), int(s[1])};
    if (lead) d.push_back(1);
    for (size_t i = 2; i < s.size(); ++i) d.push_back(int(s[i]));
    return d;
  };
  const DnnType t = dnn_type(dt);
  strict = dt == DType::kFloat32 && !tf32_allowed();
  check_cudnn(a.cudnnCreateTensorDescriptor(&x), "cudnnCreateTensorDescriptor");
  check_cudnn(a.cudnnCreateTensorDescriptor(&y), "cudnnCreateTensorDescriptor");
  check_cudnn(a.cudnnCreateFilterDescriptor(&w), "cudnnCreateFilterDescriptor");
  check_cudnn(a.cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor");
  const std::vector<int> xd = dims(xs), wd = dims(ws), yd = dims(p.y);
  set_tensor(a, x, t.data, xd);
  set_tensor(a, y, t.data, yd);
  check_cudnn(a.cudnnSetFilterNdDescriptor(w, t.data, CUDNN_TENSOR_NCHW, int(wd.size()), wd.data()),
              "cudnnSetFilterNdDescriptor");
  check_cudnn(a.cudnnSetConvolutionNdDescriptor(conv, int(sd), pad.data(), stride.data(), dil.data(),
                                                CUDNN_CROSS_CORRELATION, t.compute),
              "cudnnSetConvolutionNdDescriptor");
  check_cudnn(a.cudnnSetConvolutionGroupCount(conv, int(p.group)), "cudnnSetConvolutionGroupCount");
  if (strict) check_cudnn(a.cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType");
  // cuDNN's output shape must be the node's (it is, for symmetric pads; checked all the same).
  std::vector<int> out(yd.size(), 0);
  if (a.cudnnGetConvolutionNdForwardOutputDim(conv, x, w, int(out.size()), out.data()) != CUDNN_STATUS_SUCCESS ||
      out != yd)
    return "cuDNN does not describe this geometry";
  return {};
}

}  // namespace onnxtrain::kernels::cuda
