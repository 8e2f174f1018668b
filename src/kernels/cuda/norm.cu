// LayerNormalization, its gradient and inference-mode Dropout on the device.
//   LayerNormalization(X[R.., D..], Scale, B) -> Y, Mean?, InvStdDev? (axis splits rows R from D)
//       Y = (X - mu[r]) * inv[r] * Scale + B, inv = 1 / sqrt(var[r] + eps); Mean/InvStdDev in the stash type
//   com.onnxtrain LayerNormalizationGrad(dY, X, Scale, Mean, InvStdDev) -> dX?, dScale?, dB? (dims[axis:])
//       xhat = (x - mu) inv, g = dy Scale; dx = inv (g - mean(g) - xhat mean(g xhat));
//       dScale = sum over rows of dy xhat, dB = sum over rows of dy
//   Dropout(X, ratio?, training_mode?) -> Y, mask?: Y = X * mask / (1 - ratio) (training), else Y = X
//       and mask all true; the CPU kernel's random stream (training with a seed attribute declines).
// Statistics in float32 for float32/float16/bfloat16 (float64 for float64), as the CPU kernel.
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/cuda_provider.h"
#include "kernels/cuda/reduce_util.h"
#include "kernels/shape/norm.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cuda {

namespace {

using namespace red;

constexpr int kMaxDims = 16;

template <class T>
using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Scale or B (shape tdim, right-aligned) broadcast to the normalized shape ns: index maps.
struct Bcast {
  int nr = 0, tr = 0;
  int64_t ns[kMaxDims] = {}, td[kMaxDims] = {};
};

// dst[j] = A(t[broadcast index of j]) for j < cols (t null: 0).
template <class T, class A>
__global__ void expand_param(const T* __restrict__ t, A* __restrict__ dst, int64_t cols, Bcast b) {
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < cols; j += int64_t(gridDim.x) * blockDim.x) {
    if (!t) {
      dst[j] = A(0);
      continue;
    }
    int64_t idx = j, off = 0, stride = 1;
    for (int d = b.nr - 1; d >= 0; --d) {
      const int64_t q = idx / b.ns[d], i = idx - q * b.ns[d];
      idx = q;
      const int td = d - (b.nr - b.tr);
      if (td < 0) continue;
      off += (b.td[td] == 1 ? 0 : i) * stride;
      stride *= b.td[td];
    }
    dst[j] = A(ld(t, off));
  }
}

template <class Ctx>
Bcast make_bcast(const Ctx& ctx, const Shape& ns, const Shape& t) {
  if (ns.size() > size_t(kMaxDims)) decline(ctx, "normalized shape of too many dims");
  Bcast b;
  b.nr = int(ns.size());
  b.tr = int(t.size());
  for (size_t i = 0; i < ns.size(); ++i) b.ns[i] = ns[i];
  for (size_t i = 0; i < t.size(); ++i) b.td[i] = t[i];
  return b;
}

// A group of G threads per row of D (G = 32: a warp; else the block).
template <int G, class T>
__global__ void layer_norm_fwd(const T* __restrict__ X, T* __restrict__ Y, const stat_t<T>* __restrict__ w,
                               const stat_t<T>* __restrict__ b, int64_t R, int64_t D, stat_t<T> eps, void* mean_out,
                               DType mean_dt, void* inv_out, DType inv_dt) {
  using A = stat_t<T>;
  const int lane = threadIdx.x % G;
  const int64_t per = blockDim.x / G, groups = int64_t(gridDim.x) * per;
  for (int64_t r = int64_t(blockIdx.x) * per + threadIdx.x / G; r < R; r += groups) {
    const T* x = X + r * D;
    T* y = Y + r * D;
    A s = 0;
    for (int64_t j = lane; j < D; j += G) s += A(ld(x, j));
    s = group_reduce<G>(s, SumOp{});
    const A m = D ? s / A(D) : A(0);
    A v = 0;
    for (int64_t j = lane; j < D; j += G) {
      const A d = A(ld(x, j)) - m;
      v += d * d;
    }
    v = group_reduce<G>(v, SumOp{});
    const A inv = A(1) / sqrt((D ? v / A(D) : A(0)) + eps);
    for (int64_t j = lane; j < D; j += G) y[j] = st<T>(ct<T>((A(ld(x, j)) - m) * inv * w[j] + b[j]));
    if (lane == 0) {
      if (mean_out) store_any(mean_out, mean_dt, r, double(m));
      if (inv_out) store_any(inv_out, inv_dt, r, double(inv));
    }
  }
}

