// Elementwise kernels against naive double-precision references on random shapes.
#include <cmath>

#include "test_util.h"

using namespace ot_test;

namespace onnxtrain {
bool kernels_test_broadcast(const Shape& a, const Shape& b, Shape* out);
}

namespace {

// Random broadcastable shape pair from a fixed seed.
std::pair<Shape, Shape> random_broadcast_shapes(std::mt19937& rng) {
  std::uniform_int_distribution<int> rank_d(0, 4), dim_d(1, 5), coin(0, 3);
  const int r = rank_d(rng);
  Shape out(static_cast<size_t>(r));
  for (auto& d : out) d = dim_d(rng);
  auto derive = [&]() {
    Shape s = out;
    for (auto& d : s)
      if (coin(rng) == 0) d = 1;
    const size_t drop = size_t(std::uniform_int_distribution<int>(0, r)(rng));
    return Shape(s.begin() + long(drop), s.end());
  };
  return {derive(), derive()};
}

void check_binary(const std::string& op, double (*ref)(double, double), DType dt, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    auto [sa, sb] = random_broadcast_shapes(rng);
    Tensor a = random_tensor(dt, sa, rng, -3, 3), b = random_tensor(dt, sb, rng, -3, 3);
    Shape so;
    ASSERT_TRUE(onnxtrain::kernels_test_broadcast(sa, sb, &so));
    auto av = to_double(a), bv = to_double(b);
    std::vector<double> expect(size_t(onnxtrain::shape_numel(so)));
    for (size_t i = 0; i < expect.size(); ++i) {
      auto idx = unravel(int64_t(i), so);
      expect[i] = ref(av[size_t(broadcast_index(idx, sa))], bv[size_t(broadcast_index(idx, sb))]);
    }
    for (bool constants : {false, true}) {
      RunOptions o;
      o.inputs_as_constants = constants;
      o.threads = trial % 2 ? 2 : 1;
      auto y = run_node(op, {a, b}, {}, o);
      EXPECT_TRUE(all_close(y[0], so, expect, 1e-6, 1e-6))
          << op << " " << onnxtrain::shape_to_string(sa) << " x " << onnxtrain::shape_to_string(sb)
          << " seed " << seed << " trial " << trial;
    }
  }
}

}  // namespace

namespace onnxtrain {
bool kernels_test_broadcast(const Shape& a, const Shape& b, Shape* out) {
  size_t r = std::max(a.size(), b.size());
  out->assign(r, 1);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) return false;
    (*out)[i] = da == 1 ? db : da;
  }
  return true;
}
}  // namespace onnxtrain

TEST(Elementwise, AddBroadcastFloat) { check_binary("Add", [](double a, double b) { return a + b; }, DType::kFloat32, 1); }
TEST(Elementwise, SubBroadcastDouble) { check_binary("Sub", [](double a, double b) { return a - b; }, DType::kFloat64, 2); }
TEST(Elementwise, MulBroadcastInt64) { check_binary("Mul", [](double a, double b) { return a * b; }, DType::kInt64, 3); }

TEST(Elementwise, ReluFloat) {
  std::mt19937 rng(4);
  Tensor x = random_tensor(DType::kFloat32, {3, 7}, rng);
  auto xv = to_double(x);
  std::vector<double> e;
  for (double v : xv) e.push_back(v > 0 ? v : 0);
  EXPECT_TRUE(all_close(run_node("Relu", {x})[0], {3, 7}, e, 0, 0));
}

TEST(Elementwise, BroadcastMismatchNamesNode) {
  Tensor a = Tensor::zeros(DType::kFloat32, {2, 3}), b = Tensor::zeros(DType::kFloat32, {4});
  try {
    run_node("Add", {a, b});
    FAIL() << "expected an error";
  } catch (const onnxtrain::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("node_Add"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot be broadcast"), std::string::npos) << e.what();
  }
}
