// Indexing kernels (Gather*, Scatter*, OneHot) against naive index-arithmetic references on
// random shapes, plus their error cases. Every random test prints its seed and trial on failure.
#include <functional>
#include <numeric>

#include "index_image_test_util.h"

using namespace ot_test;
using onnxtrain::shape_numel;
using onnxtrain::shape_to_string;

namespace {

const DType kDataTypes[] = {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kFloat16,
                            DType::kUInt8,   DType::kInt32,   DType::kBool};

Shape random_shape(std::mt19937& rng, int min_rank, int max_rank, int max_dim = 5) {
  const int r = std::uniform_int_distribution<int>(min_rank, max_rank)(rng);
  Shape s(static_cast<size_t>(r));
  for (auto& d : s) d = std::uniform_int_distribution<int>(1, max_dim)(rng);
  return s;
}

int64_t rand_in(std::mt19937& rng, int64_t lo, int64_t hi) {  // [lo, hi]
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

/// Index tensor (int32 or int64 at random) holding `v`.
Tensor index_tensor(std::mt19937& rng, const Shape& s, const std::vector<int64_t>& v) {
  std::vector<double> d(v.begin(), v.end());
  return from_double(rng() % 2 ? DType::kInt64 : DType::kInt32, s, d);
}

int64_t wrap(int64_t v, int64_t n) { return v < 0 ? v + n : v; }

RunOptions options(int trial, bool constants = false, int64_t opset = 17) {
  RunOptions o;
  o.inputs_as_constants = constants;
  o.threads = trial % 2 ? 2 : 1;
  o.opset = opset;
  return o;
}

/// GatherElements / ScatterElements inputs: data shape, an axis (maybe negative), indices of
/// the data's rank that fit off the axis, values in [-n, n).
struct ElementsCase {
  Shape xs, is;
  int64_t axis_attr = 0, axis = 0;
  std::vector<int64_t> iv;
};
ElementsCase elements_case(std::mt19937& rng) {
  ElementsCase c;
  c.xs = random_shape(rng, 1, 4);
  const int64_t r = int64_t(c.xs.size());
  c.axis_attr = rand_in(rng, -r, r - 1);
  c.axis = wrap(c.axis_attr, r);
  c.is = c.xs;
  for (size_t d = 0; d < c.is.size(); ++d)
    c.is[d] = int64_t(d) == c.axis ? rand_in(rng, 1, 6) : rand_in(rng, 1, c.xs[d]);
  const int64_t n = c.xs[size_t(c.axis)];
  c.iv.resize(size_t(shape_numel(c.is)));
  for (auto& v : c.iv) v = rand_in(rng, -n, n - 1);
  return c;
}

}  // namespace

// ---------------------------------------------------------------- Gather
TEST(Index, GatherRandom) {
  const uint32_t seed = 101;
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 60; ++trial) {
    const Shape xs = random_shape(rng, 1, 4);
    const int64_t r = int64_t(xs.size());
    const int64_t axis_attr = rand_in(rng, -r, r - 1), axis = wrap(axis_attr, r);
    const Shape is = random_shape(rng, 0, 2, 4);
    const int64_t n = xs[size_t(axis)];
    std::vector<int64_t> iv(size_t(shape_numel(is)));
    for (auto& v : iv) v = rand_in(rng, -n, n - 1);
    const DType dt = kDataTypes[trial % 7];
    const Tensor x = random_tensor(dt, xs, rng, -50, 50);
    const Tensor ind = index_tensor(rng, is, iv);

    Shape ys(xs.begin(), xs.begin() + axis);
    ys.insert(ys.end(), is.begin(), is.end());
    ys.insert(ys.end(), xs.begin() + axis + 1, xs.end());
    const auto xv = to_double(x);
    std::vector<double> expect(size_t(shape_numel(ys)));
    for (size_t i = 0; i < expect.size(); ++i) {
      const auto yi = unravel(int64_t(i), ys);
      std::vector<int64_t> ii(yi.begin() + axis, yi.begin() + axis + long(is.size()));
      std::vector<int64_t> xi(yi.begin(), yi.begin() + axis);
      xi.push_back(wrap(iv[size_t(ravel(ii, is))], n));
      xi.insert(xi.end(), yi.begin() + axis + long(is.size()), yi.end());
      expect[i] = xv[size_t(ravel(xi, xs))];
    }
    const bool constants = trial % 3 == 0;
    auto y = run_node("Gather", {x, ind}, {attr_int("axis", axis_attr)}, options(trial, constants));
    EXPECT_TRUE(all_close(y[0], ys, expect, 0, 0))
        << "seed " << seed << " trial " << trial << " x " << shape_to_string(xs) << " axis " << axis_attr;
  }
}

