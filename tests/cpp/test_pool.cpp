// MaxPool (with Indices), AveragePool, LpPool and the global pools against naive double-precision
// references on random geometries.
#include <algorithm>
#include <cmath>
#include <limits>

#include "window_test_util.h"

using namespace ot_test;

namespace {

std::string str(const Shape& s) { return onnxtrain::shape_to_string(s); }

struct PoolCase {
  size_t nd = 2;
  int64_t N = 1, C = 1;
  Shape in, kernel, stride, dilation, pad_b, pad_e;
  std::string auto_pad = "NOTSET";
  bool ceil = false, include_pad = false, col_major = false;

  std::string describe() const {
    return "N=" + std::to_string(N) + " C=" + std::to_string(C) + " in" + str(in) + " k" + str(kernel) + " s" +
           str(stride) + " d" + str(dilation) + " pb" + str(pad_b) + " pe" + str(pad_e) + " " + auto_pad +
           (ceil ? " ceil" : "") + (include_pad ? " include_pad" : "") + (col_major ? " col_major" : "");
  }
  std::vector<ir::Attribute> attrs(const std::string& op) const {
    std::vector<ir::Attribute> a = {attr_ints("kernel_shape", kernel), attr_ints("strides", stride)};
    if (op == "MaxPool") a.push_back(attr_ints("dilations", dilation));
    if (op == "MaxPool") a.push_back(attr_int("storage_order", col_major));
    if (op != "LpPool") a.push_back(attr_int("ceil_mode", ceil));
    if (op == "AveragePool") a.push_back(attr_int("count_include_pad", include_pad));
    a.push_back(pad_attr(auto_pad, pad_b, pad_e));
    return a;
  }
};

enum class Kind { kMax, kAvg, kLp };

// Output size and effective pads along dim i.
void pool_dim(const PoolCase& c, size_t i, int64_t* out, int64_t* pb, int64_t* pe) {
  const int64_t in = c.in[i], s = c.stride[i], dk = (c.kernel[i] - 1) * c.dilation[i] + 1;
  if (c.auto_pad == "SAME_UPPER" || c.auto_pad == "SAME_LOWER") {
    *out = (in + s - 1) / s;
    const int64_t total = std::max<int64_t>(0, (*out - 1) * s + dk - in);
    *pb = c.auto_pad == "SAME_UPPER" ? total / 2 : (total + 1) / 2;
    *pe = total - *pb;
    return;
  }
  *pb = c.auto_pad == "VALID" ? 0 : c.pad_b[i];
  *pe = c.auto_pad == "VALID" ? 0 : c.pad_e[i];
  const double span = double(in + *pb + *pe - dk) / double(s);
  *out = int64_t(c.ceil ? std::ceil(span) : std::floor(span)) + 1;
  if (c.ceil && (*out - 1) * s >= in + *pb) --*out;  // no window may start in the end padding
}

// Y and (MaxPool) Indices in double.
std::vector<double> ref_pool(const PoolCase& c, Kind kind, double p, const std::vector<double>& x, Shape* yshape,
                             std::vector<double>* indices) {
  Shape out(c.nd), pb(c.nd), pe(c.nd);
  for (size_t i = 0; i < c.nd; ++i) pool_dim(c, i, &out[i], &pb[i], &pe[i]);
  *yshape = {c.N, c.C};
  yshape->insert(yshape->end(), out.begin(), out.end());
  const int64_t pin = onnxtrain::shape_numel(c.in), pout = onnxtrain::shape_numel(out), nk = onnxtrain::shape_numel(c.kernel);
  std::vector<double> y;
  indices->clear();
  for (int64_t plane = 0; plane < c.N * c.C; ++plane)
    for (int64_t po = 0; po < pout; ++po) {
      auto oi = unravel(po, out);
      double acc = kind == Kind::kMax ? -std::numeric_limits<double>::infinity() : 0.0;
      int64_t count = 0, count_pad = 0, best = -1;
      for (int64_t kf = 0; kf < nk; ++kf) {
        auto ki = unravel(kf, c.kernel);
        bool inside = true, in_padded = true;
        std::vector<int64_t> q(c.nd);
        for (size_t d = 0; d < c.nd; ++d) {
          q[d] = oi[d] * c.stride[d] - pb[d] + ki[d] * c.dilation[d];
          inside = inside && q[d] >= 0 && q[d] < c.in[d];
          in_padded = in_padded && q[d] < c.in[d] + pe[d];
        }
        count_pad += in_padded;
        if (!inside) continue;
        ++count;
        const int64_t qi = ravel(q, c.in);
        const double v = x[size_t(plane * pin + qi)];
        if (kind == Kind::kMax && v > acc) {
          acc = v;
          int64_t flat = 0, mul = 1;  // column-major spatial index
          for (size_t d = 0; d < c.nd; ++d) flat += q[d] * mul, mul *= c.in[d];
          best = plane * pin + (c.col_major ? flat : qi);
        }
        if (kind == Kind::kAvg) acc += v;
        if (kind == Kind::kLp) acc += std::pow(std::fabs(v), p);
      }
      if (kind == Kind::kAvg) acc /= double(c.include_pad ? count_pad : count);
      if (kind == Kind::kLp) acc = std::pow(acc, 1.0 / p);
      y.push_back(acc);
      indices->push_back(double(best));
    }
  return y;
}

PoolCase random_case(std::mt19937& rng, Kind kind) {
  auto r = [&](int lo, int hi) { return rand_int(rng, lo, hi); };
  PoolCase c;
  c.nd = size_t(r(1, 3));
  c.N = r(1, 2);
  c.C = r(1, 4);
  c.auto_pad = random_auto_pad(rng);
  c.ceil = kind != Kind::kLp && r(0, 2) == 0 && c.auto_pad == "NOTSET";
  c.include_pad = r(0, 1) == 1;
  c.col_major = r(0, 1) == 1;
  for (size_t i = 0; i < c.nd; ++i) {
    c.kernel.push_back(r(1, 3));
    c.stride.push_back(r(1, 3));
    c.dilation.push_back(kind == Kind::kMax ? r(1, 2) : 1);
    const int64_t dk = (c.kernel[i] - 1) * c.dilation[i] + 1;
    c.pad_b.push_back(r(0, int(c.kernel[i] - 1)));
    c.pad_e.push_back(r(0, int(c.kernel[i] - 1)));
    c.in.push_back(dk + r(0, c.nd == 3 ? 3 : 6));
  }
  return c;
}

void check_pool(const std::string& op, Kind kind, DType dt, uint32_t seed, int trials, bool indices = false,
                int64_t opset = 17, double p = 2) {
  std::mt19937 rng(seed);
  for (int t = 0; t < trials; ++t) {
    const PoolCase c = random_case(rng, kind);
    Shape xs = {c.N, c.C};
    xs.insert(xs.end(), c.in.begin(), c.in.end());
    const bool small_int = dt == DType::kInt8 || dt == DType::kUInt8;
    Tensor x = small_int ? random_tensor(dt, xs, rng, dt == DType::kInt8 ? -100 : 0, 100) : random_tensor(dt, xs, rng);
    Shape ys;
    std::vector<double> ind;
    auto e = ref_pool(c, kind, p, to_double(x), &ys, &ind);
    RunOptions o;
    o.opset = opset;
    o.inputs_as_constants = t % 5 == 3;
    o.threads = 1 + t % 2;
    o.num_outputs = indices ? 2 : 1;
    auto attrs = c.attrs(op);
    if (kind == Kind::kLp) attrs.push_back(opset < 2 ? attr_float("p", float(p)) : attr_int("p", int64_t(p)));
    const double tol = dt == DType::kFloat64 || small_int ? 1e-12 : dt == DType::kFloat32 ? 1e-5 : 1e-2;
    try {
      auto y = run_node(op, {x}, attrs, o);
      EXPECT_TRUE(all_close(y[0], ys, e, tol, tol)) << op << " " << c.describe() << " seed " << seed << " trial " << t;
      if (indices) {
        EXPECT_TRUE(all_close(y[1], ys, ind, 0, 0)) << "Indices " << c.describe() << " seed " << seed << " trial " << t;
      }
    } catch (const std::exception& ex) {
      ADD_FAILURE() << op << " " << c.describe() << " seed " << seed << " trial " << t << ": " << ex.what();
    }
  }
}

}  // namespace

