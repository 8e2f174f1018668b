// Shape kernels (Reshape Flatten Squeeze Unsqueeze Shape Size ConstantOfShape Constant Range
// Expand) against naive references; constant-folded and run-time (re-prepare) paths; errors.
#include <climits>
#include <functional>

#include "movement_test_util.h"
#include "runtime/executor.h"

using namespace ot_test;
using onnxtrain::shape_numel;
using onnxtrain::shape_to_string;

namespace {

// One output of type dt (see check_both).
void check_one(const std::string& op, const std::vector<Tensor>& in, const std::vector<ir::Attribute>& attrs, const Shape& shape,
               const std::vector<double>& expect, DType dt, const std::string& what, int64_t opset = 17) {
  check_both(op, in, attrs, {shape}, {expect}, what, opset, 1, dt, 1e-6);
}

}  // namespace

// Views keep the elements in order: only the shape changes.
TEST(Shape, ReshapeVariants) {
  std::mt19937 rng(101);
  Tensor x = random_tensor(DType::kFloat32, {2, 3, 4}, rng);
  auto xv = to_double(x);
  check_one("Reshape", {x, i64({4, -1})}, {}, {4, 6}, xv, DType::kFloat32, "-1");
  check_one("Reshape", {x, i64({0, 0, 2, 2})}, {}, {2, 3, 2, 2}, xv, DType::kFloat32, "zeros copy");
  check_one("Reshape", {x}, {attr_ints("shape", {24})}, {24}, xv, DType::kFloat32, "opset 1 attribute", 4);
  Tensor e = Tensor::zeros(DType::kFloat32, {0, 3});
  check_one("Reshape", {e, i64({3, 0})}, {attr_int("allowzero", 1)}, {3, 0}, {}, DType::kFloat32, "allowzero", 14);
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("Reshape", {x, i64({5, -1})}); }, "node_Reshape", "cannot reshape");
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("Reshape", {x, i64({-1, -1})}); }, "node_Reshape", "more than one -1");
}

TEST(Shape, FlattenAllAxes) {
  const uint32_t seed = 102;
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 12; ++trial) {
    const Shape s = random_shape(rng, 0, 4, 0, 4);
    const int64_t r = int64_t(s.size());
    for (int64_t axis = -r; axis <= r; ++axis) {
      Tensor x = random_tensor(DType::kInt32, s, rng, -9, 9);
      const int64_t a = axis < 0 ? axis + r : axis;
      int64_t outer = 1, inner = 1;
      for (int64_t i = 0; i < r; ++i) (i < a ? outer : inner) *= s[size_t(i)];
      check_one("Flatten", {x}, {attr_int("axis", axis)}, {outer, inner}, to_double(x), DType::kInt32,
                 "seed " + std::to_string(seed) + " " + shape_to_string(s) + " axis " + std::to_string(axis), 13);
    }
  }
  Tensor x = Tensor::zeros(DType::kFloat32, {2, 3});
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("Flatten", {x}, {attr_int("axis", 3)}); }, "node_Flatten", "out of range");
  RunOptions o9;
  o9.opset = 9;
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("Flatten", {x}, {attr_int("axis", -1)}, o9); }, "node_Flatten",
                                          "out of range");
}

