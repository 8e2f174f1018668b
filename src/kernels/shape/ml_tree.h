// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// ai.onnx.ml TreeEnsembleRegressor and TreeEnsembleClassifier (opsets 1 and 3 of ai.onnx.ml) and
// TreeEnsemble (opset 5):
// their attributes read, validated and compiled once into flat arrays (TreeEnsembleSpec), the
// input check and the output shapes.
//
// Semantics (onnxruntime's): a tree's root is its first node in attribute order; a branch node
// goes to its true child when `x[feature] <mode> threshold` holds, or when the value is NaN and
// nodes_missing_value_tracks_true is 1; a leaf adds its (target or class, weight) pairs to the
// scores. Weights attached to a branch node are ignored (as onnxruntime does: old onnxmltools
// models have them). Thresholds and weights are compared and summed in double for double inputs,
// in float otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/shape/common.h"
#include "kernels/shape/ml.h"

namespace onnxtrain::kernels::shape {

/// A node's comparison (LEAF: no comparison; MEMBER: x equals one of the node's member values).
enum class TreeMode : uint8_t { kLeq, kLt, kGte, kGt, kEq, kNeq, kLeaf, kMember };
enum class TreeAggregate : uint8_t { kSum, kAverage, kMin, kMax };

/// The validated, compiled ensemble. Node indices are positions in the attribute arrays; every
/// branch's children are nodes of its tree, and no path from a root comes back to a node it
/// passed (evaluation always ends at a leaf).
struct TreeEnsembleSpec {
  bool classifier = false;
  int64_t n_targets = 0;  ///< regressor: n_targets; classifier: the number of class labels
  PostTransform post = PostTransform::kNone;
  TreeAggregate aggregate = TreeAggregate::kSum;  ///< classifiers always sum
  // Per node.
  std::vector<TreeMode> mode;
  std::vector<int32_t> feature;
  std::vector<double> threshold;
  std::vector<uint8_t> missing_true;
  std::vector<int32_t> true_child, false_child;  ///< node indices (branches only)
  std::vector<int32_t> leaf_first, leaf_count;   ///< the leaf's weights: [first, first + count)
  // Leaf weights grouped by leaf.
  std::vector<int32_t> weight_target;
  std::vector<double> weight_value;
  std::vector<int32_t> roots;  ///< one per tree, in order of first appearance
  std::vector<double> base_values;
  int64_t max_feature = -1;      ///< the largest feature a branch reads (-1: none)
  int32_t max_feature_node = -1;  ///< a node reading it
  // Classifier.
  std::vector<int64_t> labels_int64;
  std::vector<std::string> labels_string;
  bool binary_case = false;          ///< two labels, weights for one class column only
  bool weights_all_positive = true;  ///< no negative class weight
  // TreeEnsemble (ai.onnx.ml opset 5).
  bool v5 = false;
  DType v5_type = DType::kUndefined;  ///< element type of nodes_splits / leaf_weights: X's and Y's
  std::vector<int32_t> member_first, member_count;  ///< per node: its BRANCH_MEMBER values
  std::vector<double> member_values;

  /// TreeEnsemble of ai.onnx.ml opset 5: reads and validates its attributes (node arrays with
  /// true/false children that are nodes or leaves, tree_roots, leaf_targetids/leaf_weights,
  /// membership_values of the BRANCH_MEMBER nodes, the integer aggregate_function and
  /// post_transform) into the same compiled form: nodes first, then one LEAF node per leaf.
  struct V5 {};
  TreeEnsembleSpec(const KernelInfo& info, V5);

  /// Reads and validates the attributes of `info`'s node (a TreeEnsembleRegressor or
  /// TreeEnsembleClassifier); the `*_as_tensor` attributes from ai.onnx.ml opset 3. Fails
  /// (InvalidModel naming the node, the attribute and the tree node) on any inconsistency;
  /// NotImplemented for a classifier with a single class label.
  TreeEnsembleSpec(const KernelInfo& info, bool classifier);

  /// Checks input 0 (float, double, int64 or int32, [N, C] or [C]: one row) against the feature
  /// ids and declares the outputs: regressor Y float [N, n_targets]; classifier Y labels [N]
  /// (int64 or string) and Z float [N, classes]; TreeEnsemble (v5) Y of X's type (float or
  /// double, that of its tensor attributes) [N, n_targets]. Returns N.
  int64_t prepare(PrepareContext& ctx) const;
};

}  // namespace onnxtrain::kernels::shape