TEST(Pool, MaxFloat) { check_pool("MaxPool", Kind::kMax, DType::kFloat32, 201, 120); }
TEST(Pool, MaxFloatIndices) { check_pool("MaxPool", Kind::kMax, DType::kFloat32, 202, 80, true); }
TEST(Pool, MaxDoubleIndices) { check_pool("MaxPool", Kind::kMax, DType::kFloat64, 203, 40, true); }
TEST(Pool, MaxFloat16) { check_pool("MaxPool", Kind::kMax, DType::kFloat16, 204, 20); }
TEST(Pool, MaxUInt8Indices) { check_pool("MaxPool", Kind::kMax, DType::kUInt8, 205, 40, true, 12); }
TEST(Pool, MaxInt8) { check_pool("MaxPool", Kind::kMax, DType::kInt8, 206, 30, false, 12); }
TEST(Pool, AverageFloat) { check_pool("AveragePool", Kind::kAvg, DType::kFloat32, 207, 150); }
TEST(Pool, AverageDouble) { check_pool("AveragePool", Kind::kAvg, DType::kFloat64, 208, 50); }
TEST(Pool, LpFloatP2) { check_pool("LpPool", Kind::kLp, DType::kFloat32, 209, 40, false, 11, 2); }
TEST(Pool, LpDoubleP1) { check_pool("LpPool", Kind::kLp, DType::kFloat64, 210, 30, false, 11, 1); }
TEST(Pool, LpDoubleP3) { check_pool("LpPool", Kind::kLp, DType::kFloat64, 211, 30, false, 11, 3); }
TEST(Pool, LpOpset1FloatP) { check_pool("LpPool", Kind::kLp, DType::kFloat32, 212, 10, false, 1, 3); }

