// CUDA data movement: every output element is a copy of one input element (GatherGrad: a sum).
//   Views (Reshape, Squeeze, Unsqueeze, Flatten, Identity): Y = X, a view when the executor allows
//     it, else one device-to-device copy.
//   Transpose: Y[i] = X[i at perm^-1]; Slice: Y[i] = X[start + i * step]; Expand: Y = broadcast X:
//     one strided copy (movement_copy.h; a tiled kernel for swaps of the last two dims).
//   Concat / Split: Y = X_0 | X_1 | ... along axis: one row copy [outer, w_i] per part.
//   SliceGrad: dX = zeros, dX[slice] = dY.   Gather: Y[o, j, i] = X[o, idx[j], i].
//   GatherGrad: dX = zeros; dX[o, idx[j], i] += dY[o, j, i] (atomicAdd; float32/float64).
// Shapes, attributes and errors come from the provider-neutral shape logic, as in the CPU kernels
// (cpu/shape.cpp, cpu/movement.cpp, cpu/index.cpp). Elements are moved as bytes (1/2/4/8).
#include <climits>
#include <cstring>

#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/cuda_provider.h"
#include "kernels/cuda/movement_copy.h"
#include "kernels/shape/index.h"
#include "kernels/shape/movement.h"
#include "kernels/shape/reshape.h"
#include "kernels/shape/views.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cuda {

namespace {

constexpr int kThreads = 256;

// ---------------------------------------------------------------- helpers
/// Element types a movement kernel can hold on the device: anything but strings.
void require_device_type(const PrepareContext& ctx, DType dt) {
  if (dt == DType::kString || dt == DType::kUndefined)
    throw_error<NotImplemented>(ctx.node().describe(), ": element type ", dtype_name(dt),
                                " is not supported by the CUDA provider");
}
/// ... and of 1, 2, 4 or 8 bytes (the kernels templated on the element size).
void require_sized_type(const PrepareContext& ctx, DType dt) {
  require_device_type(ctx, dt);
  const size_t s = dtype_size(dt);
  if (s != 1 && s != 2 && s != 4 && s != 8)
    throw_error<NotImplemented>(ctx.node().describe(), ": element type ", dtype_name(dt),
                                " is not supported by the CUDA provider");
}

/// Calls f.template operator()<U>() with an unsigned type of `bytes` (1, 2, 4, 8; 16: uint4).
template <class F>
void by_size(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f.template operator()<uint8_t>(); return;
    case 2: f.template operator()<uint16_t>(); return;
    case 4: f.template operator()<uint32_t>(); return;
    case 8: f.template operator()<uint64_t>(); return;
    case 16: f.template operator()<uint4>(); return;
    default: throw_error<RuntimeError>("cuda movement: element size ", bytes, " is not supported");
  }
}

const char* bytes_of(const void* p, int64_t off) { return static_cast<const char*>(p) + off; }
char* bytes_of(void* p, int64_t off) { return static_cast<char*>(p) + off; }

void device_copy(const CudaContext& c, void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  OT_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c.stream()));
}

// ---------------------------------------------------------------- kernels
// Rows: dst[r * dst_stride + c] = src[r * src_stride + c] over [rows, cols] units U.
template <class U, class I>
__global__ void copy_rows_kernel(const U* __restrict__ src, int64_t sst, U* __restrict__ dst, int64_t dstst, I rows,
                                 I cols) {
  const I n = rows * cols;
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += I(blockDim.x) * gridDim.x) {
    const I r = i / cols, c = i - r * cols;
    dst[int64_t(r) * dstst + int64_t(c)] = src[int64_t(r) * sst + int64_t(c)];
  }
}

// Strided copy: dst[offsets(i).d] = src[offsets(i).s] for the n elements of g (movement_copy.h).
template <class T, class I>
__global__ void strided_copy_kernel(const T* __restrict__ src, T* __restrict__ dst, StridedGeom g) {
  const I n = I(g.n);
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += I(blockDim.x) * gridDim.x) {
    int64_t so, dof;
    strided_offsets<I>(g, i, &so, &dof);
    dst[dof] = src[so];
  }
}

