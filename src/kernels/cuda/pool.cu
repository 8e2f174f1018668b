// MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool and their com.onnxtrain gradients on the
// CUDA provider: one thread per output (forward) or per input (gradient), the window arithmetic of
// cuda/pool_rules.h, which is the CPU provider's loops' (cpu/pool.cpp) term for term:
//   MaxPool       Y[o] = the window's first maximum (Indices: its flat index, as the CPU's)
//   AveragePool   Y[o] = (sum in double) / count(o)
//   MaxPoolGrad   dX[q] = sum of dY[o] over the outputs o whose first argmax is q (increasing o;
//                 relu_mask: 0 where X[q] <= 0); the argmaxes are found first, one per output
//   AveragePoolGrad  dX[q] = sum of dY[o] / count(o) over the windows holding q
// Gathering per input instead of scattering per output adds the same terms in the same order as
// the CPU's scatter: the same bits where the CPU runs its loops (float64, float16, bfloat16; float32
// MaxPool with Indices) and no atomics. The global pools are these with the whole plane as the
// window. Shapes, attributes and errors are shape/window.h's. Declined (the CPU provider runs them):
// more than 3 spatial dims, integer MaxPool, MaxPoolGrad reading MaxPool's Indices, LpPool.
#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/cuda_provider.h"
#include "kernels/cuda/pool_rules.h"
#include "kernels/cuda/reduce_util.h"
#include "kernels/registry.h"
#include "kernels/shape/window.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cuda {

namespace {

using shape::PoolKind;

// Element j of p in its compute type.
struct Ld {
  template <class T>
  __device__ red::ct<T> operator()(const T* p, int64_t j) const {
    return red::ld(p, j);
  }
};

template <class T>
__global__ void max_pool(const T* x, T* y, int64_t* ind, int64_t total, PoolGeo g, bool cm) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    red::ct<T> m;
    const int64_t best = max_pool_at(g, x, i, Ld{}, &m);
    y[i] = red::st<T>(m);
    if (ind) ind[i] = best < 0 ? -1 : (i / g.pout) * g.pin + (cm ? col_major_index(g, best) : best);
  }
}

template <class T>
__global__ void avg_pool(const T* x, T* y, int64_t total, PoolGeo g, bool include_pad) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = red::st<T>(avg_pool_at<red::ct<T>>(g, x, i, include_pad, Ld{}));
}

// Gradient pass 1: each output's argmax (plane offset, -1 for an empty window).
template <class T>
__global__ void max_pool_argmax(const T* x, int64_t* arg, int64_t total, PoolGeo g) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    red::ct<T> m;
    arg[i] = max_pool_at(g, x, i, Ld{}, &m);
  }
}

template <class T>
__global__ void max_pool_grad(const T* x, const T* dy, const int64_t* arg, T* dx, int64_t total, PoolGeo g,
                              bool relu_mask) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    dx[i] = red::st<T>(max_pool_grad_at<red::ct<T>>(g, x, dy, arg, i, relu_mask, Ld{}));
}

template <class T>
__global__ void avg_pool_grad(const T* dy, T* dx, int64_t total, PoolGeo g, bool include_pad) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    dx[i] = red::st<T>(avg_pool_grad_at<red::ct<T>>(g, dy, i, include_pad, Ld{}));
}

void check_geometry(const PrepareContext& ctx, const shape::PoolShape& p) {
  if (p.g.nd > 3) red::decline(ctx, "pooling over more than 3 spatial dims");
}

class PoolKernel final : public Kernel {
 public:
  PoolKernel(const KernelInfo& info, PoolKind kind, bool global) { p_.read(info, kind, global, false); }

  void prepare(PrepareContext& ctx) override {
    dt_ = ctx.input_dtype(0);
    red::require_dtype(ctx, dt_, false);
    p_.resolve(ctx, ctx.input_shape(0));
    ctx.set_output(0, dt_, p_.y);
    want_indices_ = shape::pool_wants_indices(ctx, p_);
    if (want_indices_) ctx.set_output(1, DType::kInt64, p_.y);
    check_geometry(ctx, p_);
    g_ = pool_geo(p_.g);
  }

  void run(RunContext& ctx) override {
    CudaContext& c = CudaContext::of(ctx);
    Tensor& y = ctx.output(0);
    const int64_t total = y.numel();
    if (total == 0) return;
    int64_t* ind = want_indices_ ? ctx.output(1).data<int64_t>() : nullptr;
    red::dispatch<false>(dt_, [&]<class T>() {
      const T* x = static_cast<const T*>(ctx.input(0).raw_data());
      T* yp = static_cast<T*>(y.raw_data());
      if (p_.kind == PoolKind::kMax)
        max_pool<<<grid_for(total, c), 256, 0, c.stream()>>>(x, yp, ind, total, g_, p_.col_major);
      else
        avg_pool<<<grid_for(total, c), 256, 0, c.stream()>>>(x, yp, total, g_, p_.include_pad);
    });
    check_launch(p_.kind == PoolKind::kMax ? "MaxPool" : "AveragePool");
  }