TEST(Pool, Global) {
  std::mt19937 rng(213);
  for (int t = 0; t < 24; ++t) {
    const DType dt = t % 3 == 0 ? DType::kFloat64 : DType::kFloat32;
    Shape xs = {int64_t(1 + t % 3), int64_t(1 + t % 5)};
    for (int d = 0; d < 1 + t % 3; ++d) xs.push_back(int64_t(1 + (t * 7 + d * 3) % 9));
    Tensor x = random_tensor(dt, xs, rng);
    auto v = to_double(x);
    const int64_t planes = xs[0] * xs[1], plane = x.numel() / planes;
    std::vector<double> mx, avg, lp;
    for (int64_t i = 0; i < planes; ++i) {
      double m = -INFINITY, s = 0, q = 0;
      for (int64_t j = 0; j < plane; ++j) {
        const double a = v[size_t(i * plane + j)];
        m = std::max(m, a), s += a, q += a * a;
      }
      mx.push_back(m), avg.push_back(s / double(plane)), lp.push_back(std::sqrt(q));
    }
    Shape ys(xs.size(), 1);
    ys[0] = xs[0], ys[1] = xs[1];
    RunOptions o;
    o.opset = t % 2 ? 1 : 17;
    o.inputs_as_constants = t % 4 == 1;
    o.threads = 1 + t % 2;
    EXPECT_TRUE(all_close(run_node("GlobalMaxPool", {x}, {}, o)[0], ys, mx, 0, 0)) << str(xs);
    EXPECT_TRUE(all_close(run_node("GlobalAveragePool", {x}, {}, o)[0], ys, avg, 1e-5, 1e-6)) << str(xs);
    o.opset = 2;
    EXPECT_TRUE(all_close(run_node("GlobalLpPool", {x}, {attr_int("p", 2)}, o)[0], ys, lp, 1e-5, 1e-6)) << str(xs);
  }
}

// A ResNet-sized plane through oneDNN (max 3x3/2 pad 1, average 2x2/2).
TEST(Pool, ResNetShapes) {
  std::mt19937 rng(214);
  PoolCase c;
  c.N = 2, c.C = 32, c.in = {28, 28}, c.kernel = {3, 3}, c.stride = {2, 2}, c.dilation = {1, 1};
  c.pad_b = c.pad_e = {1, 1};
  Tensor x = random_tensor(DType::kFloat32, {2, 32, 28, 28}, rng);
  Shape ys;
  std::vector<double> ind;
  RunOptions o;
  o.threads = 2;
  auto e = ref_pool(c, Kind::kMax, 2, to_double(x), &ys, &ind);
  EXPECT_TRUE(all_close(run_node("MaxPool", {x}, c.attrs("MaxPool"), o)[0], ys, e, 0, 0));
  c.kernel = {2, 2}, c.pad_b = c.pad_e = {0, 0};
  e = ref_pool(c, Kind::kAvg, 2, to_double(x), &ys, &ind);
  EXPECT_TRUE(all_close(run_node("AveragePool", {x}, c.attrs("AveragePool"), o)[0], ys, e, 1e-6, 1e-6));
}