// Batched transpose of the last two dims: X [B, R, C] -> Y [B, C, R] through 32x32 tiles
// (blocks of 32x8 threads).
constexpr int kTile = 32, kTileRows = 8;
template <class T>
__global__ void transpose_tiles_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t B, int64_t R, int64_t C) {
  __shared__ T tile[kTile][kTile + 1];
  for (int64_t b = blockIdx.z; b < B; b += gridDim.z) {
    const T* xb = x + b * R * C;
    T* yb = y + b * R * C;
    for (int64_t r0 = int64_t(blockIdx.y) * kTile; r0 < R; r0 += int64_t(gridDim.y) * kTile) {
      for (int64_t c0 = int64_t(blockIdx.x) * kTile; c0 < C; c0 += int64_t(gridDim.x) * kTile) {
        for (int j = threadIdx.y; j < kTile; j += kTileRows) {
          const int64_t r = r0 + j, c = c0 + threadIdx.x;
          if (r < R && c < C) tile[j][threadIdx.x] = xb[r * C + c];
        }
        __syncthreads();
        for (int j = threadIdx.y; j < kTile; j += kTileRows) {
          const int64_t c = c0 + j, r = r0 + threadIdx.x;
          if (r < R && c < C) yb[c * R + r] = tile[threadIdx.x][j];
        }
        __syncthreads();
      }
    }
  }
}

// Gather: X [outer, n, inner], idx [nidx] -> Y [outer, nidx, inner] (inner in units U). Negative
// indices count from the end; an index outside [-n, n) gives zeros (the CPU kernel raises; a
// device kernel cannot without a host sync).
template <class U, class Idx, class I>
__global__ void gather_kernel(const U* __restrict__ x, const Idx* __restrict__ idx, U* __restrict__ y, I total,
                              I nidx, I inner, int64_t n) {
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += I(blockDim.x) * gridDim.x) {
    const I r = i / inner, c = i - r * inner;
    const I o = r / nidx, j = r - o * nidx;
    int64_t k = int64_t(idx[j]);
    if (k < 0) k += n;
    y[i] = (k >= 0 && k < n) ? x[(int64_t(o) * n + k) * int64_t(inner) + int64_t(c)] : U{};
  }
}

// GatherGrad: dX [outer, n, inner] (zeroed first) += dY [outer, nidx, inner] at rows idx[j].
template <class T, class Idx>
__global__ void gather_grad_kernel(const T* __restrict__ dy, const Idx* __restrict__ idx, T* __restrict__ dx,
                                   int64_t total, int64_t nidx, int64_t inner, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t r = i / inner, c = i - r * inner;
    const int64_t o = r / nidx, j = r - o * nidx;
    int64_t k = int64_t(idx[j]);
    if (k < 0) k += n;
    if (k >= 0 && k < n) atomicAdd(dx + (o * n + k) * inner + c, dy[i]);
  }
}

// ---------------------------------------------------------------- launchers
// Copies [rows, cols_b bytes] rows with byte strides, in the widest unit every quantity allows.
void copy_rows(const CudaContext& c, const void* src, int64_t src_stride_b, void* dst, int64_t dst_stride_b,
               int64_t rows, int64_t cols_b) {
  if (rows <= 0 || cols_b <= 0) return;
  if (rows == 1 || (src_stride_b == cols_b && dst_stride_b == cols_b)) {
    device_copy(c, dst, src, size_t(rows * cols_b));
    return;
  }
  const int u = copy_unit({uint64_t(uintptr_t(src)), uint64_t(uintptr_t(dst)), uint64_t(src_stride_b),
                           uint64_t(dst_stride_b), uint64_t(cols_b)});
  by_size(size_t(u), [&]<class U>() {
    const int64_t cols = cols_b / u, n = rows * cols;
    const unsigned grid = grid_for(n, c, kThreads);
    if (n <= INT32_MAX)
      copy_rows_kernel<U, uint32_t><<<grid, kThreads, 0, c.stream()>>>(
          static_cast<const U*>(src), src_stride_b / u, static_cast<U*>(dst), dst_stride_b / u, uint32_t(rows),
          uint32_t(cols));
    else
      copy_rows_kernel<U, int64_t><<<grid, kThreads, 0, c.stream()>>>(
          static_cast<const U*>(src), src_stride_b / u, static_cast<U*>(dst), dst_stride_b / u, rows, cols);
    check_launch("copy_rows_kernel");
  });
}

