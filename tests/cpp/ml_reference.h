// What the ai.onnx.ml tests share (test_ml.cpp, test_ml_tree.cpp): a strings attribute and the
// post transforms' scalar references in double.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "test_util.h"

namespace ot_test {

inline ir::Attribute attr_strings(const std::string& name, const std::vector<std::string>& v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::kStrings;
  a.strings = v;
  return a;
}

inline double ref_logistic(double v) { return 1 / (1 + std::exp(-v)); }

/// sqrt(2) erf^-1(2p - 1) by Winitzki's approximation (a = 0.147), the formula onnxruntime uses
/// for PROBIT (with its pi of 3.14159).
inline double ref_probit(double p) {
  const double x = 2 * p - 1, a = 0.147, pi = 3.14159;
  const double l = std::log(1 - x * x), t = 2 / (pi * a) + l / 2;
  return std::sqrt(2.0) * (x < 0 ? -1 : 1) * std::sqrt(std::sqrt(t * t - l / a) - t);
}

}  // namespace ot_test
