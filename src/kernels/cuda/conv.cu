// Conv, com.microsoft FusedConv and com.onnxtrain ConvGrad on the CUDA provider through cuDNN
// (cudnn.h: loaded at run time).
//   Conv(X, W[, B]) -> Y             cudnnConvolutionForward, then Y += B per output channel
//   FusedConv(X, W[, B[, Z]]) -> Y   the same, then Y = act(Y + Z) in that pass (Relu, LeakyRelu,
//                                    Clip; other activations decline)
//   ConvGrad(dY, X, W) -> dX, dW, dB  cudnnConvolutionBackwardData / BackwardFilter; dB = the sums
//                                     of dY over the batch and the spatial dims (own kernel)
// Shapes, attributes and their errors are the CPU provider's (shape/window.h). cuDNN takes 1-D to
// 3-D convolutions with groups, strides and dilations and symmetric pads; a 1-D convolution is
// described as a 2-D one of height 1. The node declines at prepare (the CPU provider runs it) when
// cuDNN is not installed, for asymmetric pads (auto_pad SAME_* with an odd total included), empty
// channels or kernels, sizes over cuDNN's 32-bit limits, or an element type / geometry for which
// cuDNN offers no algorithm.
// Algorithms come from cuDNN's heuristics (cudnnGet*Algorithm_v7, as PyTorch with benchmark off),
// chosen once per prepared shape: the first that is deterministic (the same bits every step: exact
// resume), fits a 1 GiB workspace and, for float32 without ONNXTRAIN_CUDA_TF32=1, uses no TF32
// (CUDNN_FMA_MATH: the products compute in float32); only where no deterministic one exists, the
// first other. float16 and bfloat16 accumulate in float32, float64 in float64.
#include <mutex>
#include <vector>

#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/cuda_provider.h"
#include "kernels/cuda/cudnn.h"
#include "kernels/cuda/reduce_util.h"
#include "kernels/registry.h"
#include "kernels/shape/window.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cuda {

namespace {

constexpr size_t kMaxWorkspace = size_t(1) << 30;

// ---------------------------------------------------------------- device kernels
// What follows the convolution, in one pass over Y [N, M, S]: Y = act(Y + B[m] + Z), B and Z optional
// (com.microsoft FusedConv: Relu, LeakyRelu or Clip), computed in the compute type.
template <class T>
__global__ void conv_epilogue(T* y, const T* b, const T* z, int64_t total, int64_t M, int64_t S,
                              shape::ConvActivation e) {
  using K = shape::ConvActivation::Kind;
  using C = red::ct<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    C v = red::ld(y, i);
    if (b) v += red::ld(b, (i / S) % M);
    if (z) v += red::ld(z, i);
    if (e.kind == K::kRelu) v = v < C(0) ? C(0) : v;
    else if (e.kind == K::kLeakyRelu) v = v < C(0) ? C(e.alpha) * v : v;
    else if (e.kind == K::kClip) v = v < C(e.alpha) ? C(e.alpha) : v > C(e.beta) ? C(e.beta) : v;
    y[i] = red::st<T>(v);
  }
}

// dB[m] = sum over n, s of dY[n, m, s]: one block of 256 per channel, in double, a fixed order.
template <class T>
__global__ void channel_sums(const T* dy, T* db, int64_t N, int64_t M, int64_t S) {
  const int64_t m = blockIdx.x;
  double acc = 0;
  red::for_channel(N, M, S, m, [&](int64_t j) { acc += double(red::ld(dy, j)); });
  acc = red::group_reduce<256>(acc, red::SumOp{});
  if (threadIdx.x == 0) db[m] = red::st<T>(red::ct<T>(acc));
}

// One cuDNN algorithm chosen for a pass: the algorithm, its math type and workspace.
template <class Algo>
struct Choice {
  Algo algo{};
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
  bool found = false;
};

