// ai.onnx.ml kernels (src/kernels/cpu/ml.cpp) against naive double-precision references written
// here from the operators' definitions (onnxruntime's semantics where ONNX's text leaves a choice:
// the binary score columns, PROBIT's erf^-1 approximation), plus their bad-input errors. Random
// tests print their seed.
#include <algorithm>
#include <cmath>
#include <functional>

#include "ml_reference.h"
#include "test_util.h"

using namespace ot_test;
using onnxtrain::shape_numel;

namespace {

const char* kMl = "ai.onnx.ml";

RunOptions ml(bool constants = false, int64_t opset = 1) {
  RunOptions o;
  o.domain = kMl;
  o.domain_opset = opset;
  o.inputs_as_constants = constants;
  return o;
}

/// Expects f to throw an onnxtrain error whose message holds every needle.
void expect_error(const std::function<void()>& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected an error mentioning " << needles[0];
  } catch (const onnxtrain::Error& e) {
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

std::vector<float> random_floats(std::mt19937& rng, size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = float(d(rng));
  return v;
}

/// Float32-exact doubles of a tensor read as float (the kernels read inputs as float).
std::vector<double> as_float_values(const Tensor& t) {
  std::vector<double> v = to_double(t);
  for (auto& x : v) x = double(float(x));
  return v;
}

/// A random input in [-1, 1) and, in *values, its elements as the kernels read them.
Tensor random_input(std::mt19937& rng, DType dt, const Shape& s, std::vector<double>* values) {
  Tensor x = random_tensor(dt, s, rng, -1, 1);
  *values = as_float_values(x);
  return x;
}

void ref_transform(std::vector<double>& s, const std::string& t) {
  if (s.size() == 1 && t != "PROBIT") return;  // one score: only PROBIT applies
  if (t == "LOGISTIC")
    for (auto& v : s) v = ref_logistic(v);
  if (t == "PROBIT")
    for (auto& v : s) v = ref_probit(v);
  if (t == "SOFTMAX" || t == "SOFTMAX_ZERO") {
    double sum = 0;
    for (auto& v : s) {
      const bool zero = t == "SOFTMAX_ZERO" && std::fabs(v) <= 1e-7;
      v = zero ? 0 : std::exp(v);
      sum += v;
    }
    for (auto& v : s) v /= sum;
  }
}

const char* kTransforms[] = {"NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"};

// ---------------------------------------------------------------- linear models
TEST(Ml, LinearClassifierMulticlass) {
  const uint32_t seed = 7;
  std::mt19937 rng(seed);
  const int64_t n = 6, c = 4, k = 3;
  // Scores within (0, 1) so that PROBIT is defined.
  const auto w = random_floats(rng, size_t(k * c), 0.0, 0.2);
  const auto b = random_floats(rng, size_t(k), 0.0, 0.2);
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32})
    for (const char* t : kTransforms)
      for (bool constants : {false, true}) {
        SCOPED_TRACE(std::string(t) + " seed " + std::to_string(seed) + " " + onnxtrain::dtype_name(dt));
        const bool ints = dt == DType::kInt64 || dt == DType::kInt32;
        Tensor x = random_tensor(dt, {n, c}, rng, 0.0, ints ? 2.0 : 1.0);
        const auto xv = as_float_values(x);
        auto out = run_node("LinearClassifier", {x},
                            {attr_floats("coefficients", w), attr_floats("intercepts", b),
                             attr_ints("classlabels_ints", {10, 20, 30}), attr_string("post_transform", t)},
                            [&] { auto o = ml(constants); o.num_outputs = 2; return o; }());
        std::vector<double> z;
        std::vector<int64_t> labels;
        for (int64_t r = 0; r < n; ++r) {
          std::vector<double> s(static_cast<size_t>(k));
          for (int64_t j = 0; j < k; ++j) {
            s[size_t(j)] = b[size_t(j)];
            for (int64_t f = 0; f < c; ++f) s[size_t(j)] += xv[size_t(r * c + f)] * w[size_t(j * c + f)];
          }
          labels.push_back(10 * (1 + (std::max_element(s.begin(), s.end()) - s.begin())));
          ref_transform(s, t);
          z.insert(z.end(), s.begin(), s.end());
        }
        ASSERT_EQ(out[0].dtype(), DType::kInt64);
        EXPECT_EQ(std::vector<int64_t>(out[0].data<int64_t>(), out[0].data<int64_t>() + n), labels);
        // PROBIT's approximation in float amplifies rounding near 0 and 1.
        EXPECT_TRUE(all_close(out[1], {n, k}, z, 1e-4, std::string(t) == "PROBIT" ? 1e-3 : 1e-5));
      }
}

