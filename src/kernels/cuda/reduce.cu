// Reductions and the softmax family on the device.
//   ReduceSum/Mean/Max/Min/SumSquare(X, axes)  Y: shape(X), reduced axes set to 1 or removed
//   Softmax/LogSoftmax(X)                      Y: shape(X) (opset < 13: coerced to 2-D at axis)
//   com.onnxtrain SoftmaxGrad / LogSoftmaxGrad(dY, Y) -> dX (and onnxruntime's com.microsoft forms)
// The input is collapsed as on the CPU (size-1 dims dropped, neighbours with the same reduced/kept
// status merged). Innermost collapsed dim reduced ("row" mode): one warp per output (rows split
// into chunks, partials combined in a fixed order, when there are few outputs). Innermost dim kept
// ("column" mode, e.g. [N, H] -> [H]): 32 x 8 thread tiles, 32 adjacent outputs per tile, rows
// split over grid.y when there are few tiles. Sums of float32/float64 accumulate in float64,
// float16/bfloat16 in float32, integers in int64 (wrapping); Max/Min propagate NaN.
#include <vector>

#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/cuda_provider.h"
#include "kernels/cuda/reduce_util.h"
#include "kernels/shape/reduce.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cuda {

namespace {

using namespace red;
using shape::AxisSplit;

constexpr int kMaxDims = 16;

// A few dims of a contiguous tensor (row-major order, outermost first): index -> element offset.
struct Dims {
  int n = 0;
  int64_t dim[kMaxDims] = {}, stride[kMaxDims] = {};
  __host__ __device__ int64_t offset(int64_t idx) const {
    int64_t off = 0;
    for (int d = n - 1; d >= 0; --d) {
      const int64_t q = idx / dim[d];
      off += (idx - q * dim[d]) * stride[d];
      idx = q;
    }
    return off;
  }
};

// ---------------------------------------------------------------- reduction operators
enum class RK { kSum, kMean, kMax, kMin, kSumSquare };

template <class T>
using sum_acc_t = std::conditional_t<std::is_integral_v<T>, int64_t,
                                     std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, double>, double, float>>;

template <RK K, class T>
struct RedOp {
  using C = ct<T>;
  static constexpr bool kMinMax = K == RK::kMax || K == RK::kMin;
  using A = std::conditional_t<kMinMax, C, sum_acc_t<T>>;

  __device__ static A init() {
    if constexpr (K == RK::kMax) {
      if constexpr (std::is_integral_v<C>) return std::numeric_limits<C>::lowest();
      else return -std::numeric_limits<C>::infinity();
    } else if constexpr (K == RK::kMin) {
      if constexpr (std::is_integral_v<C>) return std::numeric_limits<C>::max();
      else return std::numeric_limits<C>::infinity();
    } else {
      return A(0);
    }
  }
  __device__ static A map(T v) {
    const C x = Num<T>::to(v);
    if constexpr (K == RK::kSumSquare) {
      if constexpr (std::is_integral_v<C>) return A(uint64_t(int64_t(x)) * uint64_t(int64_t(x)));
      else return A(x * x);  // the square in the element's compute type, as the CPU
    } else {
      return A(x);
    }
  }
  __device__ A operator()(A a, A b) const {
    if constexpr (K == RK::kMax) return (b > a || b != b) ? b : a;
    if constexpr (K == RK::kMin) return (b < a || b != b) ? b : a;
    if constexpr (std::is_integral_v<A>) return A(uint64_t(a) + uint64_t(b));
    return a + b;
  }
  __device__ static T fin(A a, int64_t n) {
    if constexpr (K == RK::kMean) {
      if constexpr (std::is_integral_v<A>) return n ? T(a / A(n)) : T(0);
      else return Num<T>::from(C(double(a) / double(n)));
    }
    return Num<T>::from(C(a));
  }
};

// Row mode: each output o is a reduction over `inner`-long contiguous runs at the offsets of the
// reduced dims `rd`; outputs at the offsets of the kept dims `kd`. Work item w = (o, s): chunk s of
// the output's red elements. S == 1: the result goes to y; else the partial to part[s * nout + o].
template <RK K, class T>
__global__ void row_reduce(const T* __restrict__ x, T* __restrict__ y, typename RedOp<K, T>::A* __restrict__ part,
                           Dims kd, Dims rd, int64_t inner, int64_t nout, int64_t red, int64_t S, int64_t chunk) {
  using Op = RedOp<K, T>;
  using A = typename Op::A;
  const Op op;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x >> 5);
  for (int64_t w = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); w < nout * S; w += warps) {
    const int64_t o = w / S, s = w - o * S;
    const T* base = x + kd.offset(o);
    const int64_t e0 = s * chunk, e1 = min(red, e0 + chunk);
    A acc = Op::init();
    if (rd.n == 0) {
      for (int64_t e = e0 + lane; e < e1; e += 32) acc = op(acc, Op::map(base[e]));
    } else {
      for (int64_t e = e0 + lane; e < e1; e += 32) {
        const int64_t r = e / inner, j = e - r * inner;
        acc = op(acc, Op::map(base[rd.offset(r) + j]));
      }
    }
    acc = group_reduce<32>(acc, op);
    if (lane == 0) {
      if (S == 1) y[o] = Op::fin(acc, red);
      else part[s * nout + o] = acc;
    }
  }
}