// Runs g with elements of `es` bytes; src and dst point at the elements of index 0.
void strided_copy(const CudaContext& c, const StridedGeom& g, const void* src, void* dst, size_t es) {
  if (g.n == 0) return;
  if (g.identity()) {
    device_copy(c, dst, src, size_t(g.n) * es);
    return;
  }
  const int nd = g.nd;
  if (nd == 2 && g.ss[1] == 1 && g.ds[1] == 1) {  // rows of contiguous runs (broadcast or strided rows)
    copy_rows(c, src, g.ss[0] * int64_t(es), dst, g.ds[0] * int64_t(es), g.dims[0], g.dims[1] * int64_t(es));
    return;
  }
  int64_t B, R, C;
  if (g.last_two_swapped(&B, &R, &C)) {
    by_size(es, [&]<class T>() {
      const dim3 block(kTile, kTileRows);
      const dim3 grid(unsigned(std::min<int64_t>((C + kTile - 1) / kTile, INT32_MAX)),
                      unsigned(std::min<int64_t>((R + kTile - 1) / kTile, 65535)),
                      unsigned(std::min<int64_t>(B, 65535)));
      transpose_tiles_kernel<T><<<grid, block, 0, c.stream()>>>(static_cast<const T*>(src), static_cast<T*>(dst), B, R,
                                                               C);
      check_launch("transpose_tiles_kernel");
    });
    return;
  }
  by_size(es, [&]<class T>() {
    const unsigned grid = grid_for(g.n, c, kThreads);
    if (g.n <= INT32_MAX)
      strided_copy_kernel<T, uint32_t><<<grid, kThreads, 0, c.stream()>>>(static_cast<const T*>(src),
                                                                          static_cast<T*>(dst), g);
    else
      strided_copy_kernel<T, int64_t><<<grid, kThreads, 0, c.stream()>>>(static_cast<const T*>(src),
                                                                         static_cast<T*>(dst), g);
    check_launch("strided_copy_kernel");
  });
}

// Builds g in prepare; declines (the CPU provider runs the node) past kMoveMaxDims merged dims.
void init_geom(const PrepareContext& ctx, StridedGeom& g, const Shape& dims, const std::vector<int64_t>& ss,
               const std::vector<int64_t>& ds) {
  if (!g.init(dims, ss, ds))
    throw_error<NotImplemented>(ctx.node().describe(), ": more than ", kMoveMaxDims,
                                " dims after merging are not supported by the CUDA provider");
}

// ---------------------------------------------------------------- views
// Y = X with another shape: a view when the executor allows it, else a device copy.
// Reshape, Flatten, Squeeze, Unsqueeze (kernels/shape/views.h) and Identity: tensors only.
struct DeviceViews {
  static void check(const PrepareContext& ctx) {
    if (ctx.input_kind(0) != Value::Kind::kTensor)
      throw_error<NotImplemented>(ctx.node().describe(), ": only tensor inputs run on the CUDA provider");
    require_device_type(ctx, ctx.input_dtype(0));
  }
  static void copy(RunContext& ctx) {
    device_copy(CudaContext::of(ctx), ctx.output(0).raw_data(), ctx.input(0).raw_data(), ctx.input(0).nbytes());
  }
};

// Identity of a tensor (sequences and absent optionals run on the CPU provider).
class IdentityKernel final : public shape::ViewKernel<DeviceViews> {
 public:
  explicit IdentityKernel(const KernelInfo&) {}

 private:
  bool target(const PrepareContext& ctx, Shape* out) override {
    *out = ctx.input_shape(0);
    return true;
  }
};