TEST(Index, GatherEmbeddingRowsStrings) {
  // Rows of strings (element-wise copy path) and a scalar index that drops the axis.
  std::vector<std::string> words = {"a", "bb", "ccc", "dddd", "eeeee", "ffffff"};
  const Tensor x = Tensor::from_vector<std::string>({3, 2}, words);
  const Tensor ind = Tensor::from_vector<int64_t>({4}, {2, -3, 1, 2});
  auto y = run_node("Gather", {x, ind})[0];
  ASSERT_EQ(y.shape(), Shape({4, 2}));
  const std::vector<std::string> expect = {"eeeee", "ffffff", "a", "bb", "ccc", "dddd", "eeeee", "ffffff"};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(y.data<std::string>()[i], expect[size_t(i)]) << i;
  auto s = run_node("Gather", {x, Tensor::scalar<int32_t>(-1)}, {attr_int("axis", 1)})[0];
  ASSERT_EQ(s.shape(), Shape({3}));
  EXPECT_EQ(s.data<std::string>()[2], "ffffff");
}

TEST(Index, GatherErrors) {
  const Tensor x = Tensor::zeros(DType::kFloat32, {5, 3});
  for (bool constants : {false, true}) {
    RunOptions o;
    o.inputs_as_constants = constants;
    expect_error<onnxtrain::InvalidArgument>(
        [&] { run_node("Gather", {x, Tensor::from_vector<int64_t>({3}, {0, 7, 1})}, {}, o); },
        {"node_Gather", "index 7", "size 5"});
    expect_error<onnxtrain::InvalidArgument>(
        [&] { run_node("Gather", {x, Tensor::from_vector<int32_t>({2}, {-6, 0})}, {}, o); }, {"node_Gather", "-6"});
  }
  // A bad index deep in a large parallel gather is reported, not a crash.
  std::vector<int64_t> many(100000, 1);
  many.back() = 3;
  RunOptions o2;
  o2.threads = 2;
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("Gather", {x, Tensor::from_vector<int64_t>({100000}, many)}, {attr_int("axis", 1)}, o2); },
      {"node_Gather", "index 3", "axis 1"});
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("Gather", {x, Tensor::from_vector<int64_t>({1}, {0})}, {attr_int("axis", 2)}); },
      {"node_Gather", "axis 2"});
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("Gather", {x, Tensor::from_vector<float>({1}, {0})}); }, {"node_Gather", "int32 or int64"});
}

// ---------------------------------------------------------------- GatherElements
TEST(Index, GatherElementsRandom) {
  const uint32_t seed = 202;
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 60; ++trial) {
    const ElementsCase ec = elements_case(rng);
    const Shape &xs = ec.xs, &is = ec.is;
    const std::vector<int64_t>& iv = ec.iv;
    const int64_t axis_attr = ec.axis_attr, axis = ec.axis, n = xs[size_t(axis)];
    const Tensor x = random_tensor(kDataTypes[trial % 7], xs, rng, -50, 50);
    const auto xv = to_double(x);
    std::vector<double> expect(iv.size());
    for (size_t i = 0; i < expect.size(); ++i) {
      auto p = unravel(int64_t(i), is);
      p[size_t(axis)] = wrap(iv[i], n);
      expect[i] = xv[size_t(ravel(p, xs))];
    }
    auto y = run_node("GatherElements", {x, index_tensor(rng, is, iv)}, {attr_int("axis", axis_attr)},
                      options(trial, trial % 4 == 0));
    EXPECT_TRUE(all_close(y[0], is, expect, 0, 0)) << "seed " << seed << " trial " << trial << " x "
                                                   << shape_to_string(xs) << " idx " << shape_to_string(is);
  }
}