TEST(Ml, LinearClassifierBinary) {
  std::mt19937 rng(11);
  const int64_t n = 8, c = 3;
  const auto w = random_floats(rng, size_t(c), -1, 1);
  const std::vector<float> b = {0.1f};
  std::vector<double> xv;
  Tensor x = random_input(rng, DType::kFloat32, {n, c}, &xv);
  std::vector<double> s;
  for (int64_t r = 0; r < n; ++r) {
    double v = b[0];
    for (int64_t f = 0; f < c; ++f) v += xv[size_t(r * c + f)] * w[size_t(f)];
    s.push_back(v);
  }
  RunOptions o = ml();
  o.num_outputs = 2;
  // Two string labels: the positive one for a positive score; columns [1 - s, s] (onnxruntime's).
  auto out = run_node("LinearClassifier", {x},
                      {attr_floats("coefficients", w), attr_floats("intercepts", b),
                       attr_strings("classlabels_strings", {"neg", "pos"})},
                      o);
  std::vector<double> z;
  for (int64_t r = 0; r < n; ++r) {
    EXPECT_EQ(out[0].data<std::string>()[r], s[size_t(r)] > 0 ? "pos" : "neg") << r;
    z.push_back(1 - s[size_t(r)]);
    z.push_back(s[size_t(r)]);
  }
  EXPECT_TRUE(all_close(out[1], {n, 2}, z, 1e-5, 1e-5));
  // No labels: 1 / 0 and one column.
  out = run_node("LinearClassifier", {x}, {attr_floats("coefficients", w), attr_floats("intercepts", b)}, o);
  for (int64_t r = 0; r < n; ++r) EXPECT_EQ(out[0].data<int64_t>()[r], s[size_t(r)] > 0 ? 1 : 0);
  EXPECT_TRUE(all_close(out[1], {n, 1}, s, 1e-5, 1e-5));
}

TEST(Ml, LinearRegressor) {
  std::mt19937 rng(13);
  const int64_t n = 5, c = 3, t = 2;
  const auto w = random_floats(rng, size_t(t * c), -1, 1);
  const auto b = random_floats(rng, size_t(t), -1, 1);
  std::vector<double> xv;
  Tensor x = random_input(rng, DType::kFloat64, {n, c}, &xv);
  for (const char* tr : kTransforms)
    for (bool with_b : {true, false}) {
      SCOPED_TRACE(tr);
      std::vector<ir::Attribute> attrs = {attr_floats("coefficients", w), attr_int("targets", t),
                                          attr_string("post_transform", tr)};
      if (with_b) attrs.push_back(attr_floats("intercepts", b));
      auto y = run_node("LinearRegressor", {x}, attrs, ml());
      std::vector<double> ref;
      for (int64_t r = 0; r < n; ++r) {
        std::vector<double> s(static_cast<size_t>(t));
        for (int64_t j = 0; j < t; ++j) {
          s[size_t(j)] = with_b ? b[size_t(j)] : 0.0;
          for (int64_t f = 0; f < c; ++f) s[size_t(j)] += xv[size_t(r * c + f)] * w[size_t(j * c + f)];
        }
        ref_transform(s, tr);
        ref.insert(ref.end(), s.begin(), s.end());
      }
      EXPECT_TRUE(all_close(y[0], {n, t}, ref, 1e-4, 1e-5));
    }
  // SOFTMAX_ZERO leaves a zero score out of the sum.
  auto z = run_node("LinearRegressor", {Tensor::from_vector<float>({1, 2}, {1, 2})},
                    {attr_floats("coefficients", {1, 1, 0, 0}), attr_int("targets", 2),
                     attr_string("post_transform", "SOFTMAX_ZERO")},
                    ml());
  EXPECT_TRUE(all_close(z[0], {1, 2}, {1, 0}));
  // One feature vector (rank 1) is one row.
  auto y = run_node("LinearRegressor", {Tensor::from_vector<float>({3}, {1, 2, 3})},
                    {attr_floats("coefficients", {1, 1, 1}), attr_floats("intercepts", {0.5f})}, ml());
  EXPECT_TRUE(all_close(y[0], {1, 1}, {6.5}));
}