// ---------------------------------------------------------------- Transpose
// Y: [d[perm[0]], ...]; one strided copy (tiled when it swaps the last two dims).
class TransposeKernel final : public Kernel {
 public:
  explicit TransposeKernel(const KernelInfo& info) : has_perm_(info.has_attr("perm")), perm_(info.attr_ints("perm", {})) {}
  void prepare(PrepareContext& ctx) override {
    require_sized_type(ctx, ctx.input_dtype(0));
    const Shape& in = ctx.input_shape(0);
    const size_t r = in.size();
    const std::vector<int64_t> perm = shape::transpose_perm(ctx, perm_, has_perm_, r);
    const Shape out = shape::permuted(in, perm);
    const std::vector<int64_t> ss = shape::permuted(shape::contiguous_strides(in), perm);
    init_geom(ctx, g_, out, ss, shape::contiguous_strides(out));
    es_ = dtype_size(ctx.input_dtype(0));
    if (g_.identity()) ctx.set_output_alias(0, 0, out);
    else ctx.set_output(0, ctx.input_dtype(0), out);
  }
  void run(RunContext& ctx) override {
    if (ctx.output_aliases_input(0, 0)) return;
    strided_copy(CudaContext::of(ctx), g_, ctx.input(0).raw_data(), ctx.output(0).raw_data(), es_);
  }

 private:
  bool has_perm_;
  std::vector<int64_t> perm_;
  StridedGeom g_;
  size_t es_ = 0;
};

// ---------------------------------------------------------------- Concat
// Input i is an [outer, w_i] block copied to columns [off_i, off_i + w_i) of the [outer, row] output.
class ConcatKernel final : public Kernel {
 public:
  explicit ConcatKernel(const KernelInfo& info) {
    if (info.opset() >= 4 && !info.has_attr("axis")) info.fail("attribute 'axis' is required");
    axis_ = info.attr_int("axis", 1);
  }
  void prepare(PrepareContext& ctx) override {
    require_device_type(ctx, ctx.input_dtype(0));
    shape::ConcatGeom g = shape::concat_geometry(ctx, axis_);
    const int64_t axis = g.axis;
    const Shape& out = g.output;
    const int64_t inner = shape::dim_product(out, size_t(axis) + 1, out.size());
    es_ = int64_t(dtype_size(ctx.input_dtype(0)));
    outer_ = shape::dim_product(out, 0, size_t(axis));
    row_ = out[size_t(axis)] * inner;
    used_ = g.used;
    widths_.clear();
    for (size_t i : used_) widths_.push_back(ctx.input_shape(i)[size_t(axis)] * inner);
    if (used_.size() == 1) ctx.set_output_alias(0, used_[0], out);
    else ctx.set_output(0, ctx.input_dtype(0), out);
  }
  void run(RunContext& ctx) override {
    if (used_.size() == 1 && ctx.output_aliases_input(0, used_[0])) return;
    const CudaContext& c = CudaContext::of(ctx);
    void* y = ctx.output(0).raw_data();
    int64_t off = 0;
    for (size_t k = 0; k < used_.size(); ++k) {
      copy_rows(c, ctx.input(used_[k]).raw_data(), widths_[k] * es_, bytes_of(y, off * es_), row_ * es_, outer_,
                widths_[k] * es_);
      off += widths_[k];
    }
  }

 private:
  int64_t axis_, outer_ = 0, row_ = 0, es_ = 0;
  std::vector<size_t> used_;     // inputs taking part (legacy empty 1-D inputs left out)
  std::vector<int64_t> widths_;  // their elements per row
};

// ---------------------------------------------------------------- Split
// Output i is columns [off_i, off_i + w_i) of the input viewed as [outer, row].
class SplitKernel final : public Kernel {
 public:
  explicit SplitKernel(const KernelInfo& info) : at_(shape::read_split_attrs(info)) {}
  void prepare(PrepareContext& ctx) override {
    require_device_type(ctx, ctx.input_dtype(0));
    es_ = int64_t(dtype_size(ctx.input_dtype(0)));
    shape::prepare_split(ctx, at_, &rows_);
  }
  void run(RunContext& ctx) override {
    const std::vector<int64_t>& widths = rows_.widths;
    if (widths.size() == 1 && ctx.output_aliases_input(0, 0)) return;
    const CudaContext& c = CudaContext::of(ctx);
    const void* x = ctx.input(0).raw_data();
    int64_t off = 0;
    for (size_t k = 0; k < widths.size(); ++k) {
      if (ctx.has_output(k))
        copy_rows(c, bytes_of(x, off * es_), rows_.row * es_, ctx.output(k).raw_data(), widths[k] * es_, rows_.outer,
                  widths[k] * es_);
      off += widths[k];
    }
  }

