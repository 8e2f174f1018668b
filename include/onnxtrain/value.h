// Value: what flows along a graph edge — a tensor, a sequence of tensors, or nothing.
#pragma once

#include <vector>

#include "onnxtrain/tensor.h"

namespace onnxtrain {

/// A tensor, a sequence of tensors, or nothing (an absent optional input or an empty optional).
struct Value {
  enum class Kind : uint8_t { kNone, kTensor, kSequence };
  Kind kind = Kind::kNone;
  Tensor tensor;                   ///< kTensor
  std::vector<Tensor> sequence;    ///< kSequence
  DType elem = DType::kUndefined;  ///< element type of sequences (also of empty ones)
  bool optional = false;           ///< declared as optional(...) (informational)

  static Value of(Tensor t) {
    Value v;
    v.kind = Kind::kTensor;
    v.tensor = std::move(t);
    return v;
  }
  bool is_tensor() const { return kind == Kind::kTensor; }
};

}  // namespace onnxtrain