// The first of the heuristics' ranked results that runs (deterministic first; see the file's
// comment), with the workspace cuDNN reports for it under the math type it will run with.
template <class Algo, class Perf, class SizeOf>
Choice<Algo> choose(const CudnnApi& a, ConvDescs& d, const Perf* r, int n, SizeOf&& workspace_of) {
  Choice<Algo> c;
  for (int pass = 0; pass < 2 && !c.found; ++pass)
    for (int i = 0; i < n; ++i) {
      if (r[i].status != CUDNN_STATUS_SUCCESS) continue;
      if (pass == 0 && r[i].determinism != CUDNN_DETERMINISTIC) continue;
      if (pass == 1 && r[i].determinism == CUDNN_DETERMINISTIC) continue;
      const bool tensor_ops = r[i].mathType == CUDNN_TENSOR_OP_MATH || r[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
      if (d.strict && tensor_ops) continue;
      const cudnnMathType_t math = d.strict ? CUDNN_FMA_MATH : r[i].mathType;
      if (a.cudnnSetConvolutionMathType(d.conv, math) != CUDNN_STATUS_SUCCESS) continue;
      size_t ws = 0;
      if (workspace_of(r[i].algo, &ws) != CUDNN_STATUS_SUCCESS || ws > kMaxWorkspace) continue;
      c.algo = r[i].algo, c.math = math, c.workspace = ws, c.found = true;
      break;
    }
  return c;
}

// The heuristics' ranked results for one pass (get(&n, results)) and the choice among them;
// declines the node when none runs.
template <class Algo, class Perf, int Count, class Get, class SizeOf>
Choice<Algo> pick(const PrepareContext& ctx, const CudnnApi& a, ConvDescs& d, const char* pass, Get&& get,
                  SizeOf&& workspace_of) {
  Perf r[Count];
  int n = 0;
  const cudnnStatus_t st = get(&n, r);  // NOT_SUPPORTED for a type or layout cuDNN lacks: a decline
  if (st != CUDNN_STATUS_SUCCESS)
    throw_error<NotImplemented>(ctx.node().describe(), ": cuDNN's ", pass, " heuristics refuse this convolution: ",
                                a.cudnnGetErrorString(st), " (CUDA)");
  const Choice<Algo> c = choose<Algo>(a, d, r, n, workspace_of);
  if (!c.found)
    throw_error<NotImplemented>(ctx.node().describe(), ": cuDNN offers no ", pass, " algorithm for this convolution (CUDA)");
  return c;
}

// alpha / beta of a cuDNN call: double for float64 tensors, float otherwise.
struct Scalars {
  float f1 = 1.f, f0 = 0.f;
  double d1 = 1.0, d0 = 0.0;
  bool wide = false;
  explicit Scalars(DType dt) : wide(dt == DType::kFloat64) {}
  const void* one() const { return wide ? static_cast<const void*>(&d1) : static_cast<const void*>(&f1); }
  const void* zero() const { return wide ? static_cast<const void*>(&d0) : static_cast<const void*>(&f0); }
};

const CudnnApi& require_cudnn(const PrepareContext& ctx) {
  std::string why;
  const CudnnApi* a = cudnn_api(&why);
  if (!a) red::decline(ctx, why.c_str());
  return *a;
}

// ---------------------------------------------------------------- Conv
class ConvKernel final : public Kernel {
 public:
  ConvKernel(const KernelInfo& info, bool fused) : fused_(fused) {
    p_.read(info, false);
    if (!fused) return;
    act_.read(info);
    using K = shape::ConvActivation::Kind;
    if (act_.kind != K::kNone && act_.kind != K::kRelu && act_.kind != K::kLeakyRelu && act_.kind != K::kClip)
      throw_error<NotImplemented>(info.node().describe(), ": FusedConv's activation '",
                                  info.attr_string("activation", ""), "' on the CUDA provider");
  }

  void prepare(PrepareContext& ctx) override {
    dt_ = shape::float_inputs(ctx);
    const Shape& x = ctx.input_shape(0);
    p_.resolve(ctx, x, ctx.input_shape(1));
    shape::check_conv_bias(ctx, p_);
    has_bias_ = ctx.has_input(2);
    has_z_ = fused_ && ctx.has_input(3);
    if (has_z_ && (ctx.input_dtype(3) != dt_ || ctx.input_shape(3) != p_.y))
      ctx.fail("Z must be ", dtype_name(dt_), " ", shape_to_string(p_.y), " (the convolution's output), got ",
               dtype_name(ctx.input_dtype(3)), " ", shape_to_string(ctx.input_shape(3)));
    ctx.set_output(0, dt_, p_.y);
    empty_ = shape_numel(p_.y) == 0;
    if (empty_) return;
    const CudnnApi& a = require_cudnn(ctx);
    const std::string why = d_.make(a, p_, x, ctx.input_shape(1), dt_);
    if (!why.empty()) red::decline(ctx, why.c_str());
    std::lock_guard<std::mutex> lock(cudnn_query_lock());
    const cudnnHandle_t h = cudnn_query_handle();
    fwd_ = pick<cudnnConvolutionFwdAlgo_t, cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
        ctx, a, d_, "forward",
        [&](int* n, auto* r) {
          return a.cudnnGetConvolutionForwardAlgorithm_v7(h, d_.x, d_.w, d_.conv, d_.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                          n, r);
        },
        [&](cudnnConvolutionFwdAlgo_t al, size_t* ws) {
          return a.cudnnGetConvolutionForwardWorkspaceSize(h, d_.x, d_.w, d_.conv, d_.y, al, ws);
        });
    ctx.request_workspace(fwd_.workspace);
  }

  void run(RunContext& ctx) override {
    if (empty_) return;
    CudaContext& c = CudaContext::of(ctx);
    const CudnnApi& a = *cudnn_api();
    const cudnnHandle_t h = cudnn_handle(c);
    const Scalars s(dt_);
    Tensor& y = ctx.output(0);
    check_cudnn(a.cudnnSetConvolutionMathType(d_.conv, fwd_.math), "cudnnSetConvolutionMathType");
    check_cudnn(a.cudnnConvolutionForward(h, s.one(), d_.x, ctx.input(0).raw_data(), d_.w, ctx.input(1).raw_data(),
                                          d_.conv, fwd_.algo, ctx.workspace(), fwd_.workspace, s.zero(), d_.y,
                                          y.raw_data()),
                "cudnnConvolutionForward");
    count_launch();
    if (!has_bias_ && !has_z_ && act_.kind == shape::ConvActivation::Kind::kNone) return;
    const int64_t total = y.numel();
    red::dispatch<false>(dt_, [&]<class T>() {
      const T* b = has_bias_ ? static_cast<const T*>(ctx.input(2).raw_data()) : nullptr;
      const T* z = has_z_ ? static_cast<const T*>(ctx.input(3).raw_data()) : nullptr;
      conv_epilogue<<<grid_for(total, c), 256, 0, c.stream()>>>(static_cast<T*>(y.raw_data()), b, z, total, p_.M,
                                                               p_.pout, act_);
    });
    check_launch("Conv (bias, Z, activation)");
  }

 private:
  bool fused_;
  shape::ConvActivation act_;  // FusedConv's (kNone for Conv)
  shape::ConvShape p_;
  DType dt_ = DType::kFloat32;
  bool has_bias_ = false, has_z_ = false, empty_ = false;
  ConvDescs d_;
  Choice<cudnnConvolutionFwdAlgo_t> fwd_;
};