 private:
  shape::SplitAttrs at_;
  shape::SplitRows rows_;
  int64_t es_ = 0;
};

// ---------------------------------------------------------------- Slice, SliceGrad
// Slice: Y = X[offset + sum i_k ss_k] (shape::slice_geometry). SliceGrad (dY, shape(X), starts,
// ends[, axes, steps]): dX = zeros, then the same copy reversed (dY into the sliced positions).
class SliceKernel final : public Kernel {
 public:
  SliceKernel(const KernelInfo& info, bool grad) : grad_(grad), at_(shape::read_slice_attrs(info, grad)) {}
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    const bool numeric = dtype_is_float(dt) || dt == DType::kInt8 || dt == DType::kInt16 || dt == DType::kInt32 ||
                         dt == DType::kInt64 || dt == DType::kUInt8 || dt == DType::kUInt16 ||
                         dt == DType::kUInt32 || dt == DType::kUInt64;
    if (grad_ && !numeric)  // the CPU kernel's NumericTypes
      throw_error<NotImplemented>(ctx.node().describe(), ": element type ", dtype_name(dt), " is not supported");
    require_sized_type(ctx, dt);
    es_ = dtype_size(dt);
    Shape xs = ctx.input_shape(0), ys;
    std::vector<int64_t> ss;
    if ((grad_ && !shape::read_shape_value(ctx, 1, dt, &xs)) ||
        !shape::slice_geometry(ctx, at_, grad_ ? 2 : 1, xs, &ys, &ss, &offset_))
      return ctx.set_output_dynamic(0, dt);
    if (grad_) {
      if (ys != ctx.input_shape(0))
        ctx.fail("gradient shape ", shape_to_string(ctx.input_shape(0)), " differs from the slice's shape ", shape_to_string(ys));
      init_geom(ctx, g_, ys, shape::contiguous_strides(ys), ss);
      return ctx.set_output(0, dt, xs);
    }
    init_geom(ctx, g_, ys, ss, shape::contiguous_strides(ys));
    if (offset_ == 0 && g_.identity()) ctx.set_output_alias(0, 0, ys);
    else ctx.set_output(0, dt, ys);
  }
  void run(RunContext& ctx) override {
    const CudaContext& c = CudaContext::of(ctx);
    Tensor& y = ctx.output(0);
    if (grad_) {
      if (y.nbytes() > 0) OT_CUDA(cudaMemsetAsync(y.raw_data(), 0, y.nbytes(), c.stream()));
      strided_copy(c, g_, ctx.input(0).raw_data(), bytes_of(y.raw_data(), offset_ * int64_t(es_)), es_);
      return;
    }
    if (ctx.output_aliases_input(0, 0)) return;
    strided_copy(c, g_, bytes_of(ctx.input(0).raw_data(), offset_ * int64_t(es_)), y.raw_data(), es_);
  }

 private:
  bool grad_;
  shape::SliceAttrs at_;
  StridedGeom g_;
  int64_t offset_ = 0;
  size_t es_ = 0;
};

// ---------------------------------------------------------------- Expand
// Y = X broadcast with the shape input: source strides 0 on broadcast dims.
class ExpandKernel final : public Kernel {
 public:
  explicit ExpandKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    require_sized_type(ctx, dt);
    es_ = dtype_size(dt);
    Shape out;
    if (!shape::expand_shape(ctx, &out)) {
      ctx.set_output_dynamic(0, dt);
      return;
    }
    const Shape& in = ctx.input_shape(0);
    const auto in_strides = shape::contiguous_strides(in);
    const size_t off = out.size() - in.size();
    std::vector<int64_t> ss(out.size(), 0);
    for (size_t i = 0; i < in.size(); ++i) ss[off + i] = in[i] == out[off + i] ? in_strides[i] : 0;
    init_geom(ctx, g_, out, ss, shape::contiguous_strides(out));
    if (g_.identity()) ctx.set_output_alias(0, 0, out);
    else ctx.set_output(0, dt, out);
  }
  void run(RunContext& ctx) override {
    if (ctx.output_aliases_input(0, 0)) return;
    strided_copy(CudaContext::of(ctx), g_, ctx.input(0).raw_data(), ctx.output(0).raw_data(), es_);
  }

 private:
  StridedGeom g_;
  size_t es_ = 0;
};

