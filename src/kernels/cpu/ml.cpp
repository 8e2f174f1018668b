// ai.onnx.ml inference kernels (opsets 1-5): the operators scikit-learn models use once skl2onnx
// has converted them — ArrayFeatureExtractor, Binarizer, FeatureVectorizer, Imputer, LabelEncoder
// (v1, v2, v4), LinearClassifier, LinearRegressor, Normalizer, OneHotEncoder, Scaler, SVMClassifier,
// SVMRegressor. The map operators are in ml_map.cpp, the tree ensembles in ml_tree.cpp.
// Their numbers follow onnxruntime's CPU kernels (what users compare with): inputs are read as
// float, scores are float, post_transform and the binary-classifier score columns are onnxruntime's
// (docs/ml-operators.md lists where it departs from ONNX's text). Not differentiable: the autodiff
// has no rule for them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>

#include "kernels/cpu/common.h"
#include "kernels/cpu/ml_common.h"
#include "kernels/registry.h"
#include "kernels/shape/ml.h"

namespace onnxtrain::kernels::cpu {

// ---------------------------------------------------------------- post_transform (ml_common.h)
float ml_logistic(float v) {
  const float e = 1.f / (1.f + std::exp(-std::fabs(v)));
  return v < 0 ? 1.f - e : e;
}

float ml_probit(float p) {
  // Winitzki's approximation of erf^-1 (a = 0.147), with onnxruntime's constants and order.
  const float x = 2.f * p - 1.f;
  const float sign = x < 0 ? -1.f : 1.f;
  const float ln = std::log((1.f - x) * (1.f + x));
  const float t = 2.f / (3.14159f * 0.147f) + 0.5f * ln;
  const float t2 = 1.f / 0.147f * ln;
  return 1.41421356f * sign * std::sqrt(-t + std::sqrt(t * t - t2));
}

void ml_transform_row(float* s, int64_t n, shape::PostTransform t) {
  if (n == 1 && t != shape::PostTransform::kProbit) return;
  switch (t) {
    case shape::PostTransform::kNone: break;
    case shape::PostTransform::kProbit:
      for (int64_t k = 0; k < n; ++k) s[k] = ml_probit(s[k]);
      break;
    case shape::PostTransform::kLogistic:
      for (int64_t k = 0; k < n; ++k) s[k] = ml_logistic(s[k]);
      break;
    case shape::PostTransform::kSoftmax:
    case shape::PostTransform::kSoftmaxZero: {
      // SOFTMAX_ZERO leaves scores within 1e-7 of zero out of the sum (they become ~0).
      const bool skip_zero = t == shape::PostTransform::kSoftmaxZero;
      float mx = std::numeric_limits<float>::lowest();
      for (int64_t k = 0; k < n; ++k) mx = std::max(mx, s[k]);
      const float zero_scale = std::exp(-mx);
      float sum = 0.f;
      for (int64_t k = 0; k < n; ++k) {
        if (skip_zero && std::fabs(s[k]) <= 1e-7f) {
          s[k] *= zero_scale;
        } else {
          s[k] = std::exp(s[k] - mx);
          sum += s[k];
        }
      }
      for (int64_t k = 0; k < n; ++k) s[k] /= sum;
      break;
    }
  }
}

namespace {

using shape::kMlDomain;
using shape::MlRows;
using shape::PostTransform;

using MlNumeric = TypeList<float, double, int64_t, int32_t>;

// ---------------------------------------------------------------- workspace and float inputs
// Workspace carved into typed arrays: the same sequence of take() calls sizes it in prepare
// (base null) and hands out the pieces in run.
struct Carve {
  char* base = nullptr;
  size_t bytes = 0;
  template <class T>
  T* take(int64_t n) {
    T* p = reinterpret_cast<T*>(base ? base + bytes : nullptr);
    bytes += (size_t(n) * sizeof(T) + 63) / 64 * 64;
    return p;
  }
};

/// Input i converted to float in the workspace (the input itself when it is float already):
/// onnxruntime reads the ai.onnx.ml models' numeric inputs as float.
const float* input_as_float(RunContext& ctx, size_t i, Carve& ws) {
  const Tensor& x = ctx.input(i);
  float* dst = ws.take<float>(x.dtype() == DType::kFloat32 ? 0 : x.numel());
  if (x.dtype() == DType::kFloat32) return x.data<float>();
  dispatch<MlNumeric>(x.dtype(), ctx.node(), [&]<class T>() {
    const T* src = x.data<T>();
    for (int64_t k = 0; k < x.numel(); ++k) dst[k] = static_cast<float>(src[k]);
  });
  return dst;
}
/// The workspace input_as_float needs for input i.
void reserve_float_input(const PrepareContext& ctx, size_t i, Carve& ws) {
  ws.take<float>(ctx.input_dtype(i) == DType::kFloat32 ? 0 : shape_numel(ctx.input_shape(i)));
}

/// prepare's workspace request of a kernel whose only scratch is input 0 as float.
void request_float_input(PrepareContext& ctx) {
  Carve ws;
  reserve_float_input(ctx, 0, ws);
  ctx.request_workspace(ws.bytes);
}
/// Input 0 as float, for those kernels.
const float* float_input(RunContext& ctx) {
  Carve ws{static_cast<char*>(ctx.workspace())};
  return input_as_float(ctx, 0, ws);
}

/// The two columns onnxruntime writes for a binary classifier's single score s: [-s, s] when raw
/// scores are asked for (NONE, SVM without probabilities), else [1 - s', s'] with s' the
/// transformed score (PROBIT; the other transforms leave a single score as it is).
void binary_columns(float s, PostTransform t, bool negate, float* out) {
  ml_transform_row(&s, 1, t);
  out[0] = negate ? -s : 1.f - s;
  out[1] = s;
}

template <class T>
T* out_data(RunContext& ctx, size_t i) {
  return ctx.output(i).data<T>();
}

/// Writes labels[k] (the class labels of the model, ints or strings) to row n of output 0.
void write_label(RunContext& ctx, const shape::ClassLabels& labels, int64_t n, size_t k) {
  if (labels.use_strings) out_data<std::string>(ctx, 0)[n] = labels.strings[k];
  else out_data<int64_t>(ctx, 0)[n] = labels.ints[k];
}

double dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t k = 0; k < n; ++k) s += double(a[k]) * double(b[k]);
  return s;
}