TEST(Shape, SqueezeUnsqueeze) {
  const uint32_t seed = 103;
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 30; ++trial) {
    Shape s = random_shape(rng, 0, 5, 1, 3);
    Tensor x = random_tensor(DType::kFloat16, s, rng);
    auto xv = to_double(x);
    const int64_t r = int64_t(s.size());
    const std::string what = "seed " + std::to_string(seed) + " trial " + std::to_string(trial) + " " + shape_to_string(s);
    // Squeeze: a random subset of the size-1 axes (negative half the time); none = all of them.
    std::vector<int64_t> axes;
    Shape sq, all;
    for (int64_t i = 0; i < r; ++i) {
      const bool one = s[size_t(i)] == 1;
      if (!one) all.push_back(s[size_t(i)]);
      if (one && rng() % 2) axes.push_back(rng() % 2 ? i : i - r);
      else sq.push_back(s[size_t(i)]);
    }
    check_one("Squeeze", {x, i64(axes)}, {}, sq, xv, DType::kFloat16, what + " squeeze " + shape_to_string(axes), 13);
    check_one("Squeeze", {x}, {attr_ints("axes", axes)}, sq, xv, DType::kFloat16, what + " squeeze attr", 11);
    check_one("Squeeze", {x}, {}, all, xv, DType::kFloat16, what + " squeeze all", 13);
    // Unsqueeze: insert k ones at random output positions (unsorted, some negative).
    const int64_t k = int64_t(rng() % 3) + 1, out_r = r + k;
    std::vector<int64_t> pos(static_cast<size_t>(out_r));
    for (int64_t i = 0; i < out_r; ++i) pos[size_t(i)] = i;
    std::shuffle(pos.begin(), pos.end(), rng);
    pos.resize(size_t(k));
    Shape us;
    for (int64_t i = 0, j = 0; i < out_r; ++i)
      us.push_back(std::find(pos.begin(), pos.end(), i) != pos.end() ? 1 : s[size_t(j++)]);
    for (auto& p : pos)
      if (rng() % 2) p -= out_r;
    check_one("Unsqueeze", {x, i64(pos)}, {}, us, xv, DType::kFloat16, what + " unsqueeze " + shape_to_string(pos), 13);
    check_one("Unsqueeze", {x}, {attr_ints("axes", pos)}, us, xv, DType::kFloat16, what + " unsqueeze attr", 11);
  }
  Tensor x = Tensor::zeros(DType::kFloat32, {1, 3});
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("Squeeze", {x, i64({1})}); }, "node_Squeeze", "cannot squeeze");
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("Squeeze", {x, i64({2})}); }, "node_Squeeze", "out of range");
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("Unsqueeze", {x, i64({0, -4})}); }, "node_Unsqueeze", "repeated");
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("Unsqueeze", {x, i64({3})}); }, "node_Unsqueeze", "out of range");
}

TEST(Shape, ShapeAndSize) {
  Tensor x = Tensor::zeros(DType::kUInt8, {2, 3, 5, 7});
  auto dims = [](std::vector<double> v) { return v; };
  check_one("Shape", {x}, {}, {4}, dims({2, 3, 5, 7}), DType::kInt64, "all");
  struct Case {
    int64_t start, end;
    std::vector<double> want;
  };
  const Case cases[] = {{1, INT64_MAX, {3, 5, 7}}, {0, -1, {2, 3, 5}}, {-10, 2, {2, 3}},
                        {-1, 10, {7}},             {3, 1, {}},         {1, -1, {3, 5}}};
  for (const Case& c : cases)
    check_one("Shape", {x}, {attr_int("start", c.start), attr_int("end", c.end)}, {int64_t(c.want.size())}, c.want, DType::kInt64,
               "start " + std::to_string(c.start) + " end " + std::to_string(c.end), 15);
  check_one("Shape", {Tensor::scalar<float>(1)}, {}, {0}, {}, DType::kInt64, "scalar");
  check_one("Size", {x}, {}, {}, {210}, DType::kInt64, "size");
  check_one("Size", {Tensor::from_vector<std::string>({2}, {"a", "b"})}, {}, {}, {2}, DType::kInt64, "size of strings");
}

TEST(Shape, ConstantOfShape) {
  check_one("ConstantOfShape", {i64({2, 3})}, {}, {2, 3}, std::vector<double>(6, 0.0), DType::kFloat32, "default");
  for (DType dt : {DType::kInt32, DType::kFloat16, DType::kBool, DType::kFloat64, DType::kUInt64, DType::kBFloat16}) {
    Tensor v = from_double(dt, {1}, {1});
    check_one("ConstantOfShape", {i64({3, 1, 2})}, {attr_tensor("value", v)}, {3, 1, 2}, std::vector<double>(6, 1.0), dt,
               "value of type " + std::to_string(int(dt)));
  }
  check_one("ConstantOfShape", {i64({})}, {attr_tensor("value", from_double(DType::kInt64, {1}, {5}))}, {}, {5}, DType::kInt64,
             "empty shape gives a scalar");
  check_one("ConstantOfShape", {i64({4, 0})}, {}, {4, 0}, {}, DType::kFloat32, "zero dim");
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("ConstantOfShape", {i64({2, -1})}); }, "node_ConstantOfShape",
                                          "invalid or too large");
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("ConstantOfShape", {i64({INT64_MAX, 4})}); }, "node_ConstantOfShape",
                                          "invalid or too large");
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("ConstantOfShape", {i64({1LL << 40, 1LL << 20})}); },
                                          "node_ConstantOfShape", "too large");
}