// ---------------------------------------------------------------- Gather
/// Indices known in host memory while preparing (constants) are checked there, with the CPU
/// kernel's message; indices only on the device are not (out of range: zeros, see gather_kernel).
void check_host_indices(const PrepareContext& ctx, size_t input, int64_t axis, int64_t n) {
  const Tensor* t = ctx.input_value(input);
  if (!t || !t->device().host_accessible() || t->raw_data() == nullptr) return;
  for (int64_t j = 0; j < t->numel(); ++j) {
    const int64_t v = t->dtype() == DType::kInt64 ? t->data<int64_t>()[j] : int64_t(t->data<int32_t>()[j]);
    const int64_t w = v < 0 ? v + n : v;
    if (w < 0 || w >= n)
      ctx.fail("index ", v, " is out of range for axis ", axis, " of size ", n, " (valid: [", -n, ", ", n - 1, "])");
  }
}

// X [outer, n, inner], indices [nidx] -> Y [outer, nidx, inner]; rows moved in the widest unit.
class GatherKernel final : public Kernel {
 public:
  explicit GatherKernel(const KernelInfo& info) : axis_(info.attr_int("axis", 0)) {}
  void prepare(PrepareContext& ctx) override {
    require_sized_type(ctx, ctx.input_dtype(0));
    shape::check_index_dtype(ctx, 1);
    g_ = shape::gather_geometry(ctx, ctx.input_shape(0), ctx.input_shape(1), axis_);
    check_host_indices(ctx, 1, g_.axis, g_.n);
    es_ = dtype_size(ctx.input_dtype(0));
    ctx.set_output(0, ctx.input_dtype(0), g_.output);
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return;
    const CudaContext& c = CudaContext::of(ctx);
    const int64_t inner_b = g_.inner * int64_t(es_);
    const int u = copy_unit({uint64_t(uintptr_t(x.raw_data())), uint64_t(uintptr_t(y.raw_data())), uint64_t(inner_b)});
    const int64_t inner = inner_b / u, nidx = ind.numel(), total = g_.outer * nidx * inner;
    by_size(size_t(u), [&]<class U>() {
      auto go = [&]<class Idx>() {
        const U* X = static_cast<const U*>(x.raw_data());
        const Idx* I = static_cast<const Idx*>(ind.raw_data());
        U* Y = static_cast<U*>(y.raw_data());
        const unsigned grid = grid_for(total, c, kThreads);
        if (total <= INT32_MAX)
          gather_kernel<U, Idx, uint32_t><<<grid, kThreads, 0, c.stream()>>>(X, I, Y, uint32_t(total), uint32_t(nidx),
                                                                            uint32_t(inner), g_.n);
        else
          gather_kernel<U, Idx, int64_t><<<grid, kThreads, 0, c.stream()>>>(X, I, Y, total, nidx, inner, g_.n);
        check_launch("gather_kernel");
      };
      if (ind.dtype() == DType::kInt64) go.template operator()<int64_t>();
      else go.template operator()<int32_t>();
    });
  }

 private:
  int64_t axis_;
  shape::GatherGeom g_;
  size_t es_ = 0;
};