/// out[k] = x . w[k] + b[k] for the t rows of w ([t, c]).
void affine_row(const float* x, const std::vector<float>& w, const std::vector<float>& b, int64_t t, int64_t c,
                float* out) {
  for (int64_t k = 0; k < t; ++k) out[k] = float(dot(x, w.data() + k * c, c) + b[size_t(k)]);
}

// ---------------------------------------------------------------- LinearClassifier
class LinearClassifierKernel final : public Kernel {
 public:
  explicit LinearClassifierKernel(const KernelInfo& info) : s_(info) {}
  void prepare(PrepareContext& ctx) override {
    n_ = s_.check(ctx);
    c_ = int64_t(s_.coefficients.size()) / s_.targets;
    ctx.set_output(0, s_.labels.use_strings ? DType::kString : DType::kInt64, {n_});
    ctx.set_output(1, DType::kFloat32, {n_, s_.score_columns()});
    request_float_input(ctx);
  }
  void run(RunContext& ctx) override {
    const float* x = float_input(ctx);
    float* z = out_data<float>(ctx, 1);
    const int64_t t = s_.targets, cols = s_.score_columns();
    for (int64_t n = 0; n < n_; ++n) {
      float* row = z + n * cols;
      affine_row(x + n * c_, s_.coefficients, s_.intercepts, t, c_, row);
      if (t == 1) {  // binary: the positive class when the score is positive
        const bool pos = row[0] > 0;
        if (s_.labels.size() == 2) write_label(ctx, s_.labels, n, pos ? 1 : 0);
        else if (s_.labels.use_strings) out_data<std::string>(ctx, 0)[n] = pos ? "1" : "0";
        else out_data<int64_t>(ctx, 0)[n] = pos ? 1 : 0;
        if (cols == 2) binary_columns(row[0], s_.post, false, row);
        else ml_transform_row(row, 1, s_.post);
      } else {
        write_label(ctx, s_.labels, n, size_t(std::max_element(row, row + t) - row));
        ml_transform_row(row, t, s_.post);
      }
    }
  }

 private:
  shape::LinearClassifierSpec s_;
  int64_t n_ = 0, c_ = 0;
};

// ---------------------------------------------------------------- LinearRegressor
class LinearRegressorKernel final : public Kernel {
 public:
  explicit LinearRegressorKernel(const KernelInfo& info) : s_(info) {}
  void prepare(PrepareContext& ctx) override {
    n_ = s_.check(ctx);
    c_ = int64_t(s_.coefficients.size()) / s_.targets;
    ctx.set_output(0, DType::kFloat32, {n_, s_.targets});
    request_float_input(ctx);
  }
  void run(RunContext& ctx) override {
    const float* x = float_input(ctx);
    float* y = out_data<float>(ctx, 0);
    const int64_t t = s_.targets;
    for (int64_t n = 0; n < n_; ++n) {
      affine_row(x + n * c_, s_.coefficients, s_.intercepts, t, c_, y + n * t);
      ml_transform_row(y + n * t, t, s_.post);
    }
  }

 private:
  shape::LinearRegressorSpec s_;
  int64_t n_ = 0, c_ = 0;
};

// ---------------------------------------------------------------- SVMs
/// K(x, v) for one input row and one support vector of `f` features.
float svm_kernel(const shape::SvmKernelSpec& k, const float* x, const float* v, int64_t f) {
  switch (k.kind) {
    case shape::SvmKernel::kLinear: return float(dot(x, v, f));
    case shape::SvmKernel::kPoly: return std::pow(k.gamma * float(dot(x, v, f)) + k.coef0, k.degree);
    case shape::SvmKernel::kSigmoid: return std::tanh(k.gamma * float(dot(x, v, f)) + k.coef0);
    case shape::SvmKernel::kRbf: {
      double d = 0;
      for (int64_t j = 0; j < f; ++j) {
        const double e = double(x[j]) - double(v[j]);
        d += e * e;
      }
      return std::exp(-k.gamma * float(d));
    }
  }
  return 0.f;
}

/// Class probabilities from pairwise ones (r[i * k + j]: P(class i | i or j)), by the iterative
/// method of Wu, Lin and Weng (2004, their second method) as libsvm and onnxruntime run it: at most
/// 100 sweeps, until every |(Qp)_t - p'Qp| < 0.005 / k. q: k * k, qp: k.
void pairwise_to_probabilities(int64_t k, const double* r, double* q, double* qp, double* p) {
  for (int64_t t = 0; t < k; ++t) {
    p[t] = 1.0 / double(k);
    q[t * k + t] = 0;
    for (int64_t j = 0; j < k; ++j) {
      if (j == t) continue;
      q[t * k + t] += r[j * k + t] * r[j * k + t];
      q[t * k + j] = -r[j * k + t] * r[t * k + j];
    }
  }
  const double eps = 0.005 / double(k);
  for (int iter = 0; iter < 100; ++iter) {
    double pqp = 0;
    for (int64_t t = 0; t < k; ++t) {
      qp[t] = 0;
      for (int64_t j = 0; j < k; ++j) qp[t] += q[t * k + j] * p[j];
      pqp += p[t] * qp[t];
    }
    double worst = 0;
    for (int64_t t = 0; t < k; ++t) worst = std::max(worst, std::fabs(qp[t] - pqp));
    if (worst < eps) break;
    for (int64_t t = 0; t < k; ++t) {
      const double diff = (pqp - qp[t]) / q[t * k + t];
      p[t] += diff;
      pqp = (pqp + diff * (diff * q[t * k + t] + 2 * qp[t])) / (1 + diff) / (1 + diff);
      for (int64_t j = 0; j < k; ++j) {
        qp[j] = (qp[j] + diff * q[t * k + j]) / (1 + diff);
        p[j] /= (1 + diff);
      }
    }
  }
}

