#include "onnxtrain/dtype.h"

#include <string>

namespace onnxtrain {

uint16_t float16::from_float(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or NaN
    return uint16_t(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u | ((absx >> 13) & 0x3ffu) : 0u));
  }
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: overflow to inf
  if (absx < 0x38800000u) {  // subnormal half (or zero)
    if (absx < 0x33000000u) return uint16_t(sign);  // below half the smallest subnormal
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24 (so value = m >> (shift) in half-subnormal units)
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = ((absx >> 13) - (112u << 10));  // rebias exponent 127 -> 15
  const uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return uint16_t(sign | r);
}

float float16::to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  uint32_t x;
  if (e == 0) {
    if (m == 0) {
      x = sign;
    } else {  // subnormal: normalize
      e = 1;
      while (!(m & 0x400u)) {
        m <<= 1;
        --e;
      }
      m &= 0x3ffu;
      x = sign | ((e + 112u) << 23) | (m << 13);
    }
  } else if (e == 31) {
    x = sign | 0x7f800000u | (m << 13);
  } else {
    x = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kUInt8: return 1;
    case DType::kInt8: return 1;
    case DType::kUInt16: return 2;
    case DType::kInt16: return 2;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kString: return sizeof(std::string);
    case DType::kBool: return 1;
    case DType::kFloat16: return 2;
    case DType::kFloat64: return 8;
    case DType::kUInt32: return 4;
    case DType::kUInt64: return 8;
    case DType::kComplex64: return 8;
    case DType::kComplex128: return 16;
    case DType::kBFloat16: return 2;
    default: return 0;
  }
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float";
    case DType::kUInt8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kUInt16: return "uint16";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kString: return "string";
    case DType::kBool: return "bool";
    case DType::kFloat16: return "float16";
    case DType::kFloat64: return "double";
    case DType::kUInt32: return "uint32";
    case DType::kUInt64: return "uint64";
    case DType::kComplex64: return "complex64";
    case DType::kComplex128: return "complex128";
    case DType::kBFloat16: return "bfloat16";
    case DType::kUndefined: return "undefined";
  }
  return "unknown";
}

std::string dtype_tensor_string(DType t) { return std::string("tensor(") + dtype_name(t) + ")"; }

bool dtype_supported(DType t) {
  switch (t) {
    case DType::kUndefined:
    case DType::kComplex64:
    case DType::kComplex128: return false;
    default: return dtype_size(t) != 0;
  }
}

bool dtype_is_float(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 || t == DType::kBFloat16;
}

bool dtype_is_integer(DType t) {
  switch (t) {
    case DType::kInt8: case DType::kInt16: case DType::kInt32: case DType::kInt64:
    case DType::kUInt8: case DType::kUInt16: case DType::kUInt32: case DType::kUInt64: return true;
    default: return false;
  }
}

bool dtype_is_signed(DType t) {
  switch (t) {
    case DType::kInt8: case DType::kInt16: case DType::kInt32: case DType::kInt64:
    case DType::kFloat32: case DType::kFloat64: case DType::kFloat16: case DType::kBFloat16: return true;
    default: return false;
  }
}

}  // namespace onnxtrain