class LayerNormKernel final : public Kernel {
 public:
  explicit LayerNormKernel(const KernelInfo& info) : at_(shape::read_layer_norm_attrs(info)) {}
  void prepare(PrepareContext& ctx) override {
    require_dtype(ctx, ctx.input_dtype(0), false);
    g_ = shape::check_layer_norm(ctx, at_.axis);
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
    for (size_t k = 1; k <= 2; ++k)
      if (ctx.has_output(k)) ctx.set_output(k, at_.stash, g_.stat_shape);
    bw_ = make_bcast(ctx, g_.norm_shape, ctx.input_shape(1));
    if (ctx.has_input(2)) bb_ = make_bcast(ctx, g_.norm_shape, ctx.input_shape(2));
    ctx.request_workspace(2 * align_up(size_t(g_.cols) * sizeof(double)));
  }
  void run(RunContext& ctx) override {
    const CudaContext& c = CudaContext::of(ctx);
    cudaStream_t s = c.stream();
    const Tensor& x = ctx.input(0);
    dispatch<false>(x.dtype(), [&]<class T>() {
      using A = stat_t<T>;
      const int64_t R = g_.rows, D = g_.cols;
      A* w = static_cast<A*>(ctx.workspace());
      A* b = reinterpret_cast<A*>(static_cast<char*>(ctx.workspace()) + align_up(size_t(D) * sizeof(double)));
      if (D > 0) {
        expand_param<T, A><<<grid_for(D, c), 256, 0, s>>>(static_cast<const T*>(ctx.input(1).raw_data()), w, D, bw_);
        check_launch("layer_norm_expand_scale");
        const T* bp = ctx.has_input(2) ? static_cast<const T*>(ctx.input(2).raw_data()) : nullptr;
        expand_param<T, A><<<grid_for(D, c), 256, 0, s>>>(bp, b, D, bb_);
        check_launch("layer_norm_expand_bias");
      }
      if (R == 0) return;
      void* mo = ctx.has_output(1) ? ctx.output(1).raw_data() : nullptr;
      void* io = ctx.has_output(2) ? ctx.output(2).raw_data() : nullptr;
      const DType mdt = mo ? ctx.output(1).dtype() : DType::kFloat32, idt = io ? ctx.output(2).dtype() : DType::kFloat32;
      const T* X = static_cast<const T*>(x.raw_data());
      T* Y = static_cast<T*>(ctx.output(0).raw_data());
      const int64_t cap = int64_t(c.multiprocessors()) * 32;
      if (D <= 1024) {
        layer_norm_fwd<32, T><<<unsigned(std::min<int64_t>((R + 7) / 8, cap)), 256, 0, s>>>(X, Y, w, b, R, D, A(at_.epsilon),
                                                                                           mo, mdt, io, idt);
      } else {
        layer_norm_fwd<512, T><<<unsigned(std::min<int64_t>(R, cap)), 512, 0, s>>>(X, Y, w, b, R, D, A(at_.epsilon), mo,
                                                                                 mdt, io, idt);
      }
      check_launch("layer_norm_fwd");
    });
  }

 private:
  shape::LayerNormAttrs at_;
  shape::LayerNormGeom g_;
  Bcast bw_, bb_;
};