class SvmClassifierKernel final : public Kernel {
 public:
  explicit SvmClassifierKernel(const KernelInfo& info) : s_(info) {
    all_positive_ = std::all_of(s_.coefficients.begin(), s_.coefficients.end(), [](float c) { return c >= 0.f; });
  }
  void prepare(PrepareContext& ctx) override {
    n_ = s_.check(ctx);
    ctx.set_output(0, s_.labels.dtype(), {n_});
    ctx.set_output(1, DType::kFloat32, {n_, s_.score_columns()});
    Carve ws;
    layout(ctx, ws);
    ctx.request_workspace(ws.bytes);
  }
  void run(RunContext& ctx) override {
    Carve ws{static_cast<char*>(ctx.workspace())};
    Scratch sc = layout(ctx, ws);
    const int64_t f = s_.features, k = s_.classes, cols = s_.score_columns();
    float* z = out_data<float>(ctx, 1);
    for (int64_t n = 0; n < n_; ++n) {
      const float* x = sc.x + n * f;
      float* row = z + n * cols;
      // Raw scores: one per pair of classes (SVC form) or one per class (linear form).
      float* scores = s_.svc && !s_.has_proba() && k > 2 ? row : sc.scores;
      int64_t best = 0;
      float best_score = 0.f;
      if (s_.svc) {
        for (int64_t v = 0; v < s_.vectors; ++v)
          sc.kernel[v] = svm_kernel(s_.kernel, x, s_.support_vectors.data() + v * f, f);
        std::fill(sc.votes, sc.votes + k, 0);
        int64_t pair = 0;
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = i + 1; j < k; ++j, ++pair) {
            // Class i's vectors weighted by row j - 1 of the coefficients, class j's by row i.
            const int64_t si = s_.starts[size_t(i)], sj = s_.starts[size_t(j)];
            double sum = 0;
            for (int64_t m = 0; m < s_.vectors_per_class[size_t(i)]; ++m)
              sum += double(s_.coefficients[size_t((j - 1) * s_.vectors + si + m)]) * sc.kernel[si + m];
            for (int64_t m = 0; m < s_.vectors_per_class[size_t(j)]; ++m)
              sum += double(s_.coefficients[size_t(i * s_.vectors + sj + m)]) * sc.kernel[sj + m];
            sum += s_.rho[size_t(pair)];
            scores[pair] = float(sum);
            ++sc.votes[sum > 0 ? i : j];
          }
        best = std::max_element(sc.votes, sc.votes + k) - sc.votes;
      } else {
        for (int64_t c = 0; c < k; ++c)
          scores[c] = float(dot(x, s_.coefficients.data() + c * f, f) + s_.rho[0]);
        best = std::max_element(scores, scores + k) - scores;
        best_score = scores[best];
      }
      // The label: votes (SVC form) or the best score; a binary classifier without probabilities
      // follows onnxruntime's rule on the best score.
      size_t label = size_t(best);
      if (k == 2 && !s_.has_proba() &&
          ((all_positive_ && best_score >= 0.5f) || (!all_positive_ && best_score > 0)))
        label = 1;
      write_label(ctx, s_.labels, n, label);
      // The scores output.
      if (s_.svc && s_.has_proba()) {
        int64_t pair = 0;
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = i + 1; j < k; ++j, ++pair) {
            const float pr = 1.f - ml_logistic(scores[pair] * s_.prob_a[size_t(pair)] + s_.prob_b[size_t(pair)]);
            const float clipped = std::min(std::max(pr, 1e-7f), 1.f - 1e-7f);
            sc.pairwise[i * k + j] = clipped;
            sc.pairwise[j * k + i] = 1.f - clipped;
          }
        pairwise_to_probabilities(k, sc.pairwise, sc.q, sc.qp, sc.p);
        for (int64_t c = 0; c < k; ++c) row[c] = float(sc.p[c]);
        ml_transform_row(row, k, s_.post);
      } else if (s_.svc && k == 2) {
        binary_columns(scores[0], s_.post, s_.post == PostTransform::kNone, row);
      } else if (s_.svc) {
        ml_transform_row(row, s_.pairs(), s_.post);
      } else {
        std::copy(scores, scores + k, row);
        ml_transform_row(row, k, s_.post);
      }
    }
  }

 private:
  struct Scratch {
    const float* x;
    float* kernel;
    float* scores;
    int64_t* votes;
    double *pairwise, *q, *qp, *p;
  };
  Scratch layout(const PrepareContext& ctx, Carve& ws) const {
    reserve_float_input(ctx, 0, ws);
    return rest(ws, nullptr);
  }
  Scratch layout(RunContext& ctx, Carve& ws) const { return rest(ws, input_as_float(ctx, 0, ws)); }
  Scratch rest(Carve& ws, const float* x) const {
    const int64_t k = s_.classes;
    Scratch sc;
    sc.x = x;
    sc.kernel = ws.take<float>(s_.vectors);
    sc.scores = ws.take<float>(std::max(k, s_.pairs()));
    sc.votes = ws.take<int64_t>(k);
    const int64_t kk = s_.has_proba() ? k : 0;
    sc.pairwise = ws.take<double>(kk * kk);
    sc.q = ws.take<double>(kk * kk);
    sc.qp = ws.take<double>(kk);
    sc.p = ws.take<double>(kk);
    return sc;
  }

  shape::SvmClassifierSpec s_;
  bool all_positive_ = false;
  int64_t n_ = 0;
};