TEST(Shape, Constant) {
  auto y = run_node("Constant", {}, {attr_ints("value_ints", {3, 4})});
  EXPECT_TRUE(all_close(y[0], {2}, {3, 4}, 0, 0));
  y = run_node("Constant", {}, {attr_float("value_float", 2.5f)});
  EXPECT_TRUE(all_close(y[0], {}, {2.5}, 0, 0));
}

TEST(Shape, RangeTypes) {
  struct Case {
    DType dt;
    double start, limit, delta;
  };
  const Case cases[] = {{DType::kFloat32, 1, 5, 0.7},   {DType::kFloat64, 10, -3, -2.5}, {DType::kInt32, 10, 3, -3},
                        {DType::kInt64, -5, 17, 4},     {DType::kInt16, 0, 7, 1},        {DType::kInt64, 3, 3, 1},
                        {DType::kInt32, 5, 3, 1},       {DType::kFloat32, 0, 1, 0.1},    {DType::kInt64, 0, 10, 3}};
  for (const Case& c : cases) {
    // Reference: count by walking, values as start + i * delta.
    std::vector<double> e;
    for (double v = c.start; c.delta > 0 ? v < c.limit - 1e-9 : v > c.limit + 1e-9; v += c.delta)
      e.push_back(c.start + double(e.size()) * c.delta);
    for (auto& v : e) v = to_double(from_double(c.dt, {}, {v}))[0];
    check_one("Range", {from_double(c.dt, {}, {c.start}), from_double(c.dt, {}, {c.limit}), from_double(c.dt, {}, {c.delta})}, {},
               {int64_t(e.size())}, e, c.dt, "range " + std::to_string(c.start) + " " + std::to_string(c.limit) + " " + std::to_string(c.delta));
  }
  auto s = [](double v) { return from_double(DType::kInt64, {}, {v}); };
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("Range", {s(0), s(5), s(0)}); }, "node_Range", "zero");
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("Range", {Tensor::scalar<int64_t>(INT64_MIN), Tensor::scalar<int64_t>(INT64_MAX), Tensor::scalar<int64_t>(1)}); },
      "node_Range", "too large");
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("Range", {Tensor::scalar<float>(0), Tensor::scalar<float>(INFINITY), Tensor::scalar<float>(1)}); }, "node_Range",
      "too large");
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("Range", {Tensor::scalar<float>(0), Tensor::scalar<float>(NAN), Tensor::scalar<float>(1)}); }, "node_Range",
      "no element count");
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("Range", {s(0), Tensor::scalar<int32_t>(3), s(1)}); }, "node_Range", "one type");
  // The whole int64 line in steps of 2^62: every element fits, although 3 * 2^62 does not.
  auto y = run_node("Range", {Tensor::scalar<int64_t>(INT64_MIN), Tensor::scalar<int64_t>(INT64_MAX),
                              Tensor::scalar<int64_t>(int64_t(1) << 62)});
  ASSERT_EQ(y[0].numel(), 4);
  const int64_t q = int64_t(1) << 62;
  EXPECT_EQ(std::vector<int64_t>(y[0].data<int64_t>(), y[0].data<int64_t>() + 4), (std::vector<int64_t>{INT64_MIN, -q, 0, q}));
}