TEST(Index, GatherElementsErrors) {
  const Tensor x = Tensor::zeros(DType::kFloat32, {2, 3});
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("GatherElements", {x, Tensor::from_vector<int64_t>({2, 1}, {0, 3})}, {attr_int("axis", 1)}); },
      {"node_GatherElements", "index 3"});
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("GatherElements", {x, Tensor::from_vector<int64_t>({2}, {0, 1})}); },
      {"node_GatherElements", "rank"});
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("GatherElements", {x, Tensor::zeros(DType::kInt64, {3, 4})}); },
      {"node_GatherElements", "exceeds"});
}

// ---------------------------------------------------------------- GatherND
TEST(Index, GatherNDRandom) {
  const uint32_t seed = 303;
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 60; ++trial) {
    const Shape xs = random_shape(rng, 1, 4, 4);
    const int64_t r = int64_t(xs.size());
    const int64_t b = rand_in(rng, 0, std::min<int64_t>(2, r - 1));
    const int64_t k = rand_in(rng, 1, r - b);
    Shape is(xs.begin(), xs.begin() + b);
    const Shape extra = random_shape(rng, 0, 2, 3);
    is.insert(is.end(), extra.begin(), extra.end());
    is.push_back(k);
    std::vector<int64_t> iv(size_t(shape_numel(is)));
    for (size_t i = 0; i < iv.size(); ++i) {
      const int64_t dim = xs[size_t(b) + i % size_t(k)];
      iv[i] = rand_in(rng, -dim, dim - 1);
    }
    Shape ys(is.begin(), is.end() - 1);
    ys.insert(ys.end(), xs.begin() + b + k, xs.end());
    const Tensor x = random_tensor(kDataTypes[trial % 7], xs, rng, -50, 50);
    const auto xv = to_double(x);
    std::vector<double> expect(size_t(shape_numel(ys)));
    const size_t lead = is.size() - 1;
    for (size_t i = 0; i < expect.size(); ++i) {
      const auto yi = unravel(int64_t(i), ys);
      std::vector<int64_t> ti(yi.begin(), yi.begin() + long(lead));
      ti.push_back(0);
      std::vector<int64_t> xi(yi.begin(), yi.begin() + b);
      for (int64_t q = 0; q < k; ++q) {
        ti.back() = q;
        xi.push_back(wrap(iv[size_t(ravel(ti, is))], xs[size_t(b + q)]));
      }
      xi.insert(xi.end(), yi.begin() + long(lead), yi.end());
      expect[i] = xv[size_t(ravel(xi, xs))];
    }
    std::vector<ir::Attribute> attrs;
    if (b || trial % 2) attrs.push_back(attr_int("batch_dims", b));
    auto y = run_node("GatherND", {x, index_tensor(rng, is, iv)}, attrs, options(trial, trial % 3 == 0, 12 + trial % 2));
    EXPECT_TRUE(all_close(y[0], ys, expect, 0, 0)) << "seed " << seed << " trial " << trial << " x "
                                                   << shape_to_string(xs) << " idx " << shape_to_string(is) << " b " << b;
  }
}

TEST(Index, GatherNDErrors) {
  const Tensor x = Tensor::zeros(DType::kFloat32, {2, 3});
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("GatherND", {x, Tensor::from_vector<int64_t>({2, 2}, {0, 0, 1, -4})}); },
      {"node_GatherND", "index -4", "axis 1"});
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("GatherND", {x, Tensor::zeros(DType::kInt64, {1, 3})}); }, {"node_GatherND", "last dimension"});
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("GatherND", {x, Tensor::zeros(DType::kInt64, {3, 1})}, {attr_int("batch_dims", 1)}); },
      {"node_GatherND", "batch dimension"});
  RunOptions o11;
  o11.opset = 11;
  expect_error<onnxtrain::InvalidModel>(
      [&] { run_node("GatherND", {x, Tensor::zeros(DType::kInt64, {2, 1})}, {attr_int("batch_dims", 1)}, o11); },
      {"node_GatherND", "opset 12"});
}