TEST(Ml, LinearModelErrors) {
  Tensor x = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  RunOptions o = ml();
  o.num_outputs = 2;
  auto lc = [&](std::vector<ir::Attribute> a) { run_node("LinearClassifier", {x}, a, o); };
  expect_error([&] { lc({attr_floats("coefficients", {1, 2, 3, 4, 5}), attr_floats("intercepts", {0, 0})}); },
               {"node_LinearClassifier", "5 coefficients", "2 rows"});
  expect_error([&] { lc({attr_floats("coefficients", {1, 2, 3, 4}), attr_floats("intercepts", {0, 0}),
                         attr_ints("classlabels_ints", {1, 2})}); },
               {"node_LinearClassifier", "3 features"});
  expect_error([&] { lc({attr_floats("coefficients", {1, 2, 3, 4, 5, 6}), attr_floats("intercepts", {0, 0})}); },
               {"node_LinearClassifier", "0 class labels for 2 classes"});
  expect_error([&] {
    lc({attr_floats("coefficients", std::vector<float>(9, 1.f)), attr_floats("intercepts", {0, 0, 0}),
        attr_ints("classlabels_ints", {1, 2})});
  }, {"node_LinearClassifier", "2 class labels for 3 classes"});
  expect_error([&] { lc({attr_floats("coefficients", {1, 2, 3}), attr_floats("intercepts", {0}),
                         attr_ints("classlabels_ints", {1, 2, 3})}); },
               {"node_LinearClassifier", "3 class labels for a binary classifier"});
  expect_error([&] { lc({attr_floats("coefficients", {1, 2, 3})}); }, {"node_LinearClassifier", "intercepts"});
  expect_error([&] { lc({attr_floats("coefficients", {1, 2, 3}), attr_floats("intercepts", {0}),
                         attr_string("post_transform", "SIGMOID")}); },
               {"node_LinearClassifier", "post_transform 'SIGMOID'"});
  expect_error([&] {
    run_node("LinearRegressor", {x}, {attr_floats("coefficients", {1, 2, 3}), attr_floats("intercepts", {0, 1})}, ml());
  }, {"node_LinearRegressor", "2 intercepts for 1 targets"});
  expect_error([&] {
    run_node("LinearRegressor", {Tensor::from_vector<float>({1, 1, 3}, {1, 2, 3})}, {attr_floats("coefficients", {1, 2, 3})},
             ml());
  }, {"node_LinearRegressor", "expected [N, C] or [C]"});
  expect_error([&] {
    run_node("LinearRegressor", {Tensor::from_vector<uint8_t>({1, 3}, {1, 2, 3})}, {attr_floats("coefficients", {1, 2, 3})},
             ml());
  }, {"node_LinearRegressor", "uint8"});
}

// ---------------------------------------------------------------- SVMs
struct SvmRef {
  std::string kernel;
  double gamma, coef0, degree;
  double k(const double* x, const float* v, int64_t f) const {
    double dot = 0, d2 = 0;
    for (int64_t j = 0; j < f; ++j) {
      dot += x[j] * v[j];
      d2 += (x[j] - v[j]) * (x[j] - v[j]);
    }
    if (kernel == "POLY") return std::pow(gamma * dot + coef0, degree);
    if (kernel == "RBF") return std::exp(-gamma * d2);
    if (kernel == "SIGMOID") return std::tanh(gamma * dot + coef0);
    return dot;
  }
};

/// p minimizing p'Qp with sum(p) = 1 (Q from the pairwise probabilities as Wu, Lin and Weng define
/// it), solved exactly: [Q 1; 1' 0] [p; b] = [0; 1] by Gaussian elimination.
std::vector<double> exact_coupling(const std::vector<double>& r, int64_t k) {
  const int64_t m = k + 1;
  std::vector<double> a(size_t(m * (m + 1)), 0.0);
  auto at = [&](int64_t i, int64_t j) -> double& { return a[size_t(i * (m + 1) + j)]; };
  for (int64_t t = 0; t < k; ++t) {
    for (int64_t j = 0; j < k; ++j)
      if (j != t) {
        at(t, t) += r[size_t(j * k + t)] * r[size_t(j * k + t)];
        at(t, j) = -r[size_t(j * k + t)] * r[size_t(t * k + j)];
      }
    at(t, k) = 1;
    at(k, t) = 1;
  }
  at(k, m) = 1;
  for (int64_t c = 0; c < m; ++c) {
    int64_t piv = c;
    for (int64_t i = c + 1; i < m; ++i)
      if (std::fabs(at(i, c)) > std::fabs(at(piv, c))) piv = i;
    for (int64_t j = 0; j <= m; ++j) std::swap(at(c, j), at(piv, j));
    for (int64_t i = 0; i < m; ++i)
      if (i != c) {
        const double f = at(i, c) / at(c, c);
        for (int64_t j = c; j <= m; ++j) at(i, j) -= f * at(c, j);
      }
  }
  std::vector<double> p(static_cast<size_t>(k));
  for (int64_t t = 0; t < k; ++t) p[size_t(t)] = at(t, m) / at(t, t);
  return p;
}