// Column mode: outputs k * I + j (kept dims `kd` outside the contiguous kept run of I); a 32 x 8
// block takes 32 adjacent j, its 8 rows of threads stride over the reduced elements of chunk
// blockIdx.y (offsets from the reduced dims `rd`); rows combine in a fixed order.
template <RK K, class T>
__global__ void col_reduce(const T* __restrict__ x, T* __restrict__ y, typename RedOp<K, T>::A* __restrict__ part,
                           Dims kd, Dims rd, int64_t I, int64_t nk, int64_t red, int64_t S, int64_t chunk) {
  using Op = RedOp<K, T>;
  using A = typename Op::A;
  const Op op;
  __shared__ A sm[8][33];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t nbj = (I + 31) / 32, tiles = nk * nbj, nout = nk * I, s = blockIdx.y;
  const int64_t e0 = s * chunk, e1 = min(red, e0 + chunk);
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t k = t / nbj, j = (t - k * nbj) * 32 + tx;
    A acc = Op::init();
    if (j < I) {
      const T* base = x + kd.offset(k) + j;
      if (rd.n == 1) {
        const int64_t st = rd.stride[0];
        for (int64_t e = e0 + ty; e < e1; e += 8) acc = op(acc, Op::map(base[e * st]));
      } else {
        for (int64_t e = e0 + ty; e < e1; e += 8) acc = op(acc, Op::map(base[rd.offset(e)]));
      }
    }
    sm[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && j < I) {
      for (int r = 1; r < 8; ++r) acc = op(acc, sm[r][tx]);
      const int64_t o = k * I + j;
      if (S == 1) y[o] = Op::fin(acc, red);
      else part[s * nout + o] = acc;
    }
    __syncthreads();
  }
}

// y[o] = fin(partials of o combined over s in order).
template <RK K, class T>
__global__ void combine_partials(const typename RedOp<K, T>::A* __restrict__ part, T* __restrict__ y, int64_t nout,
                                 int64_t S, int64_t red) {
  using Op = RedOp<K, T>;
  const Op op;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < nout; o += int64_t(gridDim.x) * blockDim.x) {
    auto acc = part[o];
    for (int64_t s = 1; s < S; ++s) acc = op(acc, part[s * nout + o]);
    y[o] = Op::fin(acc, red);
  }
}

// Empty reduction: y[o] = fin(init).
template <RK K, class T>
__global__ void fill_empty(T* __restrict__ y, int64_t nout) {
  using Op = RedOp<K, T>;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < nout; o += int64_t(gridDim.x) * blockDim.x)
    y[o] = Op::fin(Op::init(), 0);
}

// Reduction geometry (shape only, computed in prepare).
struct Layout {
  Shape out_shape;
  int64_t out_numel = 0, red_numel = 0;
  bool row = true;
  int64_t inner = 1;  // row: reduced contiguous run; column: kept contiguous run
  Dims kept, red;
  int64_t S = 1, chunk = 1;  // split of each output's reduced elements
  size_t ws_elems = 0;       // partials (S > 1)