// ---------------------------------------------------------------- LayerNormalizationGrad
// dX rows: a group of G threads per row.
template <int G, class T>
__global__ void layer_norm_grad_dx(const T* __restrict__ dY, const T* __restrict__ X, const stat_t<T>* __restrict__ w,
                                   const void* mean, DType mean_dt, const void* inv, DType inv_dt, T* __restrict__ dX,
                                   int64_t R, int64_t D) {
  using A = stat_t<T>;
  const int lane = threadIdx.x % G;
  const int64_t per = blockDim.x / G, groups = int64_t(gridDim.x) * per;
  const A invD = D ? A(1) / A(D) : A(0);
  for (int64_t r = int64_t(blockIdx.x) * per + threadIdx.x / G; r < R; r += groups) {
    const T *x = X + r * D, *dy = dY + r * D;
    T* dx = dX + r * D;
    const A m = A(load_any(mean, mean_dt, r)), iv = A(load_any(inv, inv_dt, r));
    A s1 = 0, s2 = 0;
    for (int64_t j = lane; j < D; j += G) {
      const A g = A(ld(dy, j)) * w[j];
      s1 += g;
      s2 += g * (A(ld(x, j)) - m);
    }
    s1 = group_reduce<G>(s1, SumOp{});
    s2 = group_reduce<G>(s2, SumOp{});
    const A mg = s1 * invD, mgx = s2 * invD * iv;
    for (int64_t j = lane; j < D; j += G) {
      const A xh = (A(ld(x, j)) - m) * iv;
      dx[j] = st<T>(ct<T>(iv * (A(ld(dy, j)) * w[j] - mg - xh * mgx)));
    }
  }
}

// dScale/dB partials: 32 x 8 blocks over 32 adjacent columns, rows of chunk blockIdx.y; float64
// sums of dy xhat and dy, rows combined in a fixed order. part[s][0][D]: dScale, part[s][1][D]: dB.
template <class T>
__global__ void layer_norm_grad_params(const T* __restrict__ dY, const T* __restrict__ X, const void* mean,
                                       DType mean_dt, const void* inv, DType inv_dt, double* __restrict__ part,
                                       int64_t R, int64_t D, int64_t chunk) {
  using A = stat_t<T>;
  __shared__ double sw[8][33], sb[8][33];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t s = blockIdx.y, r0 = s * chunk, r1 = min(R, r0 + chunk), nbj = (D + 31) / 32;
  for (int64_t t = blockIdx.x; t < nbj; t += gridDim.x) {
    const int64_t j = t * 32 + tx;
    double aw = 0, ab = 0;
    if (j < D)
      for (int64_t r = r0 + ty; r < r1; r += 8) {
        const A m = A(load_any(mean, mean_dt, r)), iv = A(load_any(inv, inv_dt, r));
        const A dy = A(ld(dY, r * D + j));
        aw += double(dy * ((A(ld(X, r * D + j)) - m) * iv));
        ab += double(dy);
      }
    sw[ty][tx] = aw;
    sb[ty][tx] = ab;
    __syncthreads();
    if (ty == 0 && j < D) {
      for (int k = 1; k < 8; ++k) {
        aw += sw[k][tx];
        ab += sb[k][tx];
      }
      part[(s * 2) * D + j] = aw;
      part[(s * 2 + 1) * D + j] = ab;
    }
    __syncthreads();
  }
}

// out[j] = T(sum over s of part[s][which][j]) for the requested outputs.
template <class T>
__global__ void layer_norm_grad_combine(const double* __restrict__ part, T* __restrict__ dS, T* __restrict__ dB,
                                        int64_t D, int64_t S) {
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < D; j += int64_t(gridDim.x) * blockDim.x) {
    double w = 0, b = 0;
    for (int64_t s = 0; s < S; ++s) {
      w += part[(s * 2) * D + j];
      b += part[(s * 2 + 1) * D + j];
    }
    if (dS) dS[j] = st<T>(ct<T>(w));
    if (dB) dB[j] = st<T>(ct<T>(b));
  }
}

