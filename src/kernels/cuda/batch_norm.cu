// BatchNormalization and com.onnxtrain BatchNormalizationGrad on the CUDA provider, the CPU
// kernels' arithmetic (cpu/norm.cpp) with the per-channel sums in float64:
//   BatchNormalization(X, scale, B, mean, var) -> Y (, running mean, running var (, saved mean, var))
//     training: mu, sigma2 = the batch's moments per channel (sums over N and the spatial dims,
//     shifted by the channel's first element), running = running * momentum + batch * (1 - momentum)
//     (the variance unbiased where ExecOptions::torch_running_var); inference: mu, sigma2 = mean, var.
//     Y = X a + b, a = scale / sqrt(sigma2 + eps), b = B - mu a.
//   BatchNormalizationGrad(dY, X, scale, mean, var) -> dX, dscale, dB (, dmean, dvar)
//     dx = a dy + b x + d per channel from the sums of x, x^2, dy and dy x (see the CPU kernel).
// One block per channel gathers the sums and finishes the channel's statistics (and, for the
// gradient, writes its dX); Y is one elementwise pass. The parameters and statistics may be of any
// float type (opset 15's T1 and T2), read and written as float64.
#include <cmath>

#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/cuda_provider.h"
#include "kernels/cuda/reduce_util.h"
#include "kernels/registry.h"
#include "kernels/shape/norm.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cuda {

namespace {

using namespace red;

constexpr int kBlock = 512;

// A float tensor of any float type, as the kernels address it (null: absent).
struct AnyPtr {
  void* p = nullptr;
  DType dt = DType::kFloat32;
  __device__ double get(int64_t i) const { return load_any(p, dt, i); }
  __device__ void put(int64_t i, double v) const {
    if (p) store_any(p, dt, i, v);
  }
};

AnyPtr any_in(RunContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return {};
  return {const_cast<void*>(ctx.input(i).raw_data()), ctx.input(i).dtype()};
}
AnyPtr any_out(RunContext& ctx, size_t i) {
  if (i >= ctx.num_outputs() || !ctx.has_output(i)) return {};
  return {ctx.output(i).raw_data(), ctx.output(i).dtype()};
}

struct ForwardArgs {
  int64_t N = 0, C = 0, S = 1;
  double eps = 1e-5, momentum = 0.9, unbias = 1.0;
  bool training = false;
  AnyPtr scale, bias, mean, var;                     // inputs 1..4
  AnyPtr run_mean, run_var, saved_mean, saved_var;  // outputs 1..4 (null: not requested)
  double* a = nullptr;                              // workspace: a[C], then b[C]
};

// Per channel: the statistics used (the batch's, or the running ones), a and b, and the optional
// statistics outputs. Training: one block per channel; inference: thread 0 of block c.
template <class T>
__global__ void bn_channels(const T* x, ForwardArgs f) {
  const int64_t c = blockIdx.x;
  double mu, sigma2;
  if (f.training) {
    const int64_t count = f.N * f.S;
    const double k = count > 0 ? double(ld(x, c * f.S)) : 0.0;
    double s1 = 0, s2 = 0;
    for_channel(f.N, f.C, f.S, c, [&](int64_t i) {
      const double d = double(ld(x, i)) - k;
      s1 += d;
      s2 += d * d;
    });
    s1 = group_reduce<kBlock>(s1, SumOp{});
    s2 = group_reduce<kBlock>(s2, SumOp{});
    if (count == 0) {
      mu = sigma2 = 0.0;
    } else {
      const double m1 = s1 / double(count);
      mu = k + m1;
      sigma2 = fmax(s2 / double(count) - m1 * m1, 0.0);
    }
  } else {
    mu = f.mean.get(c), sigma2 = f.var.get(c);
  }
  if (threadIdx.x != 0) return;
  const double a = f.scale.get(c) / sqrt(sigma2 + f.eps);
  f.a[c] = a;
  f.a[f.C + c] = f.bias.get(c) - mu * a;
  double m = f.mean.get(c), v = f.var.get(c);
  if (f.training) {
    m = m * f.momentum + mu * (1.0 - f.momentum);
    v = v * f.momentum + sigma2 * f.unbias * (1.0 - f.momentum);
  }
  f.run_mean.put(c, m);
  f.run_var.put(c, v);
  f.saved_mean.put(c, mu);
  f.saved_var.put(c, sigma2);
}

template <class T>
__global__ void bn_apply(const T* x, T* y, const double* ab, int64_t total, int64_t C, int64_t S) {
  using Cm = ct<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = (i / S) % C;
    y[i] = st<T>(ld(x, i) * Cm(ab[c]) + Cm(ab[C + c]));
  }
}