class SvmRegressorKernel final : public Kernel {
 public:
  explicit SvmRegressorKernel(const KernelInfo& info) : s_(info) {
    if (s_.one_class && s_.post != PostTransform::kNone)
      info.fail("post_transform must be NONE with one_class = 1 (the output is the sign, +1 or -1)");
  }
  void prepare(PrepareContext& ctx) override {
    n_ = s_.check(ctx);
    ctx.set_output(0, DType::kFloat32, {n_, 1});
    request_float_input(ctx);
  }
  void run(RunContext& ctx) override {
    const float* x = float_input(ctx);
    const int64_t f = s_.features;
    float* y = out_data<float>(ctx, 0);
    for (int64_t n = 0; n < n_; ++n) {
      double sum = 0;
      if (s_.vectors > 0) {
        for (int64_t v = 0; v < s_.vectors; ++v)
          sum += double(s_.coefficients[size_t(v)]) * svm_kernel(s_.kernel, x + n * f, s_.support_vectors.data() + v * f, f);
      } else {
        sum = dot(x + n * f, s_.coefficients.data(), f);
      }
      y[n] = float(sum + s_.rho[0]);
      if (s_.one_class) y[n] = y[n] > 0.f ? 1.f : -1.f;
      else ml_transform_row(y + n, 1, s_.post);
    }
  }

 private:
  shape::SvmRegressorSpec s_;
  int64_t n_ = 0;
};

// ---------------------------------------------------------------- Normalizer, Scaler, Binarizer, Imputer
enum class Norm { kMax, kL1, kL2 };

class NormalizerKernel final : public Kernel {
 public:
  explicit NormalizerKernel(const KernelInfo& info) {
    const std::string s = info.attr_string("norm", "MAX");
    if (s == "MAX") norm_ = Norm::kMax;
    else if (s == "L1") norm_ = Norm::kL1;
    else if (s == "L2") norm_ = Norm::kL2;
    else info.fail("norm '", s, "' is not one of MAX, L1, L2");
  }
  void prepare(PrepareContext& ctx) override {
    shape::require_ml_numeric(ctx, 0);
    r_ = shape::ml_rows(ctx, 0);
    ctx.set_output(0, DType::kFloat32, ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    float* y = out_data<float>(ctx, 0);
    dispatch<MlNumeric>(ctx.input(0).dtype(), ctx.node(), [&]<class T>() {
      const T* x = ctx.input(0).data<T>();
      for (int64_t n = 0; n < r_.n; ++n) {
        const T* xr = x + n * r_.c;
        float* yr = y + n * r_.c;
        // As onnxruntime: MAX divides by the largest value (not the largest magnitude); a zero
        // divisor leaves the row as it is.
        float d = norm_ == Norm::kMax ? std::numeric_limits<float>::lowest() : 0.f;
        for (int64_t j = 0; j < r_.c; ++j) {
          const float v = static_cast<float>(xr[j]);
          if (norm_ == Norm::kMax) d = std::max(d, v);
          else if (norm_ == Norm::kL1) d += std::fabs(v);
          else d += v * v;
        }
        for (int64_t j = 0; j < r_.c; ++j) {
          const float v = static_cast<float>(xr[j]);
          if (d == 0.f) yr[j] = v;
          else if (norm_ == Norm::kL2) yr[j] = std::copysign(std::sqrt(v * v / d), v);
          else yr[j] = v / d;
        }
      }
    });
  }

 private:
  Norm norm_ = Norm::kMax;
  MlRows r_;
};

class ScalerKernel final : public Kernel {
 public:
  explicit ScalerKernel(const KernelInfo& info)
      : offset_(info.attr_floats("offset", {})), scale_(info.attr_floats("scale", {})) {
    if (offset_.empty() || scale_.empty()) info.fail("attributes offset and scale are required");
    if (offset_.size() != scale_.size())
      info.fail(offset_.size(), " offset values but ", scale_.size(), " scale values");
  }
  void prepare(PrepareContext& ctx) override {
    shape::require_ml_numeric(ctx, 0);
    r_ = shape::ml_rows(ctx, 0);
    shape::check_per_column(ctx, offset_.size(), r_.c, "offset");
    ctx.set_output(0, DType::kFloat32, ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    float* y = out_data<float>(ctx, 0);
    const bool one = offset_.size() == 1;
    dispatch<MlNumeric>(ctx.input(0).dtype(), ctx.node(), [&]<class T>() {
      const T* x = ctx.input(0).data<T>();
      for (int64_t n = 0; n < r_.n; ++n)
        for (int64_t j = 0; j < r_.c; ++j) {
          const size_t p = one ? 0 : size_t(j);
          y[n * r_.c + j] = float((double(x[n * r_.c + j]) - offset_[p]) * scale_[p]);
        }
    });
  }

 private:
  std::vector<float> offset_, scale_;
  MlRows r_;
};

class BinarizerKernel final : public Kernel {
 public:
  explicit BinarizerKernel(const KernelInfo& info) : threshold_(info.attr_float("threshold", 0.f)) {}
  void prepare(PrepareContext& ctx) override {
    shape::require_ml_numeric(ctx, 0);
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    dispatch<MlNumeric>(ctx.input(0).dtype(), ctx.node(), [&]<class T>() {
      const T* x = ctx.input(0).data<T>();
      T* y = out_data<T>(ctx, 0);
      for (int64_t k = 0; k < ctx.input(0).numel(); ++k) {
        if constexpr (std::is_floating_point_v<T>)
          if (std::isnan(x[k])) ctx.fail("input value ", k, " is NaN");
        y[k] = double(x[k]) > double(threshold_) ? T(1) : T(0);
      }
    });
  }