class LayerNormGradKernel final : public Kernel {
 public:
  explicit LayerNormGradKernel(const KernelInfo& info) : axis_(info.attr_int("axis", -1)) {}
  void prepare(PrepareContext& ctx) override {
    require_dtype(ctx, ctx.input_dtype(1), false);
    g_ = shape::check_layer_norm_grad(ctx, axis_);
    for (size_t i = 3; i <= 4; ++i)
      if (!is_float(ctx.input_dtype(i))) decline(ctx, "Mean/InvStdDev of a non-float type");
    const DType dt = ctx.input_dtype(1);
    if (ctx.has_output(0)) ctx.set_output(0, dt, ctx.input_shape(1));
    for (size_t k = 1; k <= 2; ++k)
      if (ctx.has_output(k)) ctx.set_output(k, dt, g_.norm_shape);
    bw_ = make_bcast(ctx, g_.norm_shape, ctx.input_shape(2));
    // Rows split so that the parameter sums fill the device.
    const int64_t R = g_.rows, D = g_.cols, tiles = (D + 31) / 32;
    S_ = 1;
    if (tiles < 1024 && R > 64) S_ = std::min((1024 + tiles - 1) / tiles, (R + 63) / 64);
    S_ = std::max<int64_t>(1, std::min<int64_t>(S_, 4096));
    chunk_ = std::max<int64_t>(1, (R + S_ - 1) / S_);
    S_ = std::max<int64_t>(1, (R + chunk_ - 1) / chunk_);
    ctx.request_workspace(align_up(size_t(D) * sizeof(double)) + size_t(S_ * 2 * D) * sizeof(double));
  }
  void run(RunContext& ctx) override {
    const CudaContext& c = CudaContext::of(ctx);
    cudaStream_t s = c.stream();
    dispatch<false>(ctx.input(1).dtype(), [&]<class T>() {
      using A = stat_t<T>;
      const int64_t R = g_.rows, D = g_.cols;
      if (D == 0) return;
      A* w = static_cast<A*>(ctx.workspace());
      double* part = reinterpret_cast<double*>(static_cast<char*>(ctx.workspace()) + align_up(size_t(D) * sizeof(double)));
      const T* dY = static_cast<const T*>(ctx.input(0).raw_data());
      const T* X = static_cast<const T*>(ctx.input(1).raw_data());
      const void* mean = ctx.input(3).raw_data();
      const void* inv = ctx.input(4).raw_data();
      const DType mdt = ctx.input(3).dtype(), idt = ctx.input(4).dtype();
      T* dS = ctx.has_output(1) ? static_cast<T*>(ctx.output(1).raw_data()) : nullptr;
      T* dB = ctx.has_output(2) ? static_cast<T*>(ctx.output(2).raw_data()) : nullptr;
      if (ctx.has_output(0) && R > 0) {
        expand_param<T, A><<<grid_for(D, c), 256, 0, s>>>(static_cast<const T*>(ctx.input(2).raw_data()), w, D, bw_);
        check_launch("layer_norm_grad_expand_scale");
        T* dX = static_cast<T*>(ctx.output(0).raw_data());
        const int64_t cap = int64_t(c.multiprocessors()) * 32;
        if (D <= 1024)
          layer_norm_grad_dx<32, T><<<unsigned(std::min<int64_t>((R + 7) / 8, cap)), 256, 0, s>>>(dY, X, w, mean, mdt, inv,
                                                                                               idt, dX, R, D);
        else
          layer_norm_grad_dx<512, T><<<unsigned(std::min<int64_t>(R, cap)), 512, 0, s>>>(dY, X, w, mean, mdt, inv, idt,
                                                                                       dX, R, D);
        check_launch("layer_norm_grad_dx");
      }
      if (!dS && !dB) return;
      int64_t S = S_;
      if (R == 0) {
        S = 0;  // the sums are zero
      } else {
        dim3 grid(unsigned(std::min<int64_t>((D + 31) / 32, 65535)), unsigned(S));
        layer_norm_grad_params<T><<<grid, 256, 0, s>>>(dY, X, mean, mdt, inv, idt, part, R, D, chunk_);
        check_launch("layer_norm_grad_params");
      }
      layer_norm_grad_combine<T><<<grid_for(D, c), 256, 0, s>>>(part, dS, dB, D, S);
      check_launch("layer_norm_grad_combine");
    });
  }

 private:
  int64_t axis_;
  shape::LayerNormGeom g_;
  Bcast bw_;
  int64_t S_ = 1, chunk_ = 1;
};