class BatchNormKernel final : public Kernel {
 public:
  explicit BatchNormKernel(const KernelInfo& info) : at_(shape::read_batch_norm_attrs(info)) {}
  void prepare(PrepareContext& ctx) override {
    g_ = shape::check_batch_norm(ctx, at_);
    require_dtype(ctx, ctx.input_dtype(0), false);
    training_ = shape::batch_norm_training(ctx, at_);
    shape::set_batch_norm_outputs(ctx, at_, training_);
    ctx.request_workspace(size_t(g_.c) * 2 * sizeof(double));
  }
  void run(RunContext& ctx) override {
    CudaContext& c = CudaContext::of(ctx);
    if (g_.c == 0) return;
    ForwardArgs f;
    f.N = g_.n, f.C = g_.c, f.S = g_.s;
    f.eps = at_.epsilon, f.momentum = at_.momentum, f.training = training_;
    const double count = double(g_.n * g_.s);
    f.unbias = at_.torch_var && count > 1 ? count / (count - 1) : 1.0;
    f.scale = any_in(ctx, 1), f.bias = any_in(ctx, 2), f.mean = any_in(ctx, 3), f.var = any_in(ctx, 4);
    f.run_mean = any_out(ctx, 1), f.run_var = any_out(ctx, 2);
    if (!at_.new_style) f.saved_mean = any_out(ctx, 3), f.saved_var = any_out(ctx, 4);
    f.a = static_cast<double*>(ctx.workspace());
    const Tensor& x = ctx.input(0);
    const int64_t total = x.numel();
    dispatch<false>(x.dtype(), [&]<class T>() {
      const T* xp = static_cast<const T*>(x.raw_data());
      bn_channels<<<unsigned(g_.c), training_ ? kBlock : 1, 0, c.stream()>>>(xp, f);
      check_launch("BatchNormalization (statistics)");
      if (total == 0) return;
      bn_apply<<<grid_for(total, c), 256, 0, c.stream()>>>(xp, static_cast<T*>(ctx.output(0).raw_data()), f.a, total,
                                                          g_.c, g_.s);
      check_launch("BatchNormalization");
    });
  }

 private:
  shape::BatchNormAttrs at_;
  bool training_ = false;
  shape::BatchNormGeom g_;
};

struct GradArgs {
  int64_t N = 0, C = 0, S = 1;
  double eps = 1e-5;
  bool training = false;
  AnyPtr scale, mean, var;               // inputs 2..4
  AnyPtr dscale, dbias, dmean, dvar;     // outputs 1..4
};

