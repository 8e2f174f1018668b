// Appends nodes to a graph with fresh value names: the small builder used by graph
// transformations (loss builder, training graph).
#pragma once

#include <string>
#include <unordered_set>
#include <vector>

#include "ir/ir.h"

namespace onnxtrain::ir {

class GraphWriter {
 public:
  GraphWriter(Model& m, Graph& g);
  /// A name not used anywhere in the model (based on `base`).
  std::string fresh(const std::string& base);
  /// Appends a node; returns its first output (or every output with add_n).
  std::string add(const std::string& op, std::vector<std::string> inputs, std::vector<Attribute> attrs = {},
                  const std::string& hint = "");
  std::vector<std::string> add_n(const std::string& op, std::vector<std::string> inputs, size_t n,
                                 std::vector<Attribute> attrs = {}, const std::string& hint = "");
  /// Initializer holding `t`.
  std::string constant(const Tensor& t, const std::string& hint = "const");
  std::string scalar(DType dt, double v, const std::string& hint = "const");
  std::string ints(const std::vector<int64_t>& v);
  /// ReduceSum / ReduceMean over all axes (keepdims 0), opset-aware.
  std::string reduce_all(const std::string& op, const std::string& v);
  /// ReduceSum over `axes` (keepdims), opset-aware.
  std::string reduce_sum(const std::string& v, const std::vector<int64_t>& axes, bool keepdims);
  int64_t opset() const { return opset_; }

  static Attribute int_attr(const std::string& name, int64_t v);
  static Attribute float_attr(const std::string& name, float v);
  static Attribute ints_attr(const std::string& name, std::vector<int64_t> v);
  static Attribute string_attr(const std::string& name, const std::string& v);

 private:
  Model& m_;
  Graph& g_;
  int64_t opset_;
  std::unordered_set<std::string> names_;
  uint64_t counter_ = 0;
};

}  // namespace onnxtrain::ir
