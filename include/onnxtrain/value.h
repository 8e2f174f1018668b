// Value: what flows along a graph edge — a tensor, a sequence of tensors, a map, a sequence of
// maps, or nothing.
#pragma once

#include <vector>

#include "onnxtrain/tensor.h"

namespace onnxtrain {

/// One ONNX map(K, V): `keys` (int64 or string) sorted ascending and unique, as onnxruntime's
/// std::map holds them, and `values[i]` the value of `keys[i]`; both 1-D of one length.
struct MapData {
  Tensor keys;
  Tensor values;
};

/// A tensor, a sequence of tensors, a map, a sequence of maps, or nothing (an absent optional
/// input or an empty optional).
struct Value {
  enum class Kind : uint8_t { kNone, kTensor, kSequence, kMap, kMapSequence };
  Kind kind = Kind::kNone;
  Tensor tensor;                   ///< kTensor
  std::vector<Tensor> sequence;    ///< kSequence
  std::vector<MapData> maps;       ///< kMap: exactly one; kMapSequence: one per element
  /// Element type of sequences (also of empty ones); the value type of maps.
  DType elem = DType::kUndefined;
  DType key = DType::kUndefined;  ///< key type of maps (kInt64 or kString)
  bool optional = false;           ///< declared as optional(...) (informational)

  static Value of(Tensor t) {
    Value v;
    v.kind = Kind::kTensor;
    v.tensor = std::move(t);
    return v;
  }
  bool is_tensor() const { return kind == Kind::kTensor; }
  bool is_map() const { return kind == Kind::kMap || kind == Kind::kMapSequence; }
};

/// A map from unsorted (key, value) columns (1-D, one length; keys int64 or string): sorted by
/// key, a repeated key keeping its last value (as assigning into onnxruntime's std::map does).
MapData make_map(const Tensor& keys, const Tensor& values);

/// onnxruntime's type string of a map: "map(string,tensor(float))".
std::string map_type_string(DType key, DType value);

}  // namespace onnxtrain