 private:
  float threshold_;
};

class ImputerKernel final : public Kernel {
 public:
  explicit ImputerKernel(const KernelInfo& info)
      : floats_(info.attr_floats("imputed_value_floats", {})),
        ints_(info.attr_ints("imputed_value_int64s", {})),
        replaced_float_(info.attr_float("replaced_value_float", 0.f)),
        replaced_int_(info.attr_int("replaced_value_int64", 0)) {
    if (floats_.empty() && ints_.empty()) info.fail("imputed_value_floats or imputed_value_int64s is required");
  }
  void prepare(PrepareContext& ctx) override {
    shape::require_ml_numeric(ctx, 0);
    r_ = shape::ml_rows(ctx, 0);
    const bool fl = dtype_is_float(ctx.input_dtype(0));
    if (fl && floats_.empty()) ctx.fail("a ", dtype_name(ctx.input_dtype(0)), " input needs imputed_value_floats");
    if (!fl && ints_.empty()) ctx.fail("a ", dtype_name(ctx.input_dtype(0)), " input needs imputed_value_int64s");
    shape::check_per_column(ctx, fl ? floats_.size() : ints_.size(), r_.c,
                            fl ? "imputed_value_floats" : "imputed_value_int64s");
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    dispatch<MlNumeric>(ctx.input(0).dtype(), ctx.node(), [&]<class T>() {
      const T* x = ctx.input(0).data<T>();
      T* y = out_data<T>(ctx, 0);
      for (int64_t n = 0; n < r_.n; ++n)
        for (int64_t j = 0; j < r_.c; ++j) {
          const T v = x[n * r_.c + j];
          bool missing;
          T fill;
          if constexpr (std::is_floating_point_v<T>) {
            // A NaN replaced_value_float imputes the NaNs.
            missing = std::isnan(replaced_float_) ? std::isnan(v) : v == T(replaced_float_);
            fill = T(floats_[floats_.size() == 1 ? 0 : size_t(j)]);
          } else {
            missing = int64_t(v) == replaced_int_;
            fill = T(ints_[ints_.size() == 1 ? 0 : size_t(j)]);
          }
          y[n * r_.c + j] = missing ? fill : v;
        }
    });
  }

 private:
  std::vector<float> floats_;
  std::vector<int64_t> ints_;
  float replaced_float_;
  int64_t replaced_int_;
  MlRows r_;
};

// ---------------------------------------------------------------- ArrayFeatureExtractor, FeatureVectorizer
class ArrayFeatureExtractorKernel final : public Kernel {
 public:
  explicit ArrayFeatureExtractorKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    shape::require_element_type(ctx, dt,
                                dt == DType::kFloat32 || dt == DType::kFloat64 || dt == DType::kInt64 ||
                                    dt == DType::kInt32 || dt == DType::kString);
    if (ctx.input_dtype(1) != DType::kInt64) ctx.fail("indices (input 1) must be int64");
    const Shape& xs = ctx.input_shape(0);
    if (xs.empty()) ctx.fail("input 0 is a scalar: it needs at least one dimension");
    k_ = shape_numel(ctx.input_shape(1));
    if (k_ == 0) ctx.fail("indices (input 1) are empty");
    last_ = xs.back();
    Shape out = xs.size() == 1 ? Shape{1, k_} : xs;
    out.back() = k_;
    shape::check_output_size(ctx, out, dt);
    ctx.set_output(0, dt, out);
  }
  void run(RunContext& ctx) override {
    const int64_t* idx = ctx.input(1).data<int64_t>();
    for (int64_t j = 0; j < k_; ++j)
      if (idx[j] < 0 || idx[j] >= last_)
        ctx.fail("index ", idx[j], " (position ", j, ") is out of range [0, ", last_, ")");
    const int64_t rows = last_ == 0 ? 0 : ctx.input(0).numel() / last_;
    dispatch_by_size(ctx.input(0).dtype(), ctx.node(), [&]<class T>() {
      const T* x = static_cast<const T*>(ctx.input(0).raw_data());
      T* y = static_cast<T*>(ctx.output(0).raw_data());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < k_; ++j) y[r * k_ + j] = x[r * last_ + idx[j]];
    });
  }

 private:
  int64_t k_ = 0, last_ = 0;
};

class FeatureVectorizerKernel final : public Kernel {
 public:
  explicit FeatureVectorizerKernel(const KernelInfo& info) : dims_(info.attr_ints("inputdimensions", {})) {
    if (dims_.size() != info.node().inputs.size())
      info.fail(info.node().inputs.size(), " inputs but ", dims_.size(), " inputdimensions");
    for (int64_t d : dims_) {
      if (d < 0) info.fail("inputdimensions has a negative size ", d);
      if (__builtin_add_overflow(total_, d, &total_)) info.fail("inputdimensions overflows");
    }
  }
  void prepare(PrepareContext& ctx) override {
    widths_.clear();
    for (size_t i = 0; i < dims_.size(); ++i) {
      if (!ctx.has_input(i)) ctx.fail("input ", i, " is missing");
      shape::require_ml_numeric(ctx, i);
      const Shape& s = ctx.input_shape(i);
      if (s.empty()) ctx.fail("input ", i, " is a scalar: expected [N, C] or [C]");
      const int64_t n = s.size() == 1 ? 1 : s[0];
      if (i == 0) n_ = n;
      else if (n != n_) ctx.fail("input ", i, " has ", n, " rows, input 0 has ", n_);
      widths_.push_back(s.size() == 1 ? s[0] : dim_product(s, 1, s.size()));
    }
    shape::check_output_size(ctx, {n_, total_}, DType::kFloat32);
    ctx.set_output(0, DType::kFloat32, {n_, total_});
  }
  void run(RunContext& ctx) override {
    float* y = out_data<float>(ctx, 0);
    std::fill(y, y + n_ * total_, 0.f);
    int64_t offset = 0;
    for (size_t i = 0; i < dims_.size(); ++i) {
      // Each input's first inputdimensions[i] values per row; shorter rows are padded with zeros.
      const int64_t w = widths_[i], take = std::min(w, dims_[i]);
      dispatch<MlNumeric>(ctx.input(i).dtype(), ctx.node(), [&]<class T>() {
        const T* x = ctx.input(i).data<T>();
        for (int64_t n = 0; n < n_; ++n)
          for (int64_t j = 0; j < take; ++j) y[n * total_ + offset + j] = static_cast<float>(x[n * w + j]);
      });
      offset += dims_[i];
    }
  }

