// The DLPack ABI (the pre-1.0 "dltensor" capsule protocol that numpy 1.22+ and PyTorch 1.10+
// exchange), declared from the public specification: the layouts below must match it byte for
// byte. Only what bind_ortvalue.cpp needs.
#pragma once

#include <cstdint>

namespace onnxtrain::python::dlpack {

/// DLDeviceType: where the memory lives.
enum DeviceType : int32_t {
  kCPU = 1,
  kCUDA = 2,
  kCUDAHost = 3,
  kOpenCL = 4,
  kVulkan = 7,
  kMetal = 8,
  kVPI = 9,
  kROCM = 10,
  kROCMHost = 11,
  kExtDev = 12,
  kCUDAManaged = 13,
  kOneAPI = 14,
};

/// DLDataTypeCode.
enum TypeCode : uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kOpaqueHandle = 3, kBfloat = 4, kComplex = 5, kBool = 6 };

struct DLDevice {
  int32_t device_type;  ///< a DeviceType
  int32_t device_id;
};

struct DLDataType {
  uint8_t code;  ///< a TypeCode
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  ///< in elements; null means compact row-major
  uint64_t byte_offset;
};

/// The producer's tensor plus the function that releases it; the consumer calls `deleter` once.
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

/// Capsule names: a fresh capsule, and one whose tensor a consumer has taken over.
inline constexpr const char* kCapsuleName = "dltensor";
inline constexpr const char* kUsedCapsuleName = "used_dltensor";

}  // namespace onnxtrain::python::dlpack