TEST(Ml, SvmClassifierSupportVectors) {
  const uint32_t seed = 17;
  std::mt19937 rng(seed);
  const int64_t n = 7, f = 3, k = 3;
  const std::vector<int64_t> per_class = {2, 1, 2};
  const int64_t v = 5, pairs = 3;
  const auto sv = random_floats(rng, size_t(v * f), -1, 1);
  const auto coef = random_floats(rng, size_t((k - 1) * v), -1, 1);
  const auto rho = random_floats(rng, size_t(pairs), -0.3, 0.3);
  const auto pa = random_floats(rng, size_t(pairs), -3, -1);
  const auto pb = random_floats(rng, size_t(pairs), -0.2, 0.2);
  std::vector<double> xv;
  Tensor x = random_input(rng, DType::kFloat32, {n, f}, &xv);
  const int64_t start[] = {0, 2, 3};
  for (const char* kt : {"LINEAR", "POLY", "RBF", "SIGMOID"})
    for (bool proba : {false, true}) {
      SCOPED_TRACE(std::string(kt) + (proba ? " proba" : "") + " seed " + std::to_string(seed));
      const SvmRef ref{kt, 0.5, 0.25, 3};
      std::vector<ir::Attribute> attrs = {
          attr_string("kernel_type", kt), attr_floats("kernel_params", {0.5f, 0.25f, 3.f}),
          attr_ints("vectors_per_class", per_class), attr_floats("support_vectors", sv),
          attr_floats("coefficients", coef), attr_floats("rho", rho), attr_ints("classlabels_ints", {4, 5, 6})};
      if (proba) {
        attrs.push_back(attr_floats("prob_a", pa));
        attrs.push_back(attr_floats("prob_b", pb));
      }
      RunOptions o = ml();
      o.num_outputs = 2;
      auto out = run_node("SVMClassifier", {x}, attrs, o);
      std::vector<double> z;
      for (int64_t r = 0; r < n; ++r) {
        std::vector<double> kv(static_cast<size_t>(v));
        for (int64_t s = 0; s < v; ++s) kv[size_t(s)] = ref.k(&xv[size_t(r * f)], &sv[size_t(s * f)], f);
        std::vector<double> dec;
        std::vector<int> votes(size_t(k), 0);
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = i + 1; j < k; ++j) {
            double d = rho[dec.size()];
            for (int64_t m = 0; m < per_class[size_t(i)]; ++m)
              d += coef[size_t((j - 1) * v + start[i] + m)] * kv[size_t(start[i] + m)];
            for (int64_t m = 0; m < per_class[size_t(j)]; ++m)
              d += coef[size_t(i * v + start[j] + m)] * kv[size_t(start[j] + m)];
            ++votes[size_t(d > 0 ? i : j)];
            dec.push_back(d);
          }
        const int64_t best = std::max_element(votes.begin(), votes.end()) - votes.begin();
        EXPECT_EQ(out[0].data<int64_t>()[r], 4 + best) << "row " << r;
        if (!proba) {
          z.insert(z.end(), dec.begin(), dec.end());
          continue;
        }
        std::vector<double> pr(size_t(k * k), 0.0);
        size_t p = 0;
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = i + 1; j < k; ++j, ++p) {
            const double q = std::clamp(1 / (1 + std::exp(dec[p] * pa[p] + pb[p])), 1e-7, 1 - 1e-7);
            pr[size_t(i * k + j)] = q;
            pr[size_t(j * k + i)] = 1 - q;
          }
        const auto probs = exact_coupling(pr, k);
        z.insert(z.end(), probs.begin(), probs.end());
      }
      // The iterative coupling stops within 0.005 / k of its fixed point.
      EXPECT_TRUE(all_close(out[1], {n, proba ? k : pairs}, z, 1e-4, proba ? 3e-3 : 1e-4));
    }
}

TEST(Ml, SvmClassifierBinaryAndLinear) {
  std::mt19937 rng(19);
  const int64_t n = 6, f = 2;
  std::vector<double> xv;
  Tensor x = random_input(rng, DType::kFloat64, {n, f}, &xv);
  // Two classes of support vectors, no probabilities: columns [-s, s], label 0 when s > 0.
  const std::vector<float> sv = {0.5f, -0.5f, -0.25f, 0.75f, 0.1f, 0.2f};
  const std::vector<float> coef = {0.7f, -0.4f, -0.3f};
  RunOptions o = ml();
  o.num_outputs = 2;
  for (const char* t : {"NONE", "LOGISTIC"}) {
    SCOPED_TRACE(t);
    auto out = run_node("SVMClassifier", {x},
                        {attr_string("kernel_type", "RBF"), attr_floats("kernel_params", {0.8f, 0, 0}),
                         attr_ints("vectors_per_class", {1, 2}), attr_floats("support_vectors", sv),
                         attr_floats("coefficients", coef), attr_floats("rho", {0.05f}),
                         attr_strings("classlabels_strings", {"a", "b"}), attr_string("post_transform", t)},
                        o);
    const SvmRef ref{"RBF", 0.8, 0, 0};
    std::vector<double> z;
    for (int64_t r = 0; r < n; ++r) {
      double s = 0.05;
      for (int64_t v = 0; v < 3; ++v) s += coef[size_t(v)] * ref.k(&xv[size_t(r * f)], &sv[size_t(v * f)], f);
      EXPECT_EQ(out[0].data<std::string>()[r], s > 0 ? "a" : "b") << r;
      z.push_back(std::string(t) == "NONE" ? -s : 1 - s);
      z.push_back(s);
    }
    EXPECT_TRUE(all_close(out[1], {n, 2}, z, 1e-5, 1e-5));
  }
  // The linear form: scores X W' + rho[0] per class, the best one's label.
  const std::vector<float> w = {1, -1, 0.5f, 0.5f, -1, 0.25f};
  for (const char* t : kTransforms) {
    SCOPED_TRACE(t);
    auto out = run_node("SVMClassifier", {x},
                        {attr_floats("coefficients", w), attr_floats("rho", {0.1f}),
                         attr_ints("classlabels_ints", {0, 1, 2}), attr_string("post_transform", t)},
                        o);
    std::vector<double> z;
    for (int64_t r = 0; r < n; ++r) {
      std::vector<double> s(3);
      for (int64_t c = 0; c < 3; ++c)
        s[size_t(c)] = 0.1 + xv[size_t(r * f)] * w[size_t(c * f)] + xv[size_t(r * f + 1)] * w[size_t(c * f + 1)];
      EXPECT_EQ(out[0].data<int64_t>()[r], std::max_element(s.begin(), s.end()) - s.begin());
      ref_transform(s, t);
      z.insert(z.end(), s.begin(), s.end());
    }
    // PROBIT of scores outside (0, 1) is NaN in both.
    EXPECT_TRUE(all_close(out[1], {n, 3}, z, 1e-4, 1e-4));
  }
}