 private:
  std::vector<int64_t> dims_, widths_;
  int64_t total_ = 0, n_ = 0;
};

// ---------------------------------------------------------------- OneHotEncoder
class OneHotEncoderKernel final : public Kernel {
 public:
  explicit OneHotEncoderKernel(const KernelInfo& info) : zeros_(info.attr_int("zeros", 1)) {
    const auto ints = info.attr_ints("cats_int64s", {});
    const auto strings = info.attr_strings("cats_strings", {});
    if (ints.empty() == strings.empty()) info.fail("exactly one of cats_int64s and cats_strings is required");
    if (zeros_ != 0 && zeros_ != 1) info.fail("zeros ", zeros_, " is not 0 or 1");
    strings_ = !strings.empty();
    count_ = int64_t(strings_ ? strings.size() : ints.size());
    // A repeated category takes its last column, as onnxruntime's map assignment does.
    for (size_t k = 0; k < ints.size(); ++k) int_index_[ints[k]] = int64_t(k);
    for (size_t k = 0; k < strings.size(); ++k) string_index_[strings[k]] = int64_t(k);
  }
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    if (strings_ != (dt == DType::kString))
      ctx.fail("a ", dtype_name(dt), " input needs ", dt == DType::kString ? "cats_strings" : "cats_int64s");
    if (!strings_) shape::require_ml_numeric(ctx, 0);
    Shape out = ctx.input_shape(0);
    out.push_back(count_);
    shape::check_output_size(ctx, out, DType::kFloat32);
    ctx.set_output(0, DType::kFloat32, out);
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    float* y = out_data<float>(ctx, 0);
    std::fill(y, y + x.numel() * count_, 0.f);
    auto place = [&](int64_t k, int64_t cat, auto&& describe) {
      if (cat >= 0) y[k * count_ + cat] = 1.f;
      else if (!zeros_) ctx.fail("value ", describe(), " (position ", k, ") is not a category and zeros = 0");
    };
    if (strings_) {
      const std::string* s = x.data<std::string>();
      for (int64_t k = 0; k < x.numel(); ++k) {
        auto it = string_index_.find(s[k]);
        place(k, it == string_index_.end() ? -1 : it->second, [&] { return "'" + s[k] + "'"; });
      }
      return;
    }
    dispatch<MlNumeric>(x.dtype(), ctx.node(), [&]<class T>() {
      const T* v = x.data<T>();
      for (int64_t k = 0; k < x.numel(); ++k) {
        // Floats are truncated to int64 as onnxruntime casts them; NaN and values past int64
        // match no category.
        int64_t cat = -1;
        const double d = double(v[k]);
        if (d >= -9.2e18 && d <= 9.2e18) {
          auto it = int_index_.find(int64_t(v[k]));
          if (it != int_index_.end()) cat = it->second;
        }
        place(k, cat, [&] { return std::to_string(d); });
      }
    });
  }

 private:
  int64_t zeros_;
  bool strings_ = false;
  int64_t count_ = 0;
  std::unordered_map<int64_t, int64_t> int_index_;
  std::unordered_map<std::string, int64_t> string_index_;
};

// ---------------------------------------------------------------- LabelEncoder
// One value of a key or value column: string, int64 or float.
struct Cell {
  std::string s;
  int64_t i = 0;
  float f = 0.f;
};

class LabelEncoderKernel final : public Kernel {
 public:
  /// v1 (opset 1): classes_strings, string -> index or index -> string. v2 (opsets 2-3): keys_*
  /// and values_* of one type each, default_* for keys not found.
  LabelEncoderKernel(const KernelInfo& info, bool v1) {
    dflt_.s = info.attr_string("default_string", "_Unused");
    dflt_.i = info.attr_int("default_int64", -1);
    dflt_.f = info.attr_float("default_float", -0.f);
    if (v1) {
      classes_ = info.attr_strings("classes_strings", {});
      for (size_t k = 0; k < classes_.size(); ++k) class_index_.emplace(classes_[k], int64_t(k));  // first wins
      return;
    }
    std::vector<Cell> keys, values;
    key_type_ = read_column(info, "keys", &keys);
    value_type_ = read_column(info, "values", &values);
    if (keys.size() != values.size()) info.fail(keys.size(), " keys but ", values.size(), " values");
    // A repeated key keeps its first value, as onnxruntime's map emplace does; a NaN key never
    // matches (NaN != NaN in onnxruntime's hash map; opset 4 made NaN keys match NaN).
    for (size_t k = 0; k < keys.size(); ++k) {
      if (key_type_ == DType::kString) by_string_.emplace(keys[k].s, values[k]);
      else if (key_type_ == DType::kInt64) by_int_.emplace(keys[k].i, values[k]);
      else if (!std::isnan(keys[k].f)) by_float_.emplace(keys[k].f, values[k]);
    }
  }
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    DType out;
    if (value_type_ == DType::kUndefined) {  // v1
      if (dt != DType::kString && dt != DType::kInt64) ctx.fail("input must be string or int64, not ", dtype_name(dt));
      out = dt == DType::kString ? DType::kInt64 : DType::kString;
    } else {
      if (dt != key_type_) ctx.fail("input is ", dtype_name(dt), " but the keys are ", dtype_name(key_type_));
      out = value_type_;
    }
    ctx.set_output(0, out, ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    const int64_t n = x.numel();
    if (value_type_ == DType::kUndefined) {  // v1: string -> its index, index -> its string
      if (x.dtype() == DType::kString) {
        const std::string* s = x.data<std::string>();
        int64_t* o = y.data<int64_t>();
        for (int64_t k = 0; k < n; ++k) {
          auto it = class_index_.find(s[k]);
          o[k] = it == class_index_.end() ? dflt_.i : it->second;
        }
      } else {
        const int64_t* v = x.data<int64_t>();
        std::string* o = y.data<std::string>();
        for (int64_t k = 0; k < n; ++k)
          o[k] = v[k] >= 0 && v[k] < int64_t(classes_.size()) ? classes_[size_t(v[k])] : dflt_.s;
      }
      return;
    }
    for (int64_t k = 0; k < n; ++k) {
      const Cell* c = lookup(x, k);
      write(y, k, c ? *c : dflt_);
    }
  }