TEST(Pool, ErrorsNameNode) {
  auto expect_error = [](const std::string& op, const Shape& xs, const std::vector<ir::Attribute>& attrs,
                         const char* what, DType dt = DType::kFloat32, int64_t opset = 17) {
    RunOptions o;
    o.opset = opset;
    try {
      run_node(op, {Tensor::zeros(dt, xs)}, attrs, o);
      ADD_FAILURE() << "expected an error: " << what;
    } catch (const onnxtrain::Error& e) {
      EXPECT_NE(std::string(e.what()).find("node_" + op), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error("MaxPool", {1, 1, 4, 4}, {}, "kernel_shape is required");
  expect_error("MaxPool", {1, 1, 4, 4}, {attr_ints("kernel_shape", {3})}, "kernel_shape has 1 values");
  expect_error("MaxPool", {1, 1, 2, 2}, {attr_ints("kernel_shape", {3, 3})}, "output would be empty");
  expect_error("AveragePool", {1, 1, 4, 4}, {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {1})}, "strides has 1");
  expect_error("MaxPool", {1, 4, 4}, {attr_ints("kernel_shape", {2, 2})}, "kernel_shape has 2 values");
  expect_error("MaxPool", {4, 4}, {attr_ints("kernel_shape", {2})}, "X must be");
  expect_error("MaxPool", {1, 1, 4, 4}, {attr_ints("kernel_shape", {2, 2})}, "not supported", DType::kUInt8, 11);
  expect_error("AveragePool", {1, 1, 4, 4}, {attr_ints("kernel_shape", {2, 2})}, "not supported", DType::kInt8);
  expect_error("LpPool", {1, 1, 4, 4}, {attr_ints("kernel_shape", {2, 2}), attr_int("p", 0)}, "p must be positive");
  expect_error("GlobalAveragePool", {1, 1, 0, 3}, {}, "empty spatial");
  // int64 attribute values whose geometry overflows (a UBSan report in the structured fuzz target).
  const int64_t big = std::numeric_limits<int64_t>::max();
  expect_error("MaxPool", {1, 1, 4, 4}, {attr_ints("kernel_shape", {2, 2}), attr_ints("pads", {0, 0, big, 0})},
               "overflows int64");
  expect_error("AveragePool", {1, 1, 4, 4}, {attr_ints("kernel_shape", {2, 2}), attr_ints("dilations", {big, 1})},
               "overflows int64");
  expect_error("MaxPool", {1, 1, 4, 4}, {attr_ints("kernel_shape", {3, 3}), attr_ints("dilations", {big / 2 + 1, 1})},
               "overflows int64");
}

// A stride of 2^63 - 1 is a valid (if odd) value: one window per spatial dim, with SAME_UPPER
// padding and with ceil_mode (whose would-be second window starts past int64).
TEST(Pool, HugeStride) {
  const int64_t big = std::numeric_limits<int64_t>::max();
  Tensor x = Tensor::zeros(DType::kFloat32, {1, 1, 4, 4});
  for (int i = 0; i < 16; ++i) x.data<float>()[i] = float((i * 7) % 16);
  for (const auto& extra : {attr_string("auto_pad", "SAME_UPPER"), attr_int("ceil_mode", 1)}) {
    auto out = run_node("MaxPool", {x}, {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {big, big}), extra});
    ASSERT_EQ(out[0].shape(), (Shape{1, 1, 1, 1})) << extra.name;
    // The first 2x2 window (SAME_UPPER pads only at the end): x[0,0], x[0,1], x[1,0], x[1,1].
    const float* p = x.data<float>();
    EXPECT_EQ(out[0].data<float>()[0], std::max({p[0], p[1], p[4], p[5]})) << extra.name;
  }
}