// ---------------------------------------------------------------- ScatterND
namespace {
double apply(const std::string& red, double a, double b) {
  if (red == "add") return a + b;
  if (red == "mul") return a * b;
  return b;
}
}  // namespace

TEST(Index, ScatterNDRandom) {
  const uint32_t seed = 404;
  std::mt19937 rng(seed);
  const std::string reds[] = {"none", "add", "mul"};
  for (int trial = 0; trial < 60; ++trial) {
    const Shape xs = random_shape(rng, 1, 4, 4);
    const int64_t r = int64_t(xs.size());
    const int64_t k = rand_in(rng, 1, r);
    const std::string red = reds[trial % 3];
    Shape is = random_shape(rng, 0, 2, 3);
    is.push_back(k);
    const int64_t tuples = shape_numel(is) / k;
    // Distinct target slices without a reduction (duplicates are then unspecified); any with one.
    const Shape lead(xs.begin(), xs.begin() + k);
    std::vector<int64_t> slots(size_t(shape_numel(lead)));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    if (red == "none" && tuples > int64_t(slots.size())) {
      is = {int64_t(slots.size()), k};
    }
    const int64_t nt = shape_numel(is) / k;
    std::vector<int64_t> iv;
    for (int64_t t = 0; t < nt; ++t) {
      const int64_t slot = red == "none" ? slots[size_t(t)] : rand_in(rng, 0, int64_t(slots.size()) - 1);
      auto li = unravel(slot, lead);
      for (int64_t q = 0; q < k; ++q) iv.push_back(rng() % 2 ? li[size_t(q)] - xs[size_t(q)] : li[size_t(q)]);
    }
    Shape us(is.begin(), is.end() - 1);
    us.insert(us.end(), xs.begin() + k, xs.end());
    const DType dt = red == "none" ? kDataTypes[trial % 7] : (trial % 2 ? DType::kFloat64 : DType::kInt32);
    const Tensor x = random_tensor(dt, xs, rng, red == "mul" ? 1 : -9, 3);
    const Tensor u = random_tensor(dt, us, rng, red == "mul" ? 1 : -9, 3);
    auto expect = to_double(x);
    const auto uv = to_double(u);
    const int64_t slice = shape_numel(xs) / shape_numel(lead);
    for (int64_t t = 0; t < nt; ++t) {
      std::vector<int64_t> li(static_cast<size_t>(k));
      for (int64_t q = 0; q < k; ++q) li[size_t(q)] = wrap(iv[size_t(t * k + q)], xs[size_t(q)]);
      const int64_t base = ravel(li, lead) * slice;
      for (int64_t s = 0; s < slice; ++s)
        expect[size_t(base + s)] = apply(red, expect[size_t(base + s)], uv[size_t(t * slice + s)]);
    }
    std::vector<ir::Attribute> attrs;
    if (red != "none" || trial % 2) attrs.push_back(attr_string("reduction", red));
    auto y = run_node("ScatterND", {x, index_tensor(rng, is, iv), u}, attrs, options(trial, trial % 4 == 0, 16));
    EXPECT_TRUE(all_close(y[0], xs, expect, 1e-12, 0)) << "seed " << seed << " trial " << trial << " " << red << " x "
                                                       << shape_to_string(xs) << " idx " << shape_to_string(is);
  }
}

TEST(Index, ScatterNDErrors) {
  const Tensor x = Tensor::zeros(DType::kFloat32, {4, 2});
  const Tensor u = Tensor::zeros(DType::kFloat32, {2, 2});
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("ScatterND", {x, Tensor::from_vector<int64_t>({2, 1}, {1, 4}), u}); },
      {"node_ScatterND", "index 4"});
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("ScatterND", {x, Tensor::from_vector<int64_t>({2, 1}, {1, 2}), Tensor::zeros(DType::kFloat32, {2, 3})}); },
      {"node_ScatterND", "updates shape"});
  RunOptions o13;
  o13.opset = 13;
  expect_error<onnxtrain::InvalidModel>(
      [&] { run_node("ScatterND", {x, Tensor::from_vector<int64_t>({2, 1}, {1, 2}), u}, {attr_string("reduction", "add")}, o13); },
      {"node_ScatterND", "reduction 'add'"});
}

