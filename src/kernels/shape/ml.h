// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// The ai.onnx.ml operators (scikit-learn models as skl2onnx converts them): their attributes,
// validated once (lengths against each other: coefficients, intercepts, class labels, support
// vectors), the [N, C] view of their inputs and their output shapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/shape/common.h"

namespace onnxtrain::kernels::shape {

/// The ai.onnx.ml domain.
inline constexpr const char* kMlDomain = "ai.onnx.ml";

/// post_transform of the classifiers and regressors.
enum class PostTransform { kNone, kLogistic, kSoftmax, kSoftmaxZero, kProbit };
/// Reads post_transform (default NONE); fails on a name the schemas do not define.
PostTransform read_post_transform(const KernelInfo& info);

/// Input i seen as rows: rank 1 is one row of dim 0, rank 2 is [N, C]; other ranks fail.
struct MlRows {
  int64_t n = 0, c = 0;
};
MlRows ml_rows(const PrepareContext& ctx, size_t i);
/// Fails (NotImplemented) unless input i is float, double, int64 or int32: the numeric inputs the
/// ai.onnx.ml schemas allow.
void require_ml_numeric(const PrepareContext& ctx, size_t i);

/// classlabels_ints or classlabels_strings (at most one of them).
struct ClassLabels {
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  bool use_strings = false;
  size_t size() const { return use_strings ? strings.size() : ints.size(); }
  DType dtype() const { return use_strings ? DType::kString : DType::kInt64; }
};
ClassLabels read_class_labels(const KernelInfo& info);

/// LinearClassifier: coefficients [targets, C], intercepts [targets] and the labels.
struct LinearClassifierSpec {
  std::vector<float> coefficients, intercepts;
  ClassLabels labels;
  PostTransform post = PostTransform::kNone;
  int64_t targets = 0;
  explicit LinearClassifierSpec(const KernelInfo& info);
  /// Checks X ([N, C] or [C], numeric, C * targets coefficients) and returns N.
  int64_t check(const PrepareContext& ctx) const;
  /// Columns of the scores: targets, or 2 for one target with two labels.
  int64_t score_columns() const { return targets == 1 && labels.size() == 2 ? 2 : targets; }
};

/// LinearRegressor: coefficients [targets, C], intercepts [targets] (default zeros).
struct LinearRegressorSpec {
  std::vector<float> coefficients, intercepts;
  PostTransform post = PostTransform::kNone;
  int64_t targets = 1;
  explicit LinearRegressorSpec(const KernelInfo& info);
  int64_t check(const PrepareContext& ctx) const;  ///< as LinearClassifierSpec::check
};

/// The kernel of the SVM operators.
enum class SvmKernel { kLinear, kPoly, kRbf, kSigmoid };
struct SvmKernelSpec {
  SvmKernel kind = SvmKernel::kLinear;
  float gamma = 0.f, coef0 = 0.f, degree = 0.f;
};
/// kernel_type (default LINEAR) and kernel_params ([gamma, coef0, degree], or none: zeros).
SvmKernelSpec read_svm_kernel(const KernelInfo& info);

/// SVMClassifier. With vectors_per_class: the SVC form (support vectors [V, F], coefficients
/// [classes - 1, V], rho one per pair of classes); without: the linear form (coefficients
/// [classes, F], rho[0] added to every score).
struct SvmClassifierSpec {
  SvmKernelSpec kernel;
  ClassLabels labels;
  std::vector<int64_t> vectors_per_class, starts;
  std::vector<float> support_vectors, coefficients, rho, prob_a, prob_b;
  PostTransform post = PostTransform::kNone;
  int64_t classes = 0, vectors = 0, features = 0;
  bool svc = false;
  explicit SvmClassifierSpec(const KernelInfo& info);
  int64_t pairs() const { return classes * (classes - 1) / 2; }
  bool has_proba() const { return !prob_a.empty(); }
  /// Columns of the scores output (onnxruntime's): classes with probabilities or in the linear
  /// form, else one per pair of classes (2 for two classes).
  int64_t score_columns() const;
  int64_t check(const PrepareContext& ctx) const;  ///< X [N, features] or [features]; returns N
};

/// SVMRegressor: n_supports support vectors (SVC form) or coefficients [F] (linear form).
struct SvmRegressorSpec {
  SvmKernelSpec kernel;
  std::vector<float> support_vectors, coefficients, rho;
  PostTransform post = PostTransform::kNone;
  int64_t vectors = 0, features = 0;
  bool one_class = false;
  explicit SvmRegressorSpec(const KernelInfo& info);
  int64_t check(const PrepareContext& ctx) const;  ///< X [N, features] or [features]; returns N
};

/// Scaler's offset and scale, Imputer's imputed values: one value for every column or one per
/// column; fails naming `what` otherwise.
void check_per_column(const PrepareContext& ctx, size_t count, int64_t columns, const char* what);

}  // namespace onnxtrain::kernels::shape