  template <class Ctx>
  void init(const Ctx& ctx, const Shape& in, const std::vector<bool>& mask, bool keepdims) {
    const shape::ReduceGeometry r = shape::reduce_geometry(in, mask, keepdims);
    out_shape = r.out_shape;
    out_numel = r.out_numel, red_numel = r.red_numel;
    row = r.row, inner = r.inner;
    auto fill = [&](Dims& d, const std::vector<shape::ReduceGeometry::Run>& runs) {
      if (runs.size() > size_t(kMaxDims)) decline(ctx, "too many dims to reduce after collapsing");
      d = Dims{};
      for (const auto& k : runs) {
        d.dim[d.n] = k.dim;
        d.stride[d.n] = k.stride;
        ++d.n;
      }
    };
    fill(kept, r.kept);
    fill(red, r.red);
    S = 1;
    chunk = std::max<int64_t>(1, red_numel);
    if (out_numel == 0 || red_numel == 0) return;
    if (row) {
      // Enough warps to fill the device: split rows when there are few outputs.
      if (out_numel < 4096 && red_numel > 2048) S = std::min((4096 + out_numel - 1) / out_numel, (red_numel + 1023) / 1024);
    } else {
      const int64_t tiles = (out_numel / inner) * ((inner + 31) / 32);
      if (tiles < 1024 && red_numel > 64) S = std::min((1024 + tiles - 1) / tiles, (red_numel + 63) / 64);
    }
    S = std::max<int64_t>(1, std::min<int64_t>(S, 4096));
    chunk = (red_numel + S - 1) / S;
    S = (red_numel + chunk - 1) / chunk;
    ws_elems = S > 1 ? size_t(S * out_numel) : 0;
  }
};

template <RK K, class T>
void launch_reduce(const Layout& L, const T* x, T* y, void* ws, const CudaContext& c) {
  using A = typename RedOp<K, T>::A;
  cudaStream_t st = c.stream();
  if (L.out_numel == 0) return;
  if (L.red_numel == 0) {
    fill_empty<K, T><<<grid_for(L.out_numel, c), 256, 0, st>>>(y, L.out_numel);
    check_launch("reduce_fill_empty");
    return;
  }
  A* part = static_cast<A*>(ws);
  if (L.row) {
    const int64_t work = L.out_numel * L.S;
    const unsigned blocks = unsigned(std::min<int64_t>((work + 7) / 8, int64_t(c.multiprocessors()) * 32));
    row_reduce<K, T><<<blocks, 256, 0, st>>>(x, y, part, L.kept, L.red, L.inner, L.out_numel, L.red_numel, L.S, L.chunk);
    check_launch("row_reduce");
  } else {
    const int64_t nk = L.out_numel / L.inner, tiles = nk * ((L.inner + 31) / 32);
    dim3 grid(unsigned(std::min<int64_t>(tiles, 65535)), unsigned(L.S));
    col_reduce<K, T><<<grid, 256, 0, st>>>(x, y, part, L.kept, L.red, L.inner, nk, L.red_numel, L.S, L.chunk);
    check_launch("col_reduce");
  }
  if (L.S > 1) {
    combine_partials<K, T><<<grid_for(L.out_numel, c), 256, 0, st>>>(part, y, L.out_numel, L.S, L.red_numel);
    check_launch("reduce_combine_partials");
  }
}

