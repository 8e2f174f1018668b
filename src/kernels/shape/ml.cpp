#include "kernels/shape/ml.h"

#include <numeric>

namespace onnxtrain::kernels::shape {

PostTransform read_post_transform(const KernelInfo& info) {
  const std::string s = info.attr_string("post_transform", "NONE");
  if (s == "NONE") return PostTransform::kNone;
  if (s == "LOGISTIC") return PostTransform::kLogistic;
  if (s == "SOFTMAX") return PostTransform::kSoftmax;
  if (s == "SOFTMAX_ZERO") return PostTransform::kSoftmaxZero;
  if (s == "PROBIT") return PostTransform::kProbit;
  info.fail("post_transform '", s, "' is not one of NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO, PROBIT");
}

MlRows ml_rows(const PrepareContext& ctx, size_t i) {
  const Shape& s = ctx.input_shape(i);
  if (s.size() == 1) return {1, s[0]};
  if (s.size() == 2) return {s[0], s[1]};
  ctx.fail("input ", i, " has shape ", shape_to_string(s), ": expected [N, C] or [C]");
}

void require_ml_numeric(const PrepareContext& ctx, size_t i) {
  const DType dt = ctx.input_dtype(i);
  require_element_type(ctx, dt,
                       dt == DType::kFloat32 || dt == DType::kFloat64 || dt == DType::kInt64 || dt == DType::kInt32);
}

ClassLabels read_class_labels(const KernelInfo& info) {
  ClassLabels l;
  l.ints = info.attr_ints("classlabels_ints", {});
  l.strings = info.attr_strings("classlabels_strings", {});
  if (!l.ints.empty() && !l.strings.empty()) info.fail("has both classlabels_ints and classlabels_strings");
  l.use_strings = !l.strings.empty();
  return l;
}

namespace {

std::vector<float> required_floats(const KernelInfo& info, const char* name) {
  std::vector<float> v = info.attr_floats(name, {});
  if (v.empty()) info.fail("attribute ", name, " is missing or empty");
  return v;
}

// X of a linear model: numeric, [N, C] or [C], with C * rows == coefficients; returns N.
int64_t check_linear_input(const PrepareContext& ctx, size_t coefficients, int64_t rows) {
  require_ml_numeric(ctx, 0);
  const MlRows r = ml_rows(ctx, 0);
  int64_t need = 0;
  if (__builtin_mul_overflow(r.c, rows, &need) || need != int64_t(coefficients))
    ctx.fail("input has ", r.c, " features but the ", coefficients, " coefficients make ", rows, " rows of ",
             int64_t(coefficients) / rows);
  return r.n;
}

int64_t check_feature_input(const PrepareContext& ctx, int64_t features) {
  require_ml_numeric(ctx, 0);
  const MlRows r = ml_rows(ctx, 0);
  if (r.c != features) ctx.fail("input has ", r.c, " features, the model ", features);
  return r.n;
}

}  // namespace

LinearClassifierSpec::LinearClassifierSpec(const KernelInfo& info)
    : coefficients(required_floats(info, "coefficients")),
      intercepts(required_floats(info, "intercepts")),
      labels(read_class_labels(info)),
      post(read_post_transform(info)),
      targets(int64_t(intercepts.size())) {
  // multi_class (0: one-vs-rest, 1: multinomial) changes nothing in the scores, in onnxruntime as
  // in ONNX's reference: post_transform says how they are normalized.
  const int64_t mc = info.attr_int("multi_class", 0);
  if (mc != 0 && mc != 1) info.fail("multi_class ", mc, " is not 0 or 1");
  if (coefficients.size() % intercepts.size() != 0)
    info.fail(coefficients.size(), " coefficients do not make ", intercepts.size(), " rows (one per intercept)");
  if (targets > 1 && int64_t(labels.size()) != targets)
    info.fail(labels.size(), " class labels for ", targets, " classes (intercepts)");
  if (targets == 1 && labels.size() != 0 && labels.size() != 2)
    info.fail(labels.size(), " class labels for a binary classifier (one intercept): expected 2 or none");
}

int64_t LinearClassifierSpec::check(const PrepareContext& ctx) const {
  return check_linear_input(ctx, coefficients.size(), targets);
}

LinearRegressorSpec::LinearRegressorSpec(const KernelInfo& info)
    : coefficients(required_floats(info, "coefficients")),
      intercepts(info.attr_floats("intercepts", {})),
      post(read_post_transform(info)),
      targets(info.attr_int("targets", 1)) {
  if (targets < 1) info.fail("targets ", targets, " is not positive");
  if (intercepts.empty()) intercepts.assign(size_t(targets), 0.f);
  if (int64_t(intercepts.size()) != targets) info.fail(intercepts.size(), " intercepts for ", targets, " targets");
  if (coefficients.size() % size_t(targets) != 0)
    info.fail(coefficients.size(), " coefficients do not make ", targets, " rows (one per target)");
}

int64_t LinearRegressorSpec::check(const PrepareContext& ctx) const {
  return check_linear_input(ctx, coefficients.size(), targets);
}

SvmKernelSpec read_svm_kernel(const KernelInfo& info) {
  SvmKernelSpec k;
  const std::string t = info.attr_string("kernel_type", "LINEAR");
  if (t == "LINEAR") k.kind = SvmKernel::kLinear;
  else if (t == "POLY") k.kind = SvmKernel::kPoly;
  else if (t == "RBF") k.kind = SvmKernel::kRbf;
  else if (t == "SIGMOID") k.kind = SvmKernel::kSigmoid;
  else info.fail("kernel_type '", t, "' is not one of LINEAR, POLY, RBF, SIGMOID");
  const std::vector<float> p = info.attr_floats("kernel_params", {});
  if (!p.empty() && p.size() != 3)
    info.fail("kernel_params has ", p.size(), " values, expected 3 (gamma, coef0, degree)");
  if (p.size() == 3) {
    k.gamma = p[0];
    k.coef0 = p[1];
    k.degree = p[2];
  }
  return k;
}

SvmClassifierSpec::SvmClassifierSpec(const KernelInfo& info)
    : kernel(read_svm_kernel(info)),
      labels(read_class_labels(info)),
      vectors_per_class(info.attr_ints("vectors_per_class", {})),
      support_vectors(info.attr_floats("support_vectors", {})),
      coefficients(required_floats(info, "coefficients")),
      rho(required_floats(info, "rho")),
      prob_a(info.attr_floats("prob_a", {})),
      prob_b(info.attr_floats("prob_b", {})),
      post(read_post_transform(info)),
      classes(int64_t(labels.size())) {
  if (classes == 0) info.fail("classlabels_ints or classlabels_strings is required");
  if (prob_a.size() != prob_b.size()) info.fail(prob_a.size(), " prob_a values but ", prob_b.size(), " prob_b");
  for (int64_t v : vectors_per_class) {
    if (v < 0) info.fail("vectors_per_class has a negative count ", v);
    starts.push_back(vectors);
    if (__builtin_add_overflow(vectors, v, &vectors)) info.fail("vectors_per_class overflows");
  }
  svc = vectors > 0;
  if (svc) {
    if (int64_t(vectors_per_class.size()) != classes)
      info.fail("vectors_per_class has ", vectors_per_class.size(), " counts for ", classes, " classes");
    if (classes < 2) info.fail("an SVM of support vectors needs at least 2 classes, it has ", classes);
    if (support_vectors.empty() || support_vectors.size() % size_t(vectors) != 0)
      info.fail(support_vectors.size(), " support_vectors values do not make ", vectors, " vectors");
    features = int64_t(support_vectors.size()) / vectors;
    if (int64_t(coefficients.size()) != (classes - 1) * vectors)
      info.fail(coefficients.size(), " coefficients, expected (classes - 1) * vectors = ", (classes - 1) * vectors);
    if (int64_t(rho.size()) != pairs())
      info.fail(rho.size(), " rho values, expected one per pair of classes: ", pairs());
    if (has_proba() && int64_t(prob_a.size()) != pairs())
      info.fail(prob_a.size(), " prob_a values, expected one per pair of classes: ", pairs());
  } else {
    if (has_proba()) info.fail("prob_a and prob_b need support vectors (vectors_per_class)");
    if (coefficients.size() % size_t(classes) != 0)
      info.fail(coefficients.size(), " coefficients do not make ", classes, " rows (one per class)");
    features = int64_t(coefficients.size()) / classes;
    kernel.kind = SvmKernel::kLinear;  // the linear form (liblinear): scores are X W' + rho[0]
  }
}

int64_t SvmClassifierSpec::score_columns() const {
  if (svc && !has_proba()) return classes > 2 ? pairs() : 2;
  return classes;
}

int64_t SvmClassifierSpec::check(const PrepareContext& ctx) const { return check_feature_input(ctx, features); }

SvmRegressorSpec::SvmRegressorSpec(const KernelInfo& info)
    : kernel(read_svm_kernel(info)),
      support_vectors(info.attr_floats("support_vectors", {})),
      coefficients(required_floats(info, "coefficients")),
      rho(required_floats(info, "rho")),
      post(read_post_transform(info)),
      vectors(info.attr_int("n_supports", 0)) {
  const int64_t oc = info.attr_int("one_class", 0);
  if (oc != 0 && oc != 1) info.fail("one_class ", oc, " is not 0 or 1");
  one_class = oc == 1;
  if (vectors < 0) info.fail("n_supports ", vectors, " is negative");
  if (vectors > 0) {
    if (int64_t(coefficients.size()) != vectors)
      info.fail(coefficients.size(), " coefficients for ", vectors, " support vectors (n_supports)");
    if (support_vectors.empty() || support_vectors.size() % size_t(vectors) != 0)
      info.fail(support_vectors.size(), " support_vectors values do not make ", vectors, " vectors");
    features = int64_t(support_vectors.size()) / vectors;
  } else {
    features = int64_t(coefficients.size());
    kernel.kind = SvmKernel::kLinear;  // the linear form: X w + rho[0]
  }
}

int64_t SvmRegressorSpec::check(const PrepareContext& ctx) const { return check_feature_input(ctx, features); }

void check_per_column(const PrepareContext& ctx, size_t count, int64_t columns, const char* what) {
  if (count != 1 && int64_t(count) != columns)
    ctx.fail(what, " has ", count, " values for ", columns, " columns: expected 1 or ", columns);
}

}  // namespace onnxtrain::kernels::shape
