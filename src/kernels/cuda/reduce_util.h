// Helpers shared by the reduce, norm and loss CUDA families: element types and their compute
// types, host-side dtype dispatch, warp/block reductions, float loads/stores by runtime dtype.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cuda/cuda_common.h"

namespace onnxtrain::kernels::cuda::red {

// ---------------------------------------------------------------- element types
/// Compute type of an element type: float for half/bfloat16, else the type itself.
template <class T>
struct Num {
  using C = T;
  __host__ __device__ static C to(T v) { return v; }
  __host__ __device__ static T from(C v) { return v; }
};
template <>
struct Num<__half> {
  using C = float;
  __device__ static C to(__half v) { return __half2float(v); }
  __device__ static __half from(C v) { return __float2half_rn(v); }
};
template <>
struct Num<__nv_bfloat16> {
  using C = float;
  __device__ static C to(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 from(C v) { return __float2bfloat16_rn(v); }
};
template <class T>
using ct = typename Num<T>::C;

template <class T>
__device__ inline ct<T> ld(const T* p, int64_t i) {
  return Num<T>::to(p[i]);
}
template <class T>
__device__ inline T st(ct<T> v) {
  return Num<T>::from(v);
}

/// Loads element i of a float tensor of runtime dtype `dt` (float, double, half, bfloat16) as double.
__device__ inline double load_any(const void* p, DType dt, int64_t i) {
  switch (dt) {
    case DType::kFloat64: return static_cast<const double*>(p)[i];
    case DType::kFloat16: return double(__half2float(static_cast<const __half*>(p)[i]));
    case DType::kBFloat16: return double(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]));
    default: return double(static_cast<const float*>(p)[i]);
  }
}
/// Stores v (through float for the 16-bit types, as the CPU kernels do) at element i.
__device__ inline void store_any(void* p, DType dt, int64_t i, double v) {
  switch (dt) {
    case DType::kFloat64: static_cast<double*>(p)[i] = v; break;
    case DType::kFloat16: static_cast<__half*>(p)[i] = __float2half_rn(float(v)); break;
    case DType::kBFloat16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(float(v)); break;
    default: static_cast<float*>(p)[i] = float(v); break;
  }
}

__device__ inline float dexp(float v) { return expf(v); }
__device__ inline double dexp(double v) { return exp(v); }
__device__ inline float dlog(float v) { return logf(v); }
__device__ inline double dlog(double v) { return log(v); }

// ---------------------------------------------------------------- host dispatch
/// Calls f.template operator()<T>() for the device type of `dt`: float, double, __half,
/// __nv_bfloat16, and (Ints) int32_t, int64_t. False when `dt` is none of them.
template <bool Ints, class F>
bool dispatch(DType dt, F&& f) {
  switch (dt) {
    case DType::kFloat32: f.template operator()<float>(); return true;
    case DType::kFloat64: f.template operator()<double>(); return true;
    case DType::kFloat16: f.template operator()<__half>(); return true;
    case DType::kBFloat16: f.template operator()<__nv_bfloat16>(); return true;
    case DType::kInt32:
      if constexpr (Ints) {
        f.template operator()<int32_t>();
        return true;
      }
      return false;
    case DType::kInt64:
      if constexpr (Ints) {
        f.template operator()<int64_t>();
        return true;
      }
      return false;
    default: return false;
  }
}
inline bool is_float(DType dt) {
  return dt == DType::kFloat32 || dt == DType::kFloat64 || dt == DType::kFloat16 || dt == DType::kBFloat16;
}
/// NotImplemented naming the node (the planner then runs it on the CPU provider).
template <class Ctx>
[[noreturn]] void decline(const Ctx& ctx, const char* why) {
  throw_error<NotImplemented>(ctx.node().describe(), ": ", why, " (CUDA)");
}
/// Declines element types other than the float ones (and, ints, int32/int64).
template <class Ctx>
void require_dtype(const Ctx& ctx, DType dt, bool ints) {
  if (!(is_float(dt) || (ints && (dt == DType::kInt32 || dt == DType::kInt64))))
    throw_error<NotImplemented>(ctx.node().describe(), ": element type ", dtype_name(dt), " is not supported (CUDA)");
}

inline size_t align_up(size_t b) { return (b + 255) / 256 * 256; }

// ---------------------------------------------------------------- group reductions
struct SumOp {
  template <class V>
  __device__ V operator()(V a, V b) const {
    return a + b;
  }
};
struct MaxNanOp {  // NaN propagates
  template <class V>
  __device__ V operator()(V a, V b) const {
    return (b > a || b != b) ? b : a;
  }
};

template <class V>
__device__ inline V shfl_xor(V v, int m) {
  return __shfl_xor_sync(0xffffffffu, v, m);
}

/// f(j) for every element j = (n * C + c) * S + s of channel c of a [N, C, S] tensor, this thread's
/// share of its block (a fixed order): per-channel reductions, one block per channel.
template <class F>
__device__ inline void for_channel(int64_t N, int64_t C, int64_t S, int64_t c, F&& f) {
  for (int64_t i = threadIdx.x; i < N * S; i += blockDim.x) {
    const int64_t n = i / S, s = i - n * S;
    f((n * C + c) * S + s);
  }
}

/// Reduction over a group of G threads (G = 32: a warp; G > 32: the whole block of G threads,
/// a multiple of 32). Every thread of the group gets the result; the order is fixed.
template <int G, class V, class Op>
__device__ inline V group_reduce(V v, Op op) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v = op(v, shfl_xor(v, m));
  if constexpr (G > 32) {
    __shared__ V sm[G / 32];
    __syncthreads();  // earlier readers of sm are done
    if ((threadIdx.x & 31) == 0) sm[threadIdx.x >> 5] = v;
    __syncthreads();
    v = sm[0];
#pragma unroll
    for (int w = 1; w < G / 32; ++w) v = op(v, sm[w]);
  }
  return v;
}

}  // namespace onnxtrain::kernels::cuda::red