// Reduce*: axes from the attribute (axes_input false) or from input 1 (a host input).
template <RK K>
class ReduceKernel final : public Kernel {
 public:
  ReduceKernel(const KernelInfo& info, bool axes_input) : axes_input_(axes_input) {
    keepdims_ = info.attr_int("keepdims", 1) != 0;
    noop_empty_ = info.attr_int("noop_with_empty_axes", 0) != 0;
    if (!axes_input_) axes_ = info.attr_ints("axes", {});
  }
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    require_dtype(ctx, dt, true);
    std::vector<int64_t> axes = axes_;
    if (axes_input_ && ctx.has_input(1)) {
      const Tensor* a = ctx.input_value(1);
      if (!a) {
        ctx.set_output_dynamic(0, dt);
        return;
      }
      axes = shape::read_ints(ctx, *a, "axes");
    }
    const Shape& in = ctx.input_shape(0);
    noop_ = axes.empty() && noop_empty_;
    if (noop_) {
      ctx.set_output_alias(0, 0, in);
      return;
    }
    L_.init(ctx, in, shape::axes_mask(ctx, axes, in.size()), keepdims_);
    ctx.set_output(0, dt, L_.out_shape);
    if (L_.ws_elems) {
      size_t a = 0;
      dispatch<true>(dt, [&]<class T>() { a = sizeof(typename RedOp<K, T>::A); });
      ctx.request_workspace(L_.ws_elems * a);
    }
  }
  void run(RunContext& ctx) override {
    const CudaContext& c = CudaContext::of(ctx);
    const Tensor& x = ctx.input(0);
    if (noop_) {
      if (!ctx.output_aliases_input(0, 0) && x.nbytes())
        OT_CUDA(cudaMemcpyAsync(ctx.output(0).raw_data(), x.raw_data(), x.nbytes(), cudaMemcpyDeviceToDevice, c.stream()));
      return;
    }
    dispatch<true>(x.dtype(), [&]<class T>() {
      launch_reduce<K, T>(L_, static_cast<const T*>(x.raw_data()), static_cast<T*>(ctx.output(0).raw_data()),
                          ctx.workspace(), c);
    });
  }

 private:
  bool axes_input_, keepdims_ = true, noop_empty_ = false, noop_ = false;
  std::vector<int64_t> axes_;
  Layout L_;
};

template <RK K>
void add_reduce(KernelRegistry& r, const std::string& op, int64_t axes_input_since) {
  shape::add_reduce_kernels(r, op, axes_input_since, [](bool axes_input) -> KernelFactory {
    return [axes_input](const KernelInfo& i) -> std::unique_ptr<Kernel> {
      return std::make_unique<ReduceKernel<K>>(i, axes_input);
    };
  });
}

// ---------------------------------------------------------------- Softmax, LogSoftmax
// Rows (inner == 1): a group of G threads per row of n (G = 32: a warp; else the block).
//   m = max x (NaN propagates); sum = sum exp(x - m) in float64;
//   Softmax y = exp(x - m) * (1 / sum); LogSoftmax y = (x - m) - log(sum).
template <bool Log, int G, class T>
__global__ void softmax_rows(const T* __restrict__ X, T* __restrict__ Y, int64_t outer, int64_t n) {
  using C = ct<T>;
  const int lane = threadIdx.x % G;
  const int64_t per = blockDim.x / G, groups = int64_t(gridDim.x) * per;
  for (int64_t o = int64_t(blockIdx.x) * per + threadIdx.x / G; o < outer; o += groups) {
    const T* x = X + o * n;
    T* y = Y + o * n;
    C m = -std::numeric_limits<C>::infinity();
    for (int64_t j = lane; j < n; j += G) m = MaxNanOp{}(m, ld(x, j));
    m = group_reduce<G>(m, MaxNanOp{});
    double s = 0;
    for (int64_t j = lane; j < n; j += G) s += double(dexp(C(ld(x, j) - m)));
    s = group_reduce<G>(s, SumOp{});
    if constexpr (Log) {
      const C lse = C(log(s));
      for (int64_t j = lane; j < n; j += G) y[j] = st<T>((ld(x, j) - m) - lse);
    } else {
      const C inv = C(1.0 / s);
      for (int64_t j = lane; j < n; j += G) y[j] = st<T>(C(dexp(C(ld(x, j) - m))) * inv);
    }
  }
}

// Columns (inner > 1): one thread per (o, i), n values inner apart.
template <bool Log, class T>
__global__ void softmax_cols(const T* __restrict__ X, T* __restrict__ Y, int64_t outer, int64_t n, int64_t inner) {
  using C = ct<T>;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < outer * inner;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = t / inner, i = t - o * inner, base = o * n * inner + i;
    const T* x = X + base;
    T* y = Y + base;
    C m = -std::numeric_limits<C>::infinity();
    for (int64_t r = 0; r < n; ++r) m = MaxNanOp{}(m, ld(x, r * inner));
    double s = 0;
    for (int64_t r = 0; r < n; ++r) s += double(dexp(C(ld(x, r * inner) - m)));
    const C f = Log ? C(log(s)) : C(1.0 / s);
    for (int64_t r = 0; r < n; ++r) {
      const C v = ld(x, r * inner) - m;
      y[r * inner] = Log ? st<T>(v - f) : st<T>(C(dexp(v)) * f);
    }
  }
}

