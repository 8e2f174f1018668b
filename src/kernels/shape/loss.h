// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// Classification losses: attributes, validation and output shapes of NegativeLogLikelihoodLoss,
// SoftmaxCrossEntropyLoss and their gradients; the label check every kernel applies at run time.
#pragma once

#include <cstdint>

#include "kernels/shape/common.h"

namespace onnxtrain::kernels::shape {

enum class LossReduction { kNone, kSum, kMean };

/// Attributes and shape checks shared by the losses and their gradients. Inputs `x` (scores
/// [N, C, d1, ...]), x + 1 (labels [N, d1, ...]), x + 2 (optional weights [C]); the scores are
/// viewed as [n, c, d].
struct LossSpec {
  LossReduction reduction = LossReduction::kMean;
  bool has_ignore = false;
  int64_t ignore = 0;
  int64_t n = 0, c = 0, d = 1;

  /// Reads reduction (none, sum or mean; anything else fails) and ignore_index.
  explicit LossSpec(const KernelInfo& info);
  /// Checks the inputs from `x` on (float scores of rank >= 2, int32/int64 labels of the scores'
  /// shape without C, weights of the scores' type and shape [C]) and sets n, c, d; returns the
  /// labels' shape.
  Shape check(const PrepareContext& ctx, size_t x);
  /// The loss's shape: the labels' (reduction none) or a scalar.
  Shape output_shape(const Shape& labels) const { return reduction == LossReduction::kNone ? labels : Shape{}; }
  /// The gradients (dloss, scores or input, labels, weights?): check(ctx, 1), then dloss of the
  /// scores' type, shaped like the labels (reduction none) or of one element.
  void check_grad(const PrepareContext& ctx);
  /// Fails on a label out of [0, C) that is not ignore_index.
  template <class L>
  void check_labels(const RunContext& ctx, const L* labels) const {
    for (int64_t p = 0; p < n * d; ++p) {
      const int64_t t = int64_t(labels[p]);
      if ((t < 0 || t >= c) && !(has_ignore && t == ignore))
        ctx.fail("label ", t, " at position ", p, " is out of range [0, ", c, ")");
    }
  }
};

}  // namespace onnxtrain::kernels::shape