 private:
  static DType read_column(const KernelInfo& info, const std::string& what, std::vector<Cell>* out) {
    const auto s = info.attr_strings(what + "_strings", {});
    const auto i = info.attr_ints(what + "_int64s", {});
    const auto f = info.attr_floats(what + "_floats", {});
    if (int(!s.empty()) + int(!i.empty()) + int(!f.empty()) != 1)
      info.fail("exactly one of ", what, "_strings, ", what, "_int64s and ", what, "_floats is required");
    out->resize(std::max({s.size(), i.size(), f.size()}));
    for (size_t k = 0; k < out->size(); ++k) {
      if (!s.empty()) (*out)[k].s = s[k];
      if (!i.empty()) (*out)[k].i = i[k];
      if (!f.empty()) (*out)[k].f = f[k];
    }
    return !s.empty() ? DType::kString : !i.empty() ? DType::kInt64 : DType::kFloat32;
  }
  const Cell* lookup(const Tensor& x, int64_t k) const {
    if (key_type_ == DType::kString) {
      auto it = by_string_.find(x.data<std::string>()[k]);
      return it == by_string_.end() ? nullptr : &it->second;
    }
    if (key_type_ == DType::kInt64) {
      auto it = by_int_.find(x.data<int64_t>()[k]);
      return it == by_int_.end() ? nullptr : &it->second;
    }
    const float v = x.data<float>()[k];
    if (std::isnan(v)) return nullptr;
    auto it = by_float_.find(v);
    return it == by_float_.end() ? nullptr : &it->second;
  }
  void write(Tensor& y, int64_t k, const Cell& c) const {
    if (value_type_ == DType::kString) y.data<std::string>()[k] = c.s;
    else if (value_type_ == DType::kInt64) y.data<int64_t>()[k] = c.i;
    else y.data<float>()[k] = c.f;
  }

  Cell dflt_;
  std::vector<std::string> classes_;
  std::unordered_map<std::string, int64_t> class_index_;
  DType key_type_ = DType::kUndefined, value_type_ = DType::kUndefined;
  std::unordered_map<std::string, Cell> by_string_;
  std::unordered_map<int64_t, Cell> by_int_;
  std::unordered_map<float, Cell> by_float_;
};

