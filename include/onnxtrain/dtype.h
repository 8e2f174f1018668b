// Element types. Values match onnx.TensorProto.DataType so they convert by cast.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace onnxtrain {

/// Tensor element type; numeric values equal ONNX's TensorProto.DataType.
enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kComplex64 = 14,
  kComplex128 = 15,
  kBFloat16 = 16,
};

/// IEEE 754 binary16, stored as bits. Conversions round to nearest even.
struct float16 {
  uint16_t bits = 0;
  float16() = default;
  explicit float16(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }
  static uint16_t from_float(float f);
  static float to_float(uint16_t h);
};

/// bfloat16 (the upper half of a float32), stored as bits. Conversion rounds to nearest even.
struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  explicit bfloat16(float f) : bits(from_float(f)) {}
  operator float() const {
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
  }
};

/// Size in bytes of one element (strings report sizeof(std::string)); 0 for kUndefined.
size_t dtype_size(DType t);
/// ONNX spelling: "float", "int64", "bfloat16", ...
const char* dtype_name(DType t);
/// onnxruntime's type string for a tensor of this type: "tensor(float)".
std::string dtype_tensor_string(DType t);
/// True for dtypes onnxtrain can hold in a Tensor.
bool dtype_supported(DType t);
bool dtype_is_float(DType t);    ///< float16, bfloat16, float32, float64
bool dtype_is_integer(DType t);  ///< signed and unsigned integers (not bool)
bool dtype_is_signed(DType t);

template <class T>
struct dtype_of;
#define OT_DTYPE_OF(T, D) \
  template <>             \
  struct dtype_of<T> {    \
    static constexpr DType value = DType::D; \
  };
OT_DTYPE_OF(float, kFloat32)
OT_DTYPE_OF(double, kFloat64)
OT_DTYPE_OF(float16, kFloat16)
OT_DTYPE_OF(bfloat16, kBFloat16)
OT_DTYPE_OF(int8_t, kInt8)
OT_DTYPE_OF(int16_t, kInt16)
OT_DTYPE_OF(int32_t, kInt32)
OT_DTYPE_OF(int64_t, kInt64)
OT_DTYPE_OF(uint8_t, kUInt8)
OT_DTYPE_OF(uint16_t, kUInt16)
OT_DTYPE_OF(uint32_t, kUInt32)
OT_DTYPE_OF(uint64_t, kUInt64)
OT_DTYPE_OF(bool, kBool)
OT_DTYPE_OF(std::string, kString)
#undef OT_DTYPE_OF

template <class T>
inline constexpr DType dtype_v = dtype_of<T>::value;

}  // namespace onnxtrain