TEST(Ml, SvmRegressor) {
  std::mt19937 rng(23);
  const int64_t n = 6, f = 3, v = 4;
  const auto sv = random_floats(rng, size_t(v * f), -1, 1);
  const auto coef = random_floats(rng, size_t(v), -1, 1);
  std::vector<double> xv;
  Tensor x = random_input(rng, DType::kFloat32, {n, f}, &xv);
  for (const char* kt : {"LINEAR", "POLY", "RBF", "SIGMOID"})
    for (bool one_class : {false, true}) {
      SCOPED_TRACE(kt);
      const SvmRef ref{kt, 0.3, 0.5, 2};
      auto y = run_node("SVMRegressor", {x},
                        {attr_string("kernel_type", kt), attr_floats("kernel_params", {0.3f, 0.5f, 2.f}),
                         attr_int("n_supports", v), attr_floats("support_vectors", sv), attr_floats("coefficients", coef),
                         attr_floats("rho", {-0.1f}), attr_int("one_class", one_class)},
                        ml());
      std::vector<double> ref_y;
      for (int64_t r = 0; r < n; ++r) {
        double s = -0.1;
        for (int64_t k = 0; k < v; ++k) s += coef[size_t(k)] * ref.k(&xv[size_t(r * f)], &sv[size_t(k * f)], f);
        ref_y.push_back(one_class ? (s > 0 ? 1 : -1) : s);
      }
      EXPECT_TRUE(all_close(y[0], {n, 1}, ref_y, 1e-5, 1e-5));
    }
  // Linear form: X w + rho[0]; PROBIT applies to the single score.
  auto y = run_node("SVMRegressor", {Tensor::from_vector<float>({2, 2}, {0.1f, 0.2f, 0.3f, 0.1f})},
                    {attr_floats("coefficients", {1, 0.5f}), attr_floats("rho", {0.2f}), attr_string("post_transform", "PROBIT")},
                    ml());
  EXPECT_TRUE(all_close(y[0], {2, 1}, {ref_probit(0.4), ref_probit(0.55)}, 1e-4, 1e-4));
}

TEST(Ml, SvmErrors) {
  Tensor x = Tensor::from_vector<float>({1, 2}, {1, 2});
  RunOptions o = ml();
  o.num_outputs = 2;
  auto svc = [&](std::vector<ir::Attribute> a) { run_node("SVMClassifier", {x}, a, o); };
  const std::vector<ir::Attribute> base = {attr_ints("vectors_per_class", {1, 1}), attr_floats("support_vectors", {1, 2, 3, 4}),
                                           attr_floats("coefficients", {1, -1}), attr_floats("rho", {0}),
                                           attr_ints("classlabels_ints", {0, 1})};
  auto with = [&](std::vector<ir::Attribute> extra) {
    std::vector<ir::Attribute> a = base;
    for (auto& e : extra)
      for (auto& b : a)
        if (b.name == e.name) b = e;
    for (auto& e : extra)
      if (std::none_of(a.begin(), a.end(), [&](const ir::Attribute& b) { return b.name == e.name; })) a.push_back(e);
    return a;
  };
  svc(base);  // the base model runs
  expect_error([&] { svc(with({attr_floats("coefficients", {1, -1, 2})})); }, {"node_SVMClassifier", "3 coefficients"});
  expect_error([&] { svc(with({attr_floats("rho", {0, 1})})); }, {"node_SVMClassifier", "2 rho values"});
  expect_error([&] { svc(with({attr_ints("vectors_per_class", {1, 1, 0})})); },
               {"node_SVMClassifier", "3 counts for 2 classes"});
  expect_error([&] { svc(with({attr_floats("support_vectors", {1, 2, 3})})); },
               {"node_SVMClassifier", "support_vectors"});
  expect_error([&] { svc(with({attr_floats("prob_a", {1})})); }, {"node_SVMClassifier", "prob_b"});
  expect_error([&] { svc(with({attr_floats("kernel_params", {1, 2})})); }, {"node_SVMClassifier", "kernel_params"});
  expect_error([&] { svc(with({attr_string("kernel_type", "CUBIC")})); }, {"node_SVMClassifier", "CUBIC"});
  expect_error([&] { svc(with({attr_ints("classlabels_ints", {})})); }, {"node_SVMClassifier", "classlabels"});
  expect_error([&] { run_node("SVMClassifier", {Tensor::from_vector<float>({1, 3}, {1, 2, 3})}, base, o); },
               {"node_SVMClassifier", "3 features, the model 2"});
  expect_error([&] {
    run_node("SVMRegressor", {x}, {attr_int("n_supports", 2), attr_floats("support_vectors", {1, 2, 3, 4}),
                                   attr_floats("coefficients", {1}), attr_floats("rho", {0})}, ml());
  }, {"node_SVMRegressor", "1 coefficients for 2 support vectors"});
  expect_error([&] {
    run_node("SVMRegressor", {x}, {attr_floats("coefficients", {1, 2}), attr_floats("rho", {0}), attr_int("one_class", 1),
                                   attr_string("post_transform", "PROBIT")}, ml());
  }, {"node_SVMRegressor", "one_class"});
}

