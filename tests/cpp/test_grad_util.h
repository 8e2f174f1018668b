// Helpers shared by the gradient-rule tests (test_grad_*.cpp), defined in test_grad_reduce.cpp.
#pragma once

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"

namespace ot_test {

/// Gradient of loss = sum(y0 * r) w.r.t. inputs `wrt` of one `op` node at `opset`. Inputs in `wrt`
/// and `fed` are graph inputs (fed at run time), the others initializers; an undefined Tensor
/// omits an optional input. The node names its first `num_outputs` outputs (the gradient may
/// name more). Runs the serialized gradient model (ExecOptions::training = `training`) and returns
/// y0..y{num_outputs-1} followed by the gradients.
std::vector<Tensor> run_gradient(const std::string& op, const std::vector<Tensor>& inputs,
                                 const std::vector<ir::Attribute>& attrs, int64_t opset, size_t num_outputs,
                                 const Tensor& r, const std::vector<size_t>& wrt, bool portable = false,
                                 bool training = false, const std::vector<size_t>& fed = {});

/// Values spaced apart in random order within [lo, hi): no ties.
Tensor distinct_tensor(DType dt, const Shape& s, std::mt19937& rng, double lo, double hi);

/// Error kind and message of what f throws ("" when it does not throw); test_reduce.cpp.
std::string thrown_by(const std::function<void()>& f);

}  // namespace ot_test