// ---------------------------------------------------------------- Dropout
// Y = X * mask / (1 - ratio), mask = U(0,1) >= ratio in training mode; Y = X, mask all true in
// inference mode or with a ratio of 0. Without a seed attribute the CPU kernel's counter-based
// stream: u(i) = (splitmix64(key ^ i) >> 11) 2^-53, key = splitmix64(key0 + c * run) per run; with
// one (numpy's MT19937 stream) training mode declines to the CPU provider.
__host__ __device__ inline uint64_t mix64(uint64_t z) {  // splitmix64 finalizer
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <class T>
__global__ void fill_one(T* __restrict__ p, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = st<T>(ct<T>(1));
}

// mask: bool (mb) or of T (mt), or none.
template <class T>
__global__ void dropout_train(const T* __restrict__ X, T* __restrict__ Y, bool* __restrict__ mb, T* __restrict__ mt,
                              int64_t n, uint64_t key, double ratio, ct<T> scale) {
  using C = ct<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double u = double(mix64(key ^ uint64_t(i)) >> 11) * 0x1.0p-53;
    const bool keep = u >= ratio;
    Y[i] = keep ? st<T>(C(ld(X, i) * scale)) : st<T>(C(0));
    if (mb) mb[i] = keep;
    if (mt) mt[i] = st<T>(C(keep ? 1 : 0));
  }
}

class DropoutKernel final : public Kernel {
 public:
  explicit DropoutKernel(const KernelInfo& info) : at_(shape::read_dropout_attrs(info)) {
    seeded_ = info.has_attr("seed");
    key_ = info.options().seed ^ (std::hash<std::string>{}(info.node().name) * 0x9e3779b97f4a7c15ull);
  }
  void prepare(PrepareContext& ctx) override {
    require_dtype(ctx, ctx.input_dtype(0), false);
    mode_ = shape::dropout_mode(ctx, at_, &keep_all_);
    if (seeded_ && mode_ != shape::DropoutMode::kInfer && !keep_all_) decline(ctx, "Dropout with a seed in training mode");
    const DType dt = ctx.input_dtype(0);
    const Shape& s = ctx.input_shape(0);
    if (mode_ == shape::DropoutMode::kInfer || keep_all_)
      ctx.set_output_alias(0, 0, s);
    else
      ctx.set_output(0, dt, s);
    if (mode_ != shape::DropoutMode::kInfer) ctx.set_nondeterministic();
    if (ctx.has_output(1)) ctx.set_output(1, at_.opset >= 10 ? DType::kBool : dt, s);
  }
  void run(RunContext& ctx) override {
    const CudaContext& c = CudaContext::of(ctx);
    cudaStream_t s = c.stream();
    const Tensor& x = ctx.input(0);
    bool train = mode_ == shape::DropoutMode::kTrain;
    if (mode_ == shape::DropoutMode::kRuntime) train = *ctx.input(2).data<bool>();  // a host input
    double ratio = at_.ratio;
    if (at_.opset >= 12) ratio = ctx.has_input(1) ? shape::read_scalar_as_double(ctx.input(1)) : 0.5;  // a host input
    if (train) shape::check_ratio(ctx, ratio);
    Tensor* mask = ctx.has_output(1) ? &ctx.output(1) : nullptr;
    bool keep_everything = !train || keep_all_;
    uint64_t key = 0;
    if (!keep_everything) {
      key = mix64(key_ + 0x632be59bd9b4e019ull * ++runs_);
      keep_everything = ratio == 0;
    }
    const int64_t n = x.numel();
    if (keep_everything) {
      if (!ctx.output_aliases_input(0, 0) && x.nbytes())
        OT_CUDA(cudaMemcpyAsync(ctx.output(0).raw_data(), x.raw_data(), x.nbytes(), cudaMemcpyDeviceToDevice, s));
      if (!mask || n == 0) return;
      if (mask->dtype() == DType::kBool) {
        OT_CUDA(cudaMemsetAsync(mask->raw_data(), 1, size_t(n), s));
        return;
      }
      dispatch<false>(mask->dtype(), [&]<class T>() {
        fill_one<T><<<grid_for(n, c), 256, 0, s>>>(static_cast<T*>(mask->raw_data()), n);
        check_launch("dropout_fill_mask");
      });
      return;
    }
    if (n == 0) return;
    dispatch<false>(x.dtype(), [&]<class T>() {
      bool* mb = mask && mask->dtype() == DType::kBool ? static_cast<bool*>(mask->raw_data()) : nullptr;
      T* mt = mask && !mb ? static_cast<T*>(mask->raw_data()) : nullptr;
      const ct<T> scale = ct<T>(1.0 / (1.0 - ratio));  // the CPU kernel's rounding
      dropout_train<T><<<grid_for(n, c), 256, 0, s>>>(static_cast<const T*>(x.raw_data()),
                                                      static_cast<T*>(ctx.output(0).raw_data()), mb, mt, n, key, ratio,
                                                      scale);
      check_launch("dropout_train");
    });
  }