// ---------------------------------------------------------------- transformers
TEST(Ml, NormalizerScalerBinarizer) {
  std::mt19937 rng(29);
  const int64_t n = 4, c = 5;
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32}) {
    Tensor x = random_tensor(dt, {n, c}, rng, -3, 3);
    const auto xv = as_float_values(x);
    for (const char* norm : {"MAX", "L1", "L2"}) {
      SCOPED_TRACE(norm);
      auto y = run_node("Normalizer", {x}, {attr_string("norm", norm)}, ml());
      std::vector<double> ref;
      for (int64_t r = 0; r < n; ++r) {
        double d = std::string(norm) == "MAX" ? -1e300 : 0;
        for (int64_t j = 0; j < c; ++j) {
          const double v = xv[size_t(r * c + j)];
          d = std::string(norm) == "MAX" ? std::max(d, v) : std::string(norm) == "L1" ? d + std::fabs(v) : d + v * v;
        }
        if (std::string(norm) == "L2") d = std::sqrt(d);
        for (int64_t j = 0; j < c; ++j) ref.push_back(d == 0 ? xv[size_t(r * c + j)] : xv[size_t(r * c + j)] / d);
      }
      EXPECT_TRUE(all_close(y[0], {n, c}, ref, 1e-5, 1e-6));
    }
    const std::vector<float> off = {0.5f, -1, 2, 0, 1}, sc = {2, 0.5f, -1, 3, 1};
    auto y = run_node("Scaler", {x}, {attr_floats("offset", off), attr_floats("scale", sc)}, ml(true));
    std::vector<double> ref;
    for (int64_t k = 0; k < n * c; ++k) ref.push_back((xv[size_t(k)] - off[size_t(k % c)]) * sc[size_t(k % c)]);
    EXPECT_TRUE(all_close(y[0], {n, c}, ref, 1e-6, 1e-6));
    y = run_node("Scaler", {x}, {attr_floats("offset", {1}), attr_floats("scale", {0.5f})}, ml());
    ref.clear();
    for (double v : xv) ref.push_back((v - 1) * 0.5);
    EXPECT_TRUE(all_close(y[0], {n, c}, ref, 1e-6, 1e-6));
    y = run_node("Binarizer", {x}, {attr_float("threshold", 0.5f)}, ml());
    ASSERT_EQ(y[0].dtype(), dt);
    ref.clear();
    for (double v : to_double(x)) ref.push_back(v > 0.5 ? 1 : 0);
    EXPECT_TRUE(all_close(y[0], {n, c}, ref));
  }
  expect_error([&] { run_node("Binarizer", {Tensor::from_vector<float>({2}, {1, NAN})}, {}, ml()); },
               {"node_Binarizer", "NaN"});
  expect_error([&] { run_node("Normalizer", {Tensor::from_vector<float>({2}, {1, 2})}, {attr_string("norm", "L3")}, ml()); },
               {"node_Normalizer", "L3"});
  expect_error([&] {
    run_node("Scaler", {Tensor::from_vector<float>({1, 3}, {1, 2, 3})}, {attr_floats("offset", {1, 2}),
                                                                       attr_floats("scale", {1, 2})}, ml());
  }, {"node_Scaler", "offset has 2 values for 3 columns"});
  expect_error([&] { run_node("Scaler", {Tensor::from_vector<float>({1}, {1})}, {attr_floats("offset", {1})}, ml()); },
               {"node_Scaler", "scale"});
}

TEST(Ml, Imputer) {
  Tensor xf = Tensor::from_vector<float>({2, 3}, {1, NAN, 3, NAN, 5, NAN});
  auto y = run_node("Imputer", {xf}, {attr_floats("imputed_value_floats", {10, 20, 30}), attr_float("replaced_value_float", NAN)},
                    ml());
  EXPECT_TRUE(all_close(y[0], {2, 3}, {1, 20, 3, 10, 5, 30}));
  Tensor xd = Tensor::from_vector<double>({2, 2}, {0, 1, 2, 0});
  y = run_node("Imputer", {xd}, {attr_floats("imputed_value_floats", {-1})}, ml());  // replaces 0 (the default)
  ASSERT_EQ(y[0].dtype(), DType::kFloat64);
  EXPECT_TRUE(all_close(y[0], {2, 2}, {-1, 1, 2, -1}));
  Tensor xi = Tensor::from_vector<int64_t>({3}, {7, -1, 3});
  y = run_node("Imputer", {xi}, {attr_ints("imputed_value_int64s", {0}), attr_int("replaced_value_int64", -1)}, ml(true));
  EXPECT_TRUE(all_close(y[0], {3}, {7, 0, 3}));
  expect_error([&] { run_node("Imputer", {xf}, {attr_floats("imputed_value_floats", {1, 2})}, ml()); },
               {"node_Imputer", "imputed_value_floats has 2 values for 3 columns"});
  expect_error([&] { run_node("Imputer", {xi}, {attr_floats("imputed_value_floats", {1})}, ml()); },
               {"node_Imputer", "imputed_value_int64s"});
}