// Row kernels: a warp per row up to 1024 values, else a block of 512 per row.
template <class T, class WarpK, class BlockK, class... Args>
void launch_rows(const CudaContext& c, int64_t outer, int64_t n, WarpK wk, BlockK bk, const char* name, Args... args) {
  cudaStream_t s = c.stream();
  const int64_t cap = int64_t(c.multiprocessors()) * 32;
  if (n <= 1024) {
    wk<<<unsigned(std::min<int64_t>((outer + 7) / 8, cap)), 256, 0, s>>>(args...);
  } else {
    bk<<<unsigned(std::min<int64_t>(outer, cap)), 512, 0, s>>>(args...);
  }
  check_launch(name);
}

template <bool Log>
class SoftmaxKernel final : public Kernel {
 public:
  SoftmaxKernel(const KernelInfo& info, bool coerce_2d) : coerce_(coerce_2d) {
    axis_ = info.attr_int("axis", coerce_2d ? 1 : -1);
  }
  void prepare(PrepareContext& ctx) override {
    require_dtype(ctx, ctx.input_dtype(0), false);
    const Shape& s = ctx.input_shape(0);
    split_ = shape::softmax_split(ctx, s, axis_, coerce_);
    ctx.set_output(0, ctx.input_dtype(0), s);
  }
  void run(RunContext& ctx) override {
    const CudaContext& c = CudaContext::of(ctx);
    const Tensor& x = ctx.input(0);
    dispatch<false>(x.dtype(), [&]<class T>() {
      const T* X = static_cast<const T*>(x.raw_data());
      T* Y = static_cast<T*>(ctx.output(0).raw_data());
      const int64_t outer = split_.outer, n = split_.n, inner = split_.inner;
      if (n == 0 || outer == 0 || inner == 0) return;
      if (inner == 1) {
        launch_rows<T>(c, outer, n, softmax_rows<Log, 32, T>, softmax_rows<Log, 512, T>, "softmax_rows", X, Y, outer, n);
      } else {
        softmax_cols<Log, T><<<grid_for(outer * inner, c), 256, 0, c.stream()>>>(X, Y, outer, n, inner);
        check_launch("softmax_cols");
      }
    });
  }

 private:
  bool coerce_;
  int64_t axis_;
  AxisSplit split_;
};

template <bool Log>
void add_softmax(KernelRegistry& r, const std::string& op) {
  for (bool coerce : {true, false})
    r.add("", op, coerce ? 1 : 13, coerce ? 12 : kMaxOpsetAll, [coerce](const KernelInfo& i) -> std::unique_ptr<Kernel> {
      return std::make_unique<SoftmaxKernel<Log>>(i, coerce);
    });
}

// ---------------------------------------------------------------- SoftmaxGrad, LogSoftmaxGrad
// SoftmaxGrad(dY, Y)    -> dX = Y (dY - s), s = sum(dY Y) in float64
// LogSoftmaxGrad(dY, Y) -> dX = dY - exp(Y) s, s = sum(dY) in float64
template <bool Log, class T>
__device__ inline double grad_term(const T* dy, const T* y, int64_t j) {
  if constexpr (Log) return double(ld(dy, j));
  else return double(ld(dy, j)) * double(ld(y, j));
}
template <bool Log, class T>
__device__ inline T grad_out(const T* dy, const T* y, int64_t j, double s) {
  using C = ct<T>;
  if constexpr (Log) return st<T>(ld(dy, j) - C(dexp(ld(y, j))) * C(s));
  else return st<T>(ld(y, j) * (ld(dy, j) - C(s)));
}

template <bool Log, int G, class T>
__global__ void softmax_grad_rows(const T* __restrict__ dY, const T* __restrict__ Y, T* __restrict__ dX, int64_t outer,
                                  int64_t n) {
  const int lane = threadIdx.x % G;
  const int64_t per = blockDim.x / G, groups = int64_t(gridDim.x) * per;
  for (int64_t o = int64_t(blockIdx.x) * per + threadIdx.x / G; o < outer; o += groups) {
    const T *dy = dY + o * n, *y = Y + o * n;
    T* dx = dX + o * n;
    double s = 0;
    for (int64_t j = lane; j < n; j += G) s += grad_term<Log>(dy, y, j);
    s = group_reduce<G>(s, SumOp{});
    for (int64_t j = lane; j < n; j += G) dx[j] = grad_out<Log>(dy, y, j, s);
  }
}