 private:
  shape::PoolShape p_;
  DType dt_ = DType::kFloat32;
  bool want_indices_ = false;
  PoolGeo g_;
};

class PoolGradKernel final : public Kernel {
 public:
  PoolGradKernel(const KernelInfo& info, PoolKind kind, bool global) {
    p_.read(info, kind, global, true);
    relu_mask_ = info.attr_int("relu_mask", 0) != 0;
    if (relu_mask_ && (kind != PoolKind::kMax || global)) info.fail("attribute relu_mask applies to MaxPoolGrad only");
  }

  void prepare(PrepareContext& ctx) override {
    dt_ = ctx.input_dtype(0);
    red::require_dtype(ctx, dt_, false);
    const bool third = shape::pool_grad_inputs(ctx, p_, dt_);
    if (relu_mask_ && third) ctx.fail("relu_mask is not implemented with MaxPool's Indices (input 2)");
    ctx.set_output(0, dt_, ctx.input_shape(1));
    if (third) red::decline(ctx, "MaxPoolGrad reading MaxPool's Indices");
    check_geometry(ctx, p_);
    g_ = pool_geo(p_.g);
    if (p_.kind == PoolKind::kMax) ctx.request_workspace(size_t(shape_numel(p_.y)) * sizeof(int64_t));
  }

  void run(RunContext& ctx) override {
    CudaContext& c = CudaContext::of(ctx);
    Tensor& dx = ctx.output(0);
    const int64_t total = dx.numel(), outs = ctx.input(0).numel();
    if (total == 0) return;
    red::dispatch<false>(dt_, [&]<class T>() {
      const T* dy = static_cast<const T*>(ctx.input(0).raw_data());
      const T* x = static_cast<const T*>(ctx.input(1).raw_data());
      T* dxp = static_cast<T*>(dx.raw_data());
      if (p_.kind == PoolKind::kMax) {
        int64_t* arg = static_cast<int64_t*>(ctx.workspace());
        if (outs > 0) {
          max_pool_argmax<<<grid_for(outs, c), 256, 0, c.stream()>>>(x, arg, outs, g_);
          check_launch("MaxPoolGrad (argmax)");
        }
        max_pool_grad<<<grid_for(total, c), 256, 0, c.stream()>>>(x, dy, arg, dxp, total, g_, relu_mask_);
      } else {
        avg_pool_grad<<<grid_for(total, c), 256, 0, c.stream()>>>(dy, dxp, total, g_, p_.include_pad);
      }
    });
    check_launch(p_.kind == PoolKind::kMax ? "MaxPoolGrad" : "AveragePoolGrad");
  }

 private:
  shape::PoolShape p_;
  DType dt_ = DType::kFloat32;
  bool relu_mask_ = false;
  PoolGeo g_;
};

KernelFactory pool(PoolKind kind, bool global, bool grad) {
  return [kind, global, grad](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    if (grad) return std::make_unique<PoolGradKernel>(i, kind, global);
    return std::make_unique<PoolKernel>(i, kind, global);
  };
}

}  // namespace

void register_pool(KernelRegistry& r) {
  r.add("MaxPool", 1, kMaxOpsetAll, pool(PoolKind::kMax, false, false));
  r.add("AveragePool", 1, kMaxOpsetAll, pool(PoolKind::kAvg, false, false));
  r.add("GlobalMaxPool", 1, kMaxOpsetAll, pool(PoolKind::kMax, true, false));
  r.add("GlobalAveragePool", 1, kMaxOpsetAll, pool(PoolKind::kAvg, true, false));
  r.add(ops::kDomain, "MaxPoolGrad", 1, kMaxOpsetAll, pool(PoolKind::kMax, false, true));
  r.add(ops::kDomain, "AveragePoolGrad", 1, kMaxOpsetAll, pool(PoolKind::kAvg, false, true));
  r.add(ops::kDomain, "GlobalMaxPoolGrad", 1, kMaxOpsetAll, pool(PoolKind::kMax, true, true));
  r.add(ops::kDomain, "GlobalAveragePoolGrad", 1, kMaxOpsetAll, pool(PoolKind::kAvg, true, true));
}

}  // namespace onnxtrain::kernels::cuda
