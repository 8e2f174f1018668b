// Helpers shared by the elementwise kernel tests (test_elementwise*.cpp): random broadcastable
// shapes, naive broadcasting references, dtype lists and error expectations.
#pragma once

#include <cmath>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "onnxtrain/error.h"
#include "test_util.h"

namespace ew_test {

using namespace ot_test;
using onnxtrain::dtype_name;
using onnxtrain::shape_to_string;

inline const std::vector<DType> kFloatTypes = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};
inline const std::vector<DType> kIntTypes = {DType::kInt8,  DType::kInt16,  DType::kInt32,  DType::kInt64,
                                             DType::kUInt8, DType::kUInt16, DType::kUInt32, DType::kUInt64};

inline bool is_unsigned(DType t) {
  return t == DType::kUInt8 || t == DType::kUInt16 || t == DType::kUInt32 || t == DType::kUInt64;
}

/// v wrapped into an integer dtype's range (two's complement; exact for |v| < 2^53 except that
/// uint64 results near 2^64 round like the kernel's output does through to_double), or v itself.
inline double wrap_to(DType t, double v) {
  if (!onnxtrain::dtype_is_integer(t) || t == DType::kInt64) return v;
  const double m = std::ldexp(1.0, int(onnxtrain::dtype_size(t) * 8));
  double r = std::fmod(v, m);
  if (r < 0) r += m;
  if (!is_unsigned(t) && r >= m / 2) r -= m;
  return r;
}

/// Relative tolerance for results stored in `t` (reduced-precision floats round their output).
inline double rtol_for(DType t) {
  switch (t) {
    case DType::kFloat16: return 2e-3;
    case DType::kBFloat16: return 1.6e-2;
    case DType::kFloat32: return 2e-6;
    case DType::kFloat64: return 1e-12;
    default: return 0;
  }
}
inline double atol_for(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16 ? 1e-3 : rtol_for(t) * 1e-2; }

/// Numpy broadcast of two shapes (naive, independent of the kernels' BroadcastPlan).
inline bool broadcast_ref(const std::vector<Shape>& shapes, Shape* out) {
  size_t r = 0;
  for (const auto& s : shapes) r = std::max(r, s.size());
  out->assign(r, 1);
  for (const auto& s : shapes)
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = (*out)[r - s.size() + i];
      if (s[i] == o || s[i] == 1) continue;
      if (o != 1) return false;
      o = s[i];
    }
  return true;
}

/// Random shapes of rank <= 4 (dims 1..5) that broadcast together: `count` of them.
inline std::vector<Shape> random_broadcast_shapes(std::mt19937& rng, size_t count = 2) {
  std::uniform_int_distribution<int> rank_d(0, 4), dim_d(1, 5), coin(0, 3);
  const int r = rank_d(rng);
  Shape out(static_cast<size_t>(r));
  for (auto& d : out) d = dim_d(rng);
  std::vector<Shape> shapes;
  for (size_t k = 0; k < count; ++k) {
    Shape s = out;
    for (auto& d : s)
      if (coin(rng) == 0) d = 1;
    const size_t drop = size_t(std::uniform_int_distribution<int>(0, r)(rng));
    shapes.emplace_back(s.begin() + long(drop), s.end());
  }
  return shapes;
}

/// expected[i] = f(x0[b(i)], x1[b(i)], ...) over the broadcast of the inputs' shapes.
inline std::vector<double> broadcast_reference(const std::vector<Tensor>& xs,
                                               const std::function<double(const std::vector<double>&)>& f,
                                               Shape* out_shape) {
  std::vector<Shape> shapes;
  std::vector<std::vector<double>> vals;
  for (const auto& x : xs) {
    shapes.push_back(x.shape());
    vals.push_back(to_double(x));
  }
  EXPECT_TRUE(broadcast_ref(shapes, out_shape));
  std::vector<double> expect(size_t(onnxtrain::shape_numel(*out_shape)));
  std::vector<double> args(xs.size());
  for (size_t i = 0; i < expect.size(); ++i) {
    auto idx = unravel(int64_t(i), *out_shape);
    for (size_t k = 0; k < xs.size(); ++k) args[k] = vals[k][size_t(broadcast_index(idx, shapes[k]))];
    expect[i] = f(args);
  }
  return expect;
}

/// Runs fn, expects an E whose message names the node (`node_<op>`) and contains every `parts`.
template <class E, class Fn>
void expect_error(Fn&& fn, const std::string& op, std::initializer_list<const char*> parts) {
  try {
    fn();
    ADD_FAILURE() << op << ": expected an error";
  } catch (const E& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("node_" + op), std::string::npos) << w;
    for (const char* p : parts) EXPECT_NE(w.find(p), std::string::npos) << "missing '" << p << "' in: " << w;
  } catch (const std::exception& e) {
    ADD_FAILURE() << op << ": wrong exception type: " << e.what();
  }
}

/// Options for one of the two feeding modes (graph inputs or initializers) and a thread count.
inline RunOptions opts(bool constants, int threads = 1, int64_t opset = 17) {
  RunOptions o;
  o.inputs_as_constants = constants;
  o.threads = threads;
  o.opset = opset;
  return o;
}

}  // namespace ew_test