// ---------------------------------------------------------------- LabelEncoder (opset 4)
/// keys_* / values_* lists or keys_tensor / values_tensor (string, int64, float, double; int16
/// values), default_tensor or default_* for keys not found; float keys match NaN inputs to a NaN
/// key. The key/value type pairs are onnxruntime's.
class LabelEncoder4Kernel final : public Kernel {
 public:
  explicit LabelEncoder4Kernel(const KernelInfo& info) {
    keys_ = read_column(info, "keys");
    values_ = read_column(info, "values");
    const DType k = keys_.dtype(), v = values_.dtype();
    const bool pair_ok = (k == DType::kInt64 && v != DType::kInt16) ||
                         (k == DType::kString) ||
                         ((k == DType::kFloat32 || k == DType::kFloat64) &&
                          (v == k || v == DType::kString || v == DType::kInt64));
    if (!pair_ok)
      throw_error<NotImplemented>(info.node().describe(), ": LabelEncoder from ", dtype_name(k), " keys to ",
                                  dtype_name(v), " values (onnxruntime has no such kernel)");
    if (keys_.numel() != values_.numel())
      info.fail("the keys and values attributes have ", keys_.numel(), " and ", values_.numel(),
                " entries: they must have the same length");
    // A repeated key keeps its first value, as onnxruntime's map emplace does.
    for (int64_t i = 0; i < keys_.numel(); ++i) {
      if (k == DType::kString) {
        by_string_.emplace(keys_.data<std::string>()[i], i);
      } else if (k == DType::kInt64) {
        by_int_.emplace(keys_.data<int64_t>()[i], i);
      } else {
        const double d = k == DType::kFloat32 ? double(keys_.data<float>()[i]) : keys_.data<double>()[i];
        if (!std::isnan(d)) by_real_.emplace(d, i);
        else if (nan_ < 0) nan_ = i;
      }
    }
    default_ = read_default(info, v, k);
  }
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    if (dt != keys_.dtype()) ctx.fail("input is ", dtype_name(dt), " but the keys are ", dtype_name(keys_.dtype()));
    ctx.set_output(0, values_.dtype(), ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t at = lookup(x, i);
      copy_element(at < 0 ? default_ : values_, at < 0 ? 0 : at, y, i);
    }
  }

 private:
  // A column of keys or values: exactly one of <what>_strings, _int64s, _floats or _tensor.
  static Tensor read_column(const KernelInfo& info, const std::string& what) {
    const bool s = info.has_attr(what + "_strings"), i = info.has_attr(what + "_int64s"),
               f = info.has_attr(what + "_floats");
    const Tensor* t = info.attr_tensor(what + "_tensor");
    if (int(s) + int(i) + int(f) + int(t != nullptr) != 1)
      info.fail("exactly one of ", what, "_strings, ", what, "_int64s, ", what, "_floats and ", what,
                "_tensor is required");
    if (t) {
      const DType dt = t->dtype();
      if (dt != DType::kString && dt != DType::kInt64 && dt != DType::kFloat32 && dt != DType::kFloat64 &&
          dt != DType::kInt16)
        info.fail("attribute ", what, "_tensor is ", dtype_name(dt), " (string, int64, float, double or int16)");
      return t->reshaped({t->numel()});
    }
    if (s) {
      const auto v = info.attr_strings(what + "_strings", {});
      Tensor r = Tensor::empty(DType::kString, {int64_t(v.size())});
      std::copy(v.begin(), v.end(), r.data<std::string>());
      return r;
    }
    if (i) return Tensor::from_vector<int64_t>({int64_t(info.attr_ints(what + "_int64s").size())}, info.attr_ints(what + "_int64s"));
    const auto v = info.attr_floats(what + "_floats", {});
    return Tensor::from_vector<float>({int64_t(v.size())}, v);
  }
  // One element of the value type: default_tensor, else default_string / default_int64 /
  // default_float (string, int64 and float values), else onnxruntime's fallback.
  static Tensor read_default(const KernelInfo& info, DType v, DType k) {
    if (const Tensor* t = info.attr_tensor("default_tensor")) {
      if (t->dtype() != v || t->numel() != 1)
        info.fail("attribute default_tensor must hold one ", dtype_name(v), " (the values' type), got ",
                  dtype_name(t->dtype()), " ", shape_to_string(t->shape()));
      return t->reshaped({1});
    }
    switch (v) {
      case DType::kString: {
        Tensor r = Tensor::empty(DType::kString, {1});
        r.data<std::string>()[0] = info.attr_string("default_string", "_Unused");
        return r;
      }
      case DType::kInt64: return Tensor::from_vector<int64_t>({1}, {info.attr_int("default_int64", -1)});
      case DType::kFloat32:
        return Tensor::from_vector<float>({1}, {info.attr_float("default_float", k == DType::kFloat32 ? -0.f : 0.f)});
      case DType::kFloat64: return Tensor::from_vector<double>({1}, {-0.0});
      default: return Tensor::from_vector<int16_t>({1}, {int16_t(-1)});
    }
  }
  int64_t lookup(const Tensor& x, int64_t i) const {
    auto find = [](const auto& m, const auto& key) -> int64_t {
      auto it = m.find(key);
      return it == m.end() ? -1 : it->second;
    };
    switch (x.dtype()) {
      case DType::kString: return find(by_string_, x.data<std::string>()[i]);
      case DType::kInt64: return find(by_int_, x.data<int64_t>()[i]);
      default: {
        const double d = x.dtype() == DType::kFloat32 ? double(x.data<float>()[i]) : x.data<double>()[i];
        return std::isnan(d) ? nan_ : find(by_real_, d);
      }
    }
  }
  static void copy_element(const Tensor& from, int64_t at, Tensor& to, int64_t i) {
    if (from.dtype() == DType::kString) {
      to.data<std::string>()[i] = from.data<std::string>()[at];
      return;
    }
    const size_t w = dtype_size(from.dtype());
    std::memcpy(static_cast<char*>(to.raw_data()) + size_t(i) * w, static_cast<const char*>(from.raw_data()) + size_t(at) * w, w);
  }

  Tensor keys_, values_, default_;
  std::unordered_map<std::string, int64_t> by_string_;
  std::unordered_map<int64_t, int64_t> by_int_;
  std::unordered_map<double, int64_t> by_real_;
  int64_t nan_ = -1;
};

}  // namespace

void register_ml(KernelRegistry& r) {
  // Every operator here is at version 1 of ai.onnx.ml, unchanged through opset 5, except
  // LabelEncoder (2: typed keys and values; 4: tensor attributes, double and int16).
  constexpr int64_t kMlMax = 5;
  r.add(kMlDomain, "ArrayFeatureExtractor", 1, kMlMax, ml_factory<ArrayFeatureExtractorKernel>());
  r.add(kMlDomain, "Binarizer", 1, kMlMax, ml_factory<BinarizerKernel>());
  r.add(kMlDomain, "FeatureVectorizer", 1, kMlMax, ml_factory<FeatureVectorizerKernel>());
  r.add(kMlDomain, "Imputer", 1, kMlMax, ml_factory<ImputerKernel>());
  r.add(kMlDomain, "LabelEncoder", 1, 1, [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<LabelEncoderKernel>(i, true);
  });
  r.add(kMlDomain, "LabelEncoder", 2, 3, [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<LabelEncoderKernel>(i, false);
  });
  r.add(kMlDomain, "LabelEncoder", 4, kMlMax, ml_factory<LabelEncoder4Kernel>());
  r.add(kMlDomain, "LinearClassifier", 1, kMlMax, ml_factory<LinearClassifierKernel>());
  r.add(kMlDomain, "LinearRegressor", 1, kMlMax, ml_factory<LinearRegressorKernel>());
  r.add(kMlDomain, "Normalizer", 1, kMlMax, ml_factory<NormalizerKernel>());
  r.add(kMlDomain, "OneHotEncoder", 1, kMlMax, ml_factory<OneHotEncoderKernel>());
  r.add(kMlDomain, "Scaler", 1, kMlMax, ml_factory<ScalerKernel>());
  r.add(kMlDomain, "SVMClassifier", 1, kMlMax, ml_factory<SvmClassifierKernel>());
  r.add(kMlDomain, "SVMRegressor", 1, kMlMax, ml_factory<SvmRegressorKernel>());
}

}  // namespace onnxtrain::kernels::cpu