TEST(Index, ScatterNDStrings) {
  const Tensor x = Tensor::from_vector<std::string>({3}, {"a", "b", "c"});
  const Tensor u = Tensor::from_vector<std::string>({2}, {"x", "y"});
  auto y = run_node("ScatterND", {x, Tensor::from_vector<int64_t>({2, 1}, {-1, 0}), u})[0];
  EXPECT_EQ(y.data<std::string>()[0], "y");
  EXPECT_EQ(y.data<std::string>()[1], "b");
  EXPECT_EQ(y.data<std::string>()[2], "x");
}

// ---------------------------------------------------------------- ScatterElements
TEST(Index, ScatterElementsRandom) {
  const uint32_t seed = 505;
  std::mt19937 rng(seed);
  const std::string reds[] = {"none", "add", "mul"};
  for (int trial = 0; trial < 60; ++trial) {
    const ElementsCase ec = elements_case(rng);
    const Shape &xs = ec.xs, &is = ec.is;
    const std::vector<int64_t>& iv = ec.iv;
    const int64_t axis_attr = ec.axis_attr, axis = ec.axis, n = xs[size_t(axis)];
    const std::string red = reds[trial % 3];
    const DType dt = red == "none" ? kDataTypes[trial % 7] : (trial % 2 ? DType::kFloat32 : DType::kInt64);
    const Tensor x = random_tensor(dt, xs, rng, red == "mul" ? 1 : -9, 3);
    const Tensor u = random_tensor(dt, is, rng, red == "mul" ? 1 : -9, 3);
    // Sequential reference in row-major order of the indices (the last write wins without a
    // reduction, which is what the kernel guarantees).
    auto expect = to_double(x);
    const auto uv = to_double(u);
    for (size_t i = 0; i < iv.size(); ++i) {
      auto p = unravel(int64_t(i), is);
      p[size_t(axis)] = wrap(iv[i], n);
      double& e = expect[size_t(ravel(p, xs))];
      e = apply(red, e, uv[i]);
    }
    std::vector<ir::Attribute> attrs = {attr_int("axis", axis_attr)};
    if (red != "none") attrs.push_back(attr_string("reduction", red));
    auto y = run_node("ScatterElements", {x, index_tensor(rng, is, iv), u}, attrs, options(trial, trial % 4 == 0, 16));
    EXPECT_TRUE(all_close(y[0], xs, expect, 1e-5, 0)) << "seed " << seed << " trial " << trial << " " << red << " x "
                                                      << shape_to_string(xs) << " idx " << shape_to_string(is);
  }
}

TEST(Index, ScatterElementsParallelDuplicatesAdd) {
  // Many duplicates across a large index tensor: the parallel split must keep the sum exact.
  const int64_t rows = 64, cols = 4096;
  std::vector<int64_t> iv(size_t(rows * cols));
  for (size_t i = 0; i < iv.size(); ++i) iv[i] = int64_t((i % size_t(cols)) % 3);
  const Tensor x = Tensor::zeros(DType::kFloat64, {rows, 3});
  const Tensor u = from_double(DType::kFloat64, {rows, cols}, std::vector<double>(iv.size(), 1.0));
  RunOptions o;
  o.threads = 2;
  auto y = run_node("ScatterElements", {x, Tensor::from_vector<int64_t>({rows, cols}, iv), u},
                    {attr_int("axis", 1), attr_string("reduction", "add")}, o)[0];
  std::vector<double> expect;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < 3; ++c) expect.push_back(double((cols + 2 - c) / 3));
  EXPECT_TRUE(all_close(y, {rows, 3}, expect, 0, 0));
}

TEST(Index, ScatterElementsErrors) {
  const Tensor x = Tensor::zeros(DType::kFloat32, {3, 3});
  const Tensor u = Tensor::zeros(DType::kFloat32, {1, 2});
  expect_error<onnxtrain::InvalidArgument>(
      [&] {
        run_node("ScatterElements", {x, Tensor::from_vector<int64_t>({1, 2}, {0, -5}), u}, {attr_int("axis", 1)});
      },
      {"node_ScatterElements", "index -5"});
  expect_error<onnxtrain::InvalidArgument>(
      [&] {
        run_node("ScatterElements", {x, Tensor::from_vector<int64_t>({1, 2}, {0, 1}), Tensor::zeros(DType::kFloat32, {2, 2})});
      },
      {"node_ScatterElements", "updates shape"});
  expect_error<onnxtrain::InvalidArgument>(
      [&] {
        run_node("ScatterElements", {x, Tensor::from_vector<int64_t>({1, 2}, {0, 1}), Tensor::zeros(DType::kFloat64, {1, 2})});
      },
      {"node_ScatterElements", "updates type"});
}