TEST(Shape, ExpandRandom) {
  const uint32_t seed = 104;
  std::mt19937 rng(seed);
  const DType types[] = {DType::kFloat32, DType::kInt8, DType::kBool, DType::kFloat64, DType::kFloat16, DType::kUInt16};
  for (int trial = 0; trial < 40; ++trial) {
    const DType dt = types[trial % std::size(types)];
    // Input and shape input both derive from one shape by setting dims to 1 and dropping leading
    // dims, so they broadcast (in both directions).
    const Shape base = random_shape(rng, 0, 4, 0, 4);
    auto derive = [&]() {
      Shape d = base;
      for (auto& v : d)
        if (rng() % 3 == 0) v = 1;
      d.erase(d.begin(), d.begin() + long(rng() % (d.size() + 1)));
      return d;
    };
    const Shape in = derive(), spec = derive();
    Shape target(std::max(in.size(), spec.size()));
    for (size_t i = 0; i < target.size(); ++i) {
      const size_t oi = target.size() - 1 - i;
      const int64_t a = i < in.size() ? in[in.size() - 1 - i] : 1, b = i < spec.size() ? spec[spec.size() - 1 - i] : 1;
      target[oi] = a == 1 ? b : a;
    }
    Tensor x = random_tensor(dt, in, rng, -9, 9);
    auto xv = to_double(x);
    std::vector<double> e(size_t(shape_numel(target)));
    for (size_t f = 0; f < e.size(); ++f) e[f] = xv[size_t(broadcast_index(unravel(int64_t(f), target), in))];
    check_one("Expand", {x, i64(spec)}, {}, target, e, dt,
               "seed " + std::to_string(seed) + " trial " + std::to_string(trial) + " " + shape_to_string(in) + " to " +
                   shape_to_string(spec),
               13);
  }
  Tensor x = Tensor::zeros(DType::kFloat32, {2, 3});
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("Expand", {x, i64({4, 3})}); }, "node_Expand", "cannot be expanded");
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("Expand", {x, i64({-1, 3})}); }, "node_Expand", "negative");
}

// Shapes flow Shape -> Slice -> Concat -> Reshape -> Tile inside one graph. With input shapes
// known per plan, Shape, Slice and Concat fold at plan time and nothing is re-prepared per run.
TEST(Shape, ShapeChainThroughGraph) {
  auto g = std::make_shared<ir::Graph>();
  g->name = "chain";
  g->inputs.push_back({"x", ir::TypeInfo::tensor(DType::kFloat32), ""});
  g->initializers.emplace_back("s0", i64({0}));
  g->initializers.emplace_back("s1", i64({2}));
  g->initializers.emplace_back("minus1", i64({-1}));
  g->initializers.emplace_back("reps", i64({1, 1, 2}));
  auto node = [&](const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
                  std::vector<ir::Attribute> attrs = {}) {
    ir::Node n;
    n.op_type = op;
    n.name = op + "_" + out[0];
    n.inputs = std::move(in);
    n.outputs = std::move(out);
    n.attrs = std::move(attrs);
    g->nodes.push_back(std::move(n));
  };
  node("Shape", {"x"}, {"shp"});
  node("Slice", {"shp", "s0", "s1"}, {"head"});
  node("Concat", {"head", "minus1"}, {"spec"}, {attr_int("axis", 0)});
  node("Reshape", {"x", "spec"}, {"y"});
  node("Tile", {"y", "reps"}, {"t"});
  g->outputs.push_back({"y", {}, ""});
  g->outputs.push_back({"t", {}, ""});
  ir::Model m;
  m.opsets[""] = 13;
  m.graph = g;
  std::mt19937 rng(105);
  for (const Shape& s : {Shape{2, 3, 4, 5}, Shape{1, 2, 7}, Shape{3, 1, 2, 2}}) {
    Tensor x = random_tensor(DType::kFloat32, s, rng);
    auto outs = run_model(m, {x});
    const Shape ys = {s[0], s[1], shape_numel(s) / (s[0] * s[1])};
    EXPECT_TRUE(all_close(outs[0], ys, to_double(x), 0, 0)) << shape_to_string(s);
    std::vector<double> e;
    auto xv = to_double(x);
    for (int64_t row = 0; row < s[0] * s[1]; ++row)
      for (int rep = 0; rep < 2; ++rep)
        for (int64_t j = 0; j < ys[2]; ++j) e.push_back(xv[size_t(row * ys[2] + j)]);
    EXPECT_TRUE(all_close(outs[1], {s[0], s[1], 2 * ys[2]}, e, 0, 0)) << shape_to_string(s);
  }
  onnxtrain::runtime::GraphExecutor ex(g, m.opsets, onnxtrain::ExecOptions{});
  onnxtrain::Value v = onnxtrain::Value::of(Tensor::zeros(DType::kFloat32, {2, 3, 4}));
  ex.run({&v});
  EXPECT_EQ(ex.last_stats().folded_nodes, 3u);
  EXPECT_EQ(ex.last_stats().dynamic_steps, 0u);
}