template <bool Log, class T>
__global__ void softmax_grad_cols(const T* __restrict__ dY, const T* __restrict__ Y, T* __restrict__ dX, int64_t outer,
                                  int64_t n, int64_t inner) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < outer * inner;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = t / inner, i = t - o * inner, base = o * n * inner + i;
    const T *dy = dY + base, *y = Y + base;
    T* dx = dX + base;
    double s = 0;
    for (int64_t r = 0; r < n; ++r) s += grad_term<Log>(dy, y, r * inner);
    for (int64_t r = 0; r < n; ++r) dx[r * inner] = grad_out<Log>(dy, y, r * inner, s);
  }
}

template <bool Log>
class SoftmaxGradKernel final : public Kernel {
 public:
  explicit SoftmaxGradKernel(const KernelInfo& info, bool coerce = false, int64_t axis = -1)
      : coerce_(info.attr_int("coerce_2d", coerce) != 0), axis_(info.attr_int("axis", axis)) {}
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    require_dtype(ctx, dt, false);
    shape::check_softmax_grad_inputs(ctx, dt);
    const Shape& s = ctx.input_shape(1);
    split_ = shape::softmax_split(ctx, s, axis_, coerce_);
    ctx.set_output(0, dt, s);
  }
  void run(RunContext& ctx) override {
    const CudaContext& c = CudaContext::of(ctx);
    dispatch<false>(ctx.input(0).dtype(), [&]<class T>() {
      const T* dY = static_cast<const T*>(ctx.input(0).raw_data());
      const T* Y = static_cast<const T*>(ctx.input(1).raw_data());
      T* dX = static_cast<T*>(ctx.output(0).raw_data());
      const int64_t outer = split_.outer, n = split_.n, inner = split_.inner;
      if (n == 0 || outer == 0 || inner == 0) return;
      if (inner == 1) {
        launch_rows<T>(c, outer, n, softmax_grad_rows<Log, 32, T>, softmax_grad_rows<Log, 512, T>, "softmax_grad_rows",
                       dY, Y, dX, outer, n);
      } else {
        softmax_grad_cols<Log, T><<<grid_for(outer * inner, c), 256, 0, c.stream()>>>(dY, Y, dX, outer, n, inner);
        check_launch("softmax_grad_cols");
      }
    });
  }

 private:
  bool coerce_;
  int64_t axis_;
  AxisSplit split_;
};

}  // namespace

void register_reduce(KernelRegistry& r) {
  add_reduce<RK::kSum>(r, "ReduceSum", 13);
  add_reduce<RK::kMean>(r, "ReduceMean", 18);
  add_reduce<RK::kMax>(r, "ReduceMax", 18);
  add_reduce<RK::kMin>(r, "ReduceMin", 18);
  add_reduce<RK::kSumSquare>(r, "ReduceSumSquare", 18);
  add_softmax<false>(r, "Softmax");
  add_softmax<true>(r, "LogSoftmax");
  r.add(ops::kDomain, "SoftmaxGrad", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<SoftmaxGradKernel<false>>(i); });
  r.add(ops::kDomain, "LogSoftmaxGrad", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<SoftmaxGradKernel<true>>(i); });
  // onnxruntime's com.microsoft forms: opset < 13 semantics by default (coerce at axis 1), and the _13 ones.
  for (bool v13 : {false, true})
    for (bool log : {false, true}) {
      const std::string op = std::string(log ? "LogSoftmaxGrad" : "SoftmaxGrad") + (v13 ? "_13" : "");
      r.add(ops::kMicrosoftDomain, op, 1, kMaxOpsetAll, [v13, log](const KernelInfo& i) -> std::unique_ptr<Kernel> {
        if (log) return std::make_unique<SoftmaxGradKernel<true>>(i, !v13, v13 ? -1 : 1);
        return std::make_unique<SoftmaxGradKernel<false>>(i, !v13, v13 ? -1 : 1);
      });
    }
}

}  // namespace onnxtrain::kernels::cuda