// ---------------------------------------------------------------- OneHot
TEST(Index, OneHotRandom) {
  const uint32_t seed = 606;
  std::mt19937 rng(seed);
  const DType index_types[] = {DType::kInt64, DType::kInt32, DType::kFloat32, DType::kUInt8};
  const DType value_types[] = {DType::kFloat32, DType::kInt32, DType::kInt64, DType::kFloat16};
  for (int trial = 0; trial < 60; ++trial) {
    const Shape is = random_shape(rng, 0, 3, 4);
    const int64_t r = int64_t(is.size());
    const int64_t depth = rand_in(rng, 1, 6);
    const int64_t axis_attr = rand_in(rng, -r - 1, r), axis = axis_attr < 0 ? axis_attr + r + 1 : axis_attr;
    const int64_t opset = trial % 5 == 0 ? 9 : 11;
    const DType it = index_types[trial % 4];
    std::vector<double> iv(size_t(shape_numel(is)));
    for (auto& v : iv) v = double(rand_in(rng, it == DType::kUInt8 ? 0 : -depth - 2, depth + 2));
    const Tensor ind = from_double(it, is, iv);
    const Tensor dep = trial % 2 ? Tensor::scalar<float>(float(depth) + 0.25f) : Tensor::from_vector<int64_t>({1}, {depth});
    const DType vt = value_types[trial % 4];
    const Tensor vals = from_double(vt, {2}, {-2, 5});
    Shape ys = is;
    ys.insert(ys.begin() + axis, depth);
    std::vector<double> expect(size_t(shape_numel(ys)));
    for (size_t i = 0; i < expect.size(); ++i) {
      auto yi = unravel(int64_t(i), ys);
      const int64_t d = yi[size_t(axis)];
      yi.erase(yi.begin() + axis);
      int64_t v = int64_t(iv[size_t(ravel(yi, is))]);
      if (v < 0 && opset >= 11) v += depth;
      expect[i] = v == d ? 5 : -2;
    }
    RunOptions o = options(trial, trial % 3 == 0, opset);
    std::vector<ir::Attribute> attrs;
    if (axis_attr != -1 || trial % 2) attrs.push_back(attr_int("axis", axis_attr));
    auto y = run_node("OneHot", {ind, dep, vals}, attrs, o);
    EXPECT_TRUE(all_close(y[0], ys, expect, 0, 0)) << "seed " << seed << " trial " << trial << " indices "
                                                   << shape_to_string(is) << " axis " << axis_attr << " opset " << opset;
  }
}

TEST(Index, OneHotErrors) {
  const Tensor ind = Tensor::from_vector<int64_t>({2}, {0, 1});
  const Tensor vals = Tensor::from_vector<float>({2}, {0, 1});
  for (bool constants : {false, true}) {
    RunOptions o;
    o.inputs_as_constants = constants;
    expect_error<onnxtrain::InvalidArgument>(
        [&] { run_node("OneHot", {ind, Tensor::scalar<int64_t>(0), vals}, {}, o); }, {"node_OneHot", "depth"});
    expect_error<onnxtrain::InvalidArgument>(
        [&] { run_node("OneHot", {ind, Tensor::scalar<int64_t>(int64_t(1) << 50), vals}, {}, o); },
        {"node_OneHot", "too large"});
  }
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("OneHot", {ind, Tensor::scalar<int64_t>(3), Tensor::from_vector<float>({3}, {0, 1, 2})}); },
      {"node_OneHot", "values"});
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("OneHot", {ind, Tensor::scalar<int64_t>(3), vals}, {attr_int("axis", 2)}); },
      {"node_OneHot", "axis 2"});
}
