// The post transforms of the ai.onnx.ml operators (linear models, SVMs, tree ensembles), in float
// as onnxruntime computes them, and the kernel factory: one definition for every ml kernel file.
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/shape/ml.h"

namespace onnxtrain::kernels::cpu {

/// 1 / (1 + e^-v), computed on |v| (no overflow).
float ml_logistic(float v);
/// sqrt(2) erf^-1(2p - 1) by Winitzki's approximation (a = 0.147): onnxruntime's PROBIT.
float ml_probit(float p);
/// Applies post_transform to one row of n scores in place. A single score is transformed only by
/// PROBIT, as onnxruntime does (its LOGISTIC and softmaxes leave one score as it is).
void ml_transform_row(float* s, int64_t n, shape::PostTransform t);

/// The factory of an ml kernel class constructed from its KernelInfo.
template <class K>
KernelFactory ml_factory() {
  return [](const KernelInfo& info) -> std::unique_ptr<Kernel> { return std::make_unique<K>(info); };
}

}  // namespace onnxtrain::kernels::cpu
