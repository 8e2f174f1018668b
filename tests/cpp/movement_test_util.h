// Helpers shared by test_shape.cpp and test_movement.cpp.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "test_util.h"

namespace ot_test {

inline Tensor i64(const std::vector<int64_t>& v) { return Tensor::from_vector<int64_t>({int64_t(v.size())}, v); }

inline Shape random_shape(std::mt19937& rng, int min_rank, int max_rank, int lo = 1, int hi = 5) {
  std::uniform_int_distribution<int> rd(min_rank, max_rank), dd(lo, hi);
  Shape s(size_t(rd(rng)));
  for (auto& d : s) d = dd(rng);
  return s;
}

inline std::string seed_msg(uint32_t seed, int trial) {
  return "seed " + std::to_string(seed) + " trial " + std::to_string(trial);
}

/// Runs op once with inputs fed as graph inputs (shape inputs known only at run time: the
/// re-prepare path) and once as initializers (constant folding); output k must have shapes[k]
/// and expect[k], and element type `dt` (undefined: input 0's).
inline void check_both(const std::string& op, const std::vector<Tensor>& in, const std::vector<ir::Attribute>& attrs,
                       const std::vector<Shape>& shapes, const std::vector<std::vector<double>>& expect, const std::string& what,
                       int64_t opset = 17, int threads = 1, DType dt = DType::kUndefined, double rtol = 0) {
  for (bool constants : {false, true}) {
    RunOptions o;
    o.inputs_as_constants = constants;
    o.opset = opset;
    o.threads = threads;
    o.num_outputs = shapes.size();
    auto y = run_node(op, in, attrs, o);
    ASSERT_EQ(y.size(), shapes.size()) << what;
    for (size_t k = 0; k < shapes.size(); ++k) {
      EXPECT_EQ(y[k].dtype(), dt == DType::kUndefined ? in[0].dtype() : dt) << what;
      EXPECT_TRUE(all_close(y[k], shapes[k], expect[k], rtol, 0)) << what << " output " << k << " constants " << constants;
    }
  }
}

/// f() must throw E whose message names `node` and contains `text`.
template <class E>
void expect_error(const std::function<void()>& f, const std::string& node, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing '" << text << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(node), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

/// A string tensor's shape and elements.
inline void expect_strings(const Tensor& y, const Shape& shape, const std::vector<std::string>& want) {
  ASSERT_EQ(y.dtype(), DType::kString);
  ASSERT_EQ(y.shape(), shape);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(y.data<std::string>()[i], want[i]) << "element " << i;
}

}  // namespace ot_test