TEST(Ml, ArrayFeatureExtractorAndFeatureVectorizer) {
  std::mt19937 rng(31);
  Tensor x = random_tensor(DType::kFloat32, {2, 3, 4}, rng, -1, 1);
  const auto xv = to_double(x);
  auto y = run_node("ArrayFeatureExtractor", {x, Tensor::from_vector<int64_t>({2}, {3, 0})}, {}, ml());
  std::vector<double> ref;
  for (int64_t r = 0; r < 6; ++r) {
    ref.push_back(xv[size_t(r * 4 + 3)]);
    ref.push_back(xv[size_t(r * 4)]);
  }
  EXPECT_TRUE(all_close(y[0], {2, 3, 2}, ref));
  // Rank 1: one row [1, k]; strings too.
  Tensor s = Tensor::from_vector<std::string>({3}, {"a", "b", "c"});
  y = run_node("ArrayFeatureExtractor", {s, Tensor::from_vector<int64_t>({1, 2}, {2, 2})}, {}, ml());
  ASSERT_EQ(y[0].shape(), (Shape{1, 2}));
  EXPECT_EQ(y[0].data<std::string>()[0], "c");
  EXPECT_EQ(y[0].data<std::string>()[1], "c");
  for (bool constants : {false, true}) {
    expect_error([&] { run_node("ArrayFeatureExtractor", {x, Tensor::from_vector<int64_t>({1}, {4})}, {}, ml(constants)); },
                 {"node_ArrayFeatureExtractor", "index 4", "[0, 4)"});
    expect_error([&] { run_node("ArrayFeatureExtractor", {x, Tensor::from_vector<int64_t>({1}, {-1})}, {}, ml(constants)); },
                 {"node_ArrayFeatureExtractor", "index -1"});
  }
  expect_error([&] { run_node("ArrayFeatureExtractor", {x, Tensor::from_vector<int32_t>({1}, {0})}, {}, ml()); },
               {"node_ArrayFeatureExtractor", "int64"});

  // FeatureVectorizer: each input's first inputdimensions values per row, zero padded.
  Tensor a = Tensor::from_vector<int64_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = Tensor::from_vector<double>({2, 1}, {0.5, -0.5});
  y = run_node("FeatureVectorizer", {a, b}, {attr_ints("inputdimensions", {2, 3})}, ml());
  EXPECT_TRUE(all_close(y[0], {2, 5}, {1, 2, 0.5, 0, 0, 4, 5, -0.5, 0, 0}));
  expect_error([&] {
    run_node("FeatureVectorizer", {a, Tensor::from_vector<float>({3, 1}, {1, 2, 3})}, {attr_ints("inputdimensions", {3, 1})},
             ml());
  }, {"node_FeatureVectorizer", "3 rows"});
  expect_error([&] { run_node("FeatureVectorizer", {a, b}, {attr_ints("inputdimensions", {3})}, ml()); },
               {"node_FeatureVectorizer", "2 inputs but 1 inputdimensions"});
}

TEST(Ml, OneHotEncoder) {
  Tensor x = Tensor::from_vector<int64_t>({2, 2}, {3, 1, 9, 3});
  auto y = run_node("OneHotEncoder", {x}, {attr_ints("cats_int64s", {1, 3, 5})}, ml());
  EXPECT_TRUE(all_close(y[0], {2, 2, 3}, {0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0}));
  // Floats are truncated to int64.
  y = run_node("OneHotEncoder", {Tensor::from_vector<double>({2}, {5.7, NAN})}, {attr_ints("cats_int64s", {1, 3, 5})}, ml());
  EXPECT_TRUE(all_close(y[0], {2, 3}, {0, 0, 1, 0, 0, 0}));
  Tensor s = Tensor::from_vector<std::string>({3}, {"b", "z", "a"});
  y = run_node("OneHotEncoder", {s}, {attr_strings("cats_strings", {"a", "b"})}, ml());
  EXPECT_TRUE(all_close(y[0], {3, 2}, {0, 1, 0, 0, 1, 0}));
  expect_error([&] { run_node("OneHotEncoder", {s}, {attr_strings("cats_strings", {"a", "b"}), attr_int("zeros", 0)}, ml()); },
               {"node_OneHotEncoder", "'z'", "zeros = 0"});
  expect_error([&] { run_node("OneHotEncoder", {x}, {attr_strings("cats_strings", {"a"})}, ml()); },
               {"node_OneHotEncoder", "cats_int64s"});
  expect_error([&] { run_node("OneHotEncoder", {x}, {}, ml()); }, {"node_OneHotEncoder", "exactly one"});
  // A repeated category takes its last column (onnxruntime 1.30); the earlier column stays 0.
  y = run_node("OneHotEncoder", {x}, {attr_ints("cats_int64s", {3, 1, 3})}, ml());
  EXPECT_TRUE(all_close(y[0], {2, 2, 3}, {0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1}));
}