// com.onnxtrain.SumToShape against a naive double reference: sum G over broadcast axes.
TEST(Shape, SumToShapeMatchesNaiveReference) {
  const uint32_t seed = 99;
  std::mt19937 rng(seed);
  const std::vector<std::pair<onnxtrain::Shape, onnxtrain::Shape>> cases = {
      {{2, 3, 4}, {3, 1}}, {{2, 3, 4}, {4}}, {{2, 3, 4}, {2, 1, 4}}, {{5}, {1}}, {{2, 3}, {}}, {{2, 3}, {2, 3}},
      {{2, 0}, {1}}, {{0, 3}, {3}}};  // empty gradients: zeros (a UBSan division by zero, fuzz finding)
  for (const auto& [gs, ts] : cases) {
    Tensor g = ot_test::random_tensor(onnxtrain::DType::kFloat64, gs, rng);
    auto gv = ot_test::to_double(g);
    std::vector<double> expect(size_t(onnxtrain::shape_numel(ts)), 0.0);
    for (int64_t i = 0; i < g.numel(); ++i)
      expect[size_t(ot_test::broadcast_index(ot_test::unravel(i, gs), ts))] += gv[size_t(i)];
    ot_test::RunOptions o;
    o.domain = "com.onnxtrain";
    Tensor shape = Tensor::from_vector<int64_t>({int64_t(ts.size())}, std::vector<int64_t>(ts.begin(), ts.end()));
    for (bool constants : {false, true}) {
      o.inputs_as_constants = constants;
      auto y = ot_test::run_node("SumToShape", {g, shape}, {}, o);
      EXPECT_TRUE(ot_test::all_close(y[0], ts, expect, 1e-12, 1e-12))
          << onnxtrain::shape_to_string(gs) << " -> " << onnxtrain::shape_to_string(ts) << " seed " << seed;
    }
  }
  EXPECT_THROW(ot_test::run_node("SumToShape", {Tensor::zeros(onnxtrain::DType::kFloat32, {2, 3}),
                                                Tensor::from_vector<int64_t>({1}, {2})},
                                 {}, [] { ot_test::RunOptions o; o.domain = "com.onnxtrain"; return o; }()),
               onnxtrain::InvalidArgument);
}

// shape_numel: the exact product, 0 for a zero dim whatever the others, and an error (not a wrapped
// value) when the product leaves int64 (UB the structured fuzz target reported from kernels'
// output-shape arithmetic).
// Dims other than zeros multiply to at most 2^52 (onnxtrain::kMaxShapeExtent): a zero dim empties a
// tensor, but its other dims still size strides and loops, so [0, 2^62, 2^62] is refused too.
TEST(Shape, NumelOverflowIsAnError) {
  const int64_t h = int64_t(1) << 62, k = onnxtrain::kMaxShapeExtent;
  EXPECT_EQ(k, int64_t(1) << 52);
  EXPECT_EQ(onnxtrain::shape_numel({}), 1);
  EXPECT_EQ(onnxtrain::shape_numel({2, 3, 4}), 24);
  EXPECT_EQ(onnxtrain::shape_numel({k, 1}), k);
  EXPECT_EQ(onnxtrain::shape_numel({0, k}), 0);
  EXPECT_EQ(onnxtrain::shape_numel({k / 2, 0, 2}), 0);
  EXPECT_THROW(onnxtrain::shape_numel({h, 1}), onnxtrain::InvalidArgument);
  EXPECT_THROW(onnxtrain::shape_numel({k, 2}), onnxtrain::InvalidArgument);
  EXPECT_THROW(onnxtrain::shape_numel({h, h, 0}), onnxtrain::InvalidArgument);
  EXPECT_THROW(onnxtrain::shape_numel({0, h, h}), onnxtrain::InvalidArgument);
  EXPECT_THROW(onnxtrain::shape_numel({h, h}), onnxtrain::InvalidArgument);
  int64_t n = -1;
  EXPECT_FALSE(onnxtrain::checked_numel({h, 4}, &n));
  EXPECT_FALSE(onnxtrain::checked_numel({h, 0, h}, &n));
  EXPECT_FALSE(onnxtrain::checked_numel({2, -1}, &n));
  EXPECT_TRUE(onnxtrain::checked_numel({k, 0, 1}, &n));
  EXPECT_EQ(n, 0);
}
