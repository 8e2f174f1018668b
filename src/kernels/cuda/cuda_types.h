// Element types of CUDA kernels: the device type of each DType, the type arithmetic runs in
// (float for float16/bfloat16), and dispatch from a tensor's DType to a templated body.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/kernel.h"

namespace onnxtrain::kernels::cuda {

template <class T>
struct Compute {
  using type = T;
};
template <>
struct Compute<__half> {
  using type = float;
};
template <>
struct Compute<__nv_bfloat16> {
  using type = float;
};
template <class T>
using compute_t = typename Compute<T>::type;

/// Converts between element types on the device (float16/bfloat16 through float).
template <class To, class From>
__host__ __device__ inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, __half> || std::is_same_v<From, __nv_bfloat16>) {
    return convert<To>(float(v));
  } else if constexpr (std::is_same_v<To, __half>) {
    return __float2half_rn(float(v));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(float(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else {
    return To(v);
  }
}

struct FloatTypes {};    ///< float32, float64, float16, bfloat16
struct NumericTypes {};  ///< FloatTypes and int32, int64

/// True when `dt` is one of the set.
template <class Set>
bool in_set(DType dt) {
  const bool f = dt == DType::kFloat32 || dt == DType::kFloat64 || dt == DType::kFloat16 || dt == DType::kBFloat16;
  if constexpr (std::is_same_v<Set, FloatTypes>) return f;
  if constexpr (std::is_same_v<Set, NumericTypes>) return f || dt == DType::kInt32 || dt == DType::kInt64;
  return false;
}

/// Calls body.template operator()<T>() with the device type of `dt`; NotImplemented for other types.
template <class F>
void dispatch_type(DType dt, const ir::Node& node, F&& body) {
  switch (dt) {
    case DType::kFloat32: return body.template operator()<float>();
    case DType::kFloat64: return body.template operator()<double>();
    case DType::kFloat16: return body.template operator()<__half>();
    case DType::kBFloat16: return body.template operator()<__nv_bfloat16>();
    case DType::kInt32: return body.template operator()<int32_t>();
    case DType::kInt64: return body.template operator()<int64_t>();
    case DType::kBool: return body.template operator()<bool>();
    case DType::kInt8: return body.template operator()<int8_t>();
    case DType::kUInt8: return body.template operator()<uint8_t>();
    default:
      throw_error<NotImplemented>(node.describe(), ": element type ", dtype_name(dt), " on the CUDA provider");
  }
}

}  // namespace onnxtrain::kernels::cuda