TEST(Ml, LabelEncoder) {
  // v1: strings to their index in classes_strings, and back.
  Tensor s = Tensor::from_vector<std::string>({3}, {"b", "x", "a"});
  auto y = run_node("LabelEncoder", {s}, {attr_strings("classes_strings", {"a", "b"}), attr_int("default_int64", 42)}, ml());
  ASSERT_EQ(y[0].dtype(), DType::kInt64);
  EXPECT_TRUE(all_close(y[0], {3}, {1, 42, 0}));
  y = run_node("LabelEncoder", {Tensor::from_vector<int64_t>({3}, {1, 5, -1})}, {attr_strings("classes_strings", {"a", "b"})},
               ml());
  EXPECT_EQ(std::vector<std::string>(y[0].data<std::string>(), y[0].data<std::string>() + 3),
            (std::vector<std::string>{"b", "_Unused", "_Unused"}));
  // v2: typed keys and values, defaults.
  y = run_node("LabelEncoder", {s}, {attr_strings("keys_strings", {"a", "b"}), attr_ints("values_int64s", {7, 8})}, ml(false, 2));
  EXPECT_TRUE(all_close(y[0], {3}, {8, -1, 7}));
  y = run_node("LabelEncoder", {Tensor::from_vector<int64_t>({2, 2}, {1, 2, 3, 1})},
               {attr_ints("keys_int64s", {1, 3}), attr_strings("values_strings", {"one", "three"}),
                attr_string("default_string", "?")},
               ml(false, 2));
  EXPECT_EQ(std::vector<std::string>(y[0].data<std::string>(), y[0].data<std::string>() + 4),
            (std::vector<std::string>{"one", "?", "three", "one"}));
  y = run_node("LabelEncoder", {Tensor::from_vector<float>({4}, {0.5f, NAN, 2, -1})},
               {attr_floats("keys_floats", {0.5f, NAN, -1}), attr_floats("values_floats", {5, 6, 7}),
                attr_float("default_float", 9)},
               ml(true, 3));
  EXPECT_TRUE(all_close(y[0], {4}, {5, 9, 9, 7}));  // before opset 4 a NaN key never matches (onnxruntime 1.30)
  expect_error([&] {
    run_node("LabelEncoder", {s}, {attr_strings("keys_strings", {"a"}), attr_ints("values_int64s", {1, 2})}, ml(false, 2));
  }, {"node_LabelEncoder", "1 keys but 2 values"});
  expect_error([&] {
    run_node("LabelEncoder", {s}, {attr_ints("keys_int64s", {1}), attr_ints("values_int64s", {1})}, ml(false, 2));
  }, {"node_LabelEncoder", "keys are int64"});
  // A repeated key keeps its first value (onnxruntime 1.30).
  y = run_node("LabelEncoder", {s}, {attr_strings("keys_strings", {"a", "b", "a"}), attr_ints("values_int64s", {1, 2, 3})},
               ml(false, 2));
  EXPECT_TRUE(all_close(y[0], {3}, {2, -1, 1}));
  expect_error([&] { run_node("LabelEncoder", {s}, {attr_ints("values_int64s", {1})}, ml(false, 2)); },
               {"node_LabelEncoder", "keys_strings"});
}

TEST(Ml, NodeArityIsCheckedAgainstTheSchema) {
  // LinearClassifier's schema requires both outputs (label and scores).
  expect_error([&] {
    run_node("LinearClassifier", {Tensor::from_vector<float>({1, 1}, {1})},
             {attr_floats("coefficients", {1}), attr_floats("intercepts", {0})}, ml());
  }, {"node_LinearClassifier", "1 outputs", "schema allows 2 to 2"});
}

TEST(Ml, NewerOpsetIsRefusedByName) {
  // Opsets 4 and 5 run (unchanged operators; LabelEncoder-4), opset 6 is refused naming it.
  Tensor x = Tensor::from_vector<float>({1, 2}, {1, 2});
  for (int64_t opset : {4, 5}) {
    const auto y = run_node("Scaler", {x}, {attr_floats("offset", {0}), attr_floats("scale", {2})}, ml(false, opset));
    EXPECT_TRUE(all_close(y[0], {1, 2}, {2, 4}));
  }
  expect_error([&] { run_node("Scaler", {x}, {attr_floats("offset", {0}), attr_floats("scale", {1})}, ml(false, 6)); },
               {"Scaler", "opset 6", "ai.onnx.ml"});
  expect_error([&] {
    run_node("LabelEncoder", {Tensor::from_vector<int64_t>({1}, {1})}, {attr_ints("keys_int64s", {1}),
                                                                      attr_ints("values_int64s", {1})}, ml(false, 6));
  }, {"LabelEncoder", "opset 6"});
}

}  // namespace