// One block per channel: the sums, the channel's a, b, d and parameter gradients, then dX.
template <class T>
__global__ void bn_grad(const T* dy, const T* x, T* dx, GradArgs f) {
  __shared__ double abd[3];
  const int64_t c = blockIdx.x;
  const int64_t count = f.N * f.S;
  const double M = double(count);
  const double k = f.training ? (count > 0 ? double(ld(x, c * f.S)) : 0.0) : f.mean.get(c);
  double sx = 0, sxx = 0, sg = 0, sgx = 0;  // sums of x - k, (x - k)^2, dy, dy (x - k)
  for_channel(f.N, f.C, f.S, c, [&](int64_t i) {
    const double xc = double(ld(x, i)) - k, g = double(ld(dy, i));
    sx += xc;
    sxx += xc * xc;
    sg += g;
    sgx += g * xc;
  });
  sx = group_reduce<kBlock>(sx, SumOp{});
  sxx = group_reduce<kBlock>(sxx, SumOp{});
  sg = group_reduce<kBlock>(sg, SumOp{});
  sgx = group_reduce<kBlock>(sgx, SumOp{});
  if (threadIdx.x == 0) {
    double mu = f.training ? 0.0 : f.mean.get(c), v = f.training ? 0.0 : f.var.get(c);
    if (f.training && count > 0) {
      const double m1 = sx / M;
      mu = k + m1;
      v = fmax(sxx / M - m1 * m1, 0.0);
    }
    const double inv = 1.0 / sqrt(v + f.eps), sgxhat = inv * (sgx - (mu - k) * sg);
    const double a = f.scale.get(c) * inv;
    const double b = f.training && count > 0 ? -a * inv * sgxhat / M : 0.0;
    const double d = f.training && count > 0 ? -a * sg / M - b * mu : 0.0;
    abd[0] = a, abd[1] = b, abd[2] = d;
    f.dscale.put(c, sgxhat);
    f.dbias.put(c, sg);
    if (!f.training) {
      f.dmean.put(c, -a * sg);
      f.dvar.put(c, -0.5 * a * inv * sgxhat);
    }
  }
  __syncthreads();
  if (!dx) return;
  const double a = abd[0], b = abd[1], d = abd[2];
  for_channel(f.N, f.C, f.S, c,
              [&](int64_t j) { dx[j] = st<T>(ct<T>(a * double(ld(dy, j)) + b * double(ld(x, j)) + d)); });
}

class BatchNormGradKernel final : public Kernel {
 public:
  explicit BatchNormGradKernel(const KernelInfo& info) : at_(shape::read_batch_norm_grad_attrs(info)) {}
  void prepare(PrepareContext& ctx) override {
    g_ = shape::check_batch_norm_grad(ctx, at_);
    require_dtype(ctx, ctx.input_dtype(1), false);
    shape::set_batch_norm_grad_outputs(ctx);
  }
  void run(RunContext& ctx) override {
    CudaContext& c = CudaContext::of(ctx);
    if (g_.c == 0) return;
    GradArgs f;
    f.N = g_.n, f.C = g_.c, f.S = g_.s;
    f.eps = at_.epsilon, f.training = at_.training;
    f.scale = any_in(ctx, 2);
    if (!at_.training) f.mean = any_in(ctx, 3), f.var = any_in(ctx, 4);
    f.dscale = any_out(ctx, 1), f.dbias = any_out(ctx, 2), f.dmean = any_out(ctx, 3), f.dvar = any_out(ctx, 4);
    const Tensor& x = ctx.input(1);
    dispatch<false>(x.dtype(), [&]<class T>() {
      T* dx = ctx.has_output(0) ? static_cast<T*>(ctx.output(0).raw_data()) : nullptr;
      bn_grad<<<unsigned(g_.c), kBlock, 0, c.stream()>>>(static_cast<const T*>(ctx.input(0).raw_data()),
                                                         static_cast<const T*>(x.raw_data()), dx, f);
    });
    check_launch("BatchNormalizationGrad");
  }

 private:
  shape::BatchNormGradAttrs at_;
  shape::BatchNormGeom g_;
};

}  // namespace

void register_batch_norm(KernelRegistry& r) {
  r.add<BatchNormKernel>("BatchNormalization", 1, kMaxOpsetAll);
  r.add(ops::kDomain, "BatchNormalizationGrad", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<BatchNormGradKernel>(i); });
}

}  // namespace onnxtrain::kernels::cuda