// ---------------------------------------------------------------- GatherGrad
// (shape(X), indices, dY) -> dX = zeros; dX[o, idx[j], :] += dY[o, j, :]. atomicAdd: float32 and
// float64 only, and not under deterministic execution (the summation order varies).
class GatherGradKernel final : public Kernel {
 public:
  explicit GatherGradKernel(const KernelInfo& info) : axis_(info.attr_int("axis", 0)) {}
  void prepare(PrepareContext& ctx) override {
    shape::check_index_dtype(ctx, 1);
    const DType dt = ctx.input_dtype(2);
    if (dt != DType::kFloat32 && dt != DType::kFloat64)
      throw_error<NotImplemented>(ctx.node().describe(), ": element type ", dtype_name(dt),
                                  " is not supported by the CUDA provider (float32, float64)");
    if (ctx.options().deterministic)
      throw_error<NotImplemented>(ctx.node().describe(),
                                  ": the CUDA kernel accumulates with atomics (not deterministic)");
    Shape xs;
    if (!shape::read_shape_value(ctx, 0, dt, &xs)) return ctx.set_output_dynamic(0, dt);
    g_ = shape::gather_geometry(ctx, xs, ctx.input_shape(1), axis_);
    if (ctx.input_shape(2) != g_.output)
      ctx.fail("gradient shape ", shape_to_string(ctx.input_shape(2)), " must be ", shape_to_string(g_.output));
    check_host_indices(ctx, 1, g_.axis, g_.n);
    ctx.set_output(0, dt, xs);
  }
  void run(RunContext& ctx) override {
    const Tensor& ind = ctx.input(1);
    const Tensor& g = ctx.input(2);
    Tensor& y = ctx.output(0);
    const CudaContext& c = CudaContext::of(ctx);
    if (y.nbytes() == 0) return;
    OT_CUDA(cudaMemsetAsync(y.raw_data(), 0, y.nbytes(), c.stream()));
    const int64_t total = g.numel();
    if (total == 0) return;
    auto go = [&]<class T, class Idx>() {
      gather_grad_kernel<T, Idx><<<grid_for(total, c, kThreads), kThreads, 0, c.stream()>>>(
          static_cast<const T*>(g.raw_data()), static_cast<const Idx*>(ind.raw_data()), static_cast<T*>(y.raw_data()),
          total, ind.numel(), g_.inner, g_.n);
      check_launch("gather_grad_kernel");
    };
    const bool i64 = ind.dtype() == DType::kInt64;
    if (g.dtype() == DType::kFloat32) {
      if (i64) go.template operator()<float, int64_t>();
      else go.template operator()<float, int32_t>();
    } else {
      if (i64) go.template operator()<double, int64_t>();
      else go.template operator()<double, int32_t>();
    }
  }

 private:
  int64_t axis_;
  shape::GatherGeom g_;
};

template <class K, class... A>
KernelFactory make(A... a) {
  return [=](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<K>(i, a...); };
}

}  // namespace

void register_movement(KernelRegistry& r) {
  // The CPU kernels' (domain, op, opset ranges); inputs read on the host listed last.
  shape::register_views<DeviceViews>(r);  // Reshape, Flatten, Squeeze, Unsqueeze
  r.add("", "Identity", 1, kMaxOpsetAll, make<IdentityKernel>());
  r.add("", "Expand", 8, kMaxOpsetAll, make<ExpandKernel>(), {1});
  r.add("", "Transpose", 1, kMaxOpsetAll, make<TransposeKernel>());
  r.add("", "Concat", 1, 3, make<ConcatKernel>());
  r.add("", "Concat", 4, kMaxOpsetAll, make<ConcatKernel>());
  r.add("", "Split", 1, 1, make<SplitKernel>(), {1});   // split attribute or input
  r.add("", "Split", 2, 12, make<SplitKernel>());       // split attribute
  r.add("", "Split", 13, 17, make<SplitKernel>(), {1});  // split input
  r.add("", "Split", 18, kMaxOpsetAll, make<SplitKernel>(), {1});  // num_outputs
  r.add("", "Slice", 1, 9, make<SliceKernel>(false));               // attributes
  r.add("", "Slice", 10, kMaxOpsetAll, make<SliceKernel>(false), {1, 2, 3, 4});
  r.add(ops::kDomain, "SliceGrad", 1, kMaxOpsetAll, make<SliceKernel>(true), {1, 2, 3, 4, 5});
  r.add("", "Gather", 1, kMaxOpsetAll, make<GatherKernel>());
  r.add(ops::kDomain, "GatherGrad", 1, kMaxOpsetAll, make<GatherGradKernel>(), {0});
}

}  // namespace onnxtrain::kernels::cuda