 private:
  shape::DropoutAttrs at_;
  shape::DropoutMode mode_ = shape::DropoutMode::kInfer;
  bool seeded_ = false, keep_all_ = false;
  uint64_t key_ = 0, runs_ = 0;
};

// ---------------------------------------------------------------- DropoutGrad
// DropoutGrad(dY, mask, ratio?, training_mode?) -> dX = mask ? dY / (1 - ratio) : 0 in training
// mode, dY otherwise (the CPU kernel's rule and rounding: the scale in the compute type); a constant
// ratio of 0 passes dY through as a view. ratio and training_mode are host inputs.
template <class T, class M>
__global__ void dropout_grad_kernel(const T* dy, const M* mask, T* dx, int64_t n, ct<T> scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    bool keep;
    if constexpr (std::is_same_v<M, bool>) keep = mask[i];
    else keep = ld(mask, i) != ct<T>(0);
    dx[i] = keep ? st<T>(ld(dy, i) * scale) : st<T>(ct<T>(0));
  }
}

class DropoutGradKernel final : public Kernel {
 public:
  explicit DropoutGradKernel(const KernelInfo& info) : at_(shape::read_dropout_grad_attrs(info)) {}
  void prepare(PrepareContext& ctx) override {
    pass_ = shape::check_dropout_grad(ctx, at_);
    const DType dt = ctx.input_dtype(0);
    if (dt != DType::kFloat32 && dt != DType::kFloat64 && dt != DType::kFloat16 && dt != DType::kBFloat16)
      throw_error<NotImplemented>(ctx.node().describe(), ": element type ", dtype_name(dt), " on the CUDA provider");
    if (pass_)
      ctx.set_output_alias(0, 0, ctx.input_shape(0));
    else
      ctx.set_output(0, dt, ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    CudaContext& c = CudaContext::of(ctx);
    const bool train = ctx.has_input(3) ? *ctx.input(3).data<bool>() : at_.default_training;  // host input
    const double ratio = ctx.has_input(2) ? shape::read_scalar_as_double(ctx.input(2)) : at_.ratio;  // host input
    const Tensor& dy = ctx.input(0);
    Tensor& dx = ctx.output(0);
    if (!train || pass_) {
      if (!ctx.output_aliases_input(0, 0) && dy.nbytes() > 0)
        OT_CUDA(cudaMemcpyAsync(dx.raw_data(), dy.raw_data(), dy.nbytes(), cudaMemcpyDeviceToDevice, c.stream()));
      return;
    }
    shape::check_ratio(ctx, ratio);
    const int64_t n = dy.numel();
    if (n == 0) return;
    const Tensor& mask = ctx.input(1);
    dispatch<false>(dy.dtype(), [&]<class T>() {
      const ct<T> scale = ct<T>(1.0 / (1.0 - ratio));
      const T* g = static_cast<const T*>(dy.raw_data());
      T* o = static_cast<T*>(dx.raw_data());
      if (mask.dtype() == DType::kBool)
        dropout_grad_kernel<<<grid_for(n, c), 256, 0, c.stream()>>>(g, static_cast<const bool*>(mask.raw_data()), o, n, scale);
      else
        dropout_grad_kernel<<<grid_for(n, c), 256, 0, c.stream()>>>(g, static_cast<const T*>(mask.raw_data()), o, n, scale);
      check_launch("DropoutGrad");
    });
  }

 private:
  shape::DropoutGradAttrs at_;
  bool pass_ = false;
};

}  // namespace

void register_norm(KernelRegistry& r) {
  r.add("", "LayerNormalization", 17, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<LayerNormKernel>(i); });
  // ratio and training_mode are read on the host (prepare decides the mode from their values).
  r.add("", "Dropout", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<DropoutKernel>(i); }, {1, 2});
  r.add(ops::kDomain, "DropoutGrad", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<DropoutGradKernel>(i); });
  r.add(ops::kDomain, "LayerNormalizationGrad", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<LayerNormGradKernel>(i); });
}

}  // namespace onnxtrain::kernels::cuda