// ---------------------------------------------------------------- ConvGrad
class ConvGradKernel final : public Kernel {
 public:
  explicit ConvGradKernel(const KernelInfo& info) { p_.read(info, false); }

  void prepare(PrepareContext& ctx) override {
    dt_ = shape::prepare_conv_grad(ctx, p_, want_);
    const Shape& x = ctx.input_shape(1);
    const CudnnApi& a = require_cudnn(ctx);
    const std::string why = d_.make(a, p_, x, ctx.input_shape(2), dt_);
    if (!why.empty()) red::decline(ctx, why.c_str());
    std::lock_guard<std::mutex> lock(cudnn_query_lock());
    const cudnnHandle_t h = cudnn_query_handle();
    size_t ws = 0;
    if (want_[0]) {
      data_ = pick<cudnnConvolutionBwdDataAlgo_t, cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
          ctx, a, d_, "backward-data",
          [&](int* n, auto* r) {
            return a.cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d_.w, d_.y, d_.conv, d_.x,
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, n, r);
          },
          [&](cudnnConvolutionBwdDataAlgo_t al, size_t* b) {
            return a.cudnnGetConvolutionBackwardDataWorkspaceSize(h, d_.w, d_.y, d_.conv, d_.x, al, b);
          });
      ws = std::max(ws, data_.workspace);
    }
    if (want_[1]) {
      filter_ = pick<cudnnConvolutionBwdFilterAlgo_t, cudnnConvolutionBwdFilterAlgoPerf_t,
                     CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
          ctx, a, d_, "backward-filter",
          [&](int* n, auto* r) {
            return a.cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d_.x, d_.y, d_.conv, d_.w,
                                                                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, n, r);
          },
          [&](cudnnConvolutionBwdFilterAlgo_t al, size_t* b) {
            return a.cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d_.x, d_.y, d_.conv, d_.w, al, b);
          });
      ws = std::max(ws, filter_.workspace);
    }
    ctx.request_workspace(ws);
  }

  void run(RunContext& ctx) override {
    CudaContext& c = CudaContext::of(ctx);
    const CudnnApi& a = *cudnn_api();
    const cudnnHandle_t h = cudnn_handle(c);
    const Scalars s(dt_);
    const void *dy = ctx.input(0).raw_data(), *x = ctx.input(1).raw_data(), *w = ctx.input(2).raw_data();
    if (want_[0]) {
      check_cudnn(a.cudnnSetConvolutionMathType(d_.conv, data_.math), "cudnnSetConvolutionMathType");
      check_cudnn(a.cudnnConvolutionBackwardData(h, s.one(), d_.w, w, d_.y, dy, d_.conv, data_.algo, ctx.workspace(),
                                                 data_.workspace, s.zero(), d_.x, ctx.output(0).raw_data()),
                  "cudnnConvolutionBackwardData");
      count_launch();
    }
    if (want_[1]) {
      check_cudnn(a.cudnnSetConvolutionMathType(d_.conv, filter_.math), "cudnnSetConvolutionMathType");
      check_cudnn(a.cudnnConvolutionBackwardFilter(h, s.one(), d_.x, x, d_.y, dy, d_.conv, filter_.algo,
                                                   ctx.workspace(), filter_.workspace, s.zero(), d_.w,
                                                   ctx.output(1).raw_data()),
                  "cudnnConvolutionBackwardFilter");
      count_launch();
    }
    if (want_[2]) {
      red::dispatch<false>(dt_, [&]<class T>() {
        channel_sums<<<unsigned(p_.M), 256, 0, c.stream()>>>(
            static_cast<const T*>(dy), static_cast<T*>(ctx.output(2).raw_data()), p_.N, p_.M, p_.pout);
      });
      check_launch("ConvGrad (dB)");
    }
  }

 private:
  shape::ConvShape p_;
  DType dt_ = DType::kFloat32;
  bool want_[3] = {false, false, false};
  ConvDescs d_;
  Choice<cudnnConvolutionBwdDataAlgo_t> data_;
  Choice<cudnnConvolutionBwdFilterAlgo_t> filter_;
};

}  // namespace

void register_conv(KernelRegistry& r) {
  r.add("Conv", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<ConvKernel>(i, false); });
  r.add(ops::kMicrosoftDomain, "FusedConv", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<ConvKernel>(i, true); });
  r.add(ops::kDomain, "ConvGrad", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<ConvGradKernel>(i); });
}

}  // namespace onnxtrain::kernels::cuda
