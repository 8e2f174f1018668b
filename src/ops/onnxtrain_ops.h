// The com.onnxtrain operators: one row each — name, input and output counts, how the outputs are
// typed, the inputs read in host memory, whether only a session may place it, the optimizer it
// runs, and one line of documentation. Everything that needs an operator's facts reads them here:
// the emitter and type inference (src/ir: output types), the loader (session-internal operators
// refused in loaded models), the kernel registry (host inputs, input and output counts checked
// before a kernel is made) and docs/operators.md (generated from operators_markdown(), checked by a
// test). Adding a com.onnxtrain operator: its row here, its kernel beside the forward one in
// src/kernels/cpu/<family>.cpp, its rule in src/autodiff/rules.cpp, its test (docs/adding-an-operator.md).
// A second table lists the com.microsoft operators onnxtrain implements (onnxruntime's contrib
// schemas: what onnxruntime's training artifacts contain), read the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onnxtrain/dtype.h"
#include "ops/optimizers.h"

namespace onnxtrain::ops {

/// onnxtrain's operator domain: gradients, fused forms and the training step. The one place the
/// string is written; every other use names this constant.
inline constexpr const char* kDomain = "com.onnxtrain";
/// onnxruntime's contrib domain (its training artifacts' operators). The one place the string is
/// written.
inline constexpr const char* kMicrosoftDomain = "com.microsoft";
/// The opset of every com.onnxtrain operator.
inline constexpr int64_t kOpset = 1;

/// How an operator's outputs are typed from its inputs.
enum class TypeRule : uint8_t {
  /// Output k has the element type of input like[min(k, like.size() - 1)] (and its shape too when
  /// same_shape: elementwise operators).
  kLikeInputs,
  /// Output k is fixed[min(k, fixed.size() - 1)] (element type and shape).
  kFixed,
  /// Output k is typed like input (inputs - outputs + k): the outputs update the last inputs.
  kLikeTrailing,
  /// The training step's groups: `lead` inputs (one more for an optimizer with update_signal = 1),
  /// then groups of n tensors (n = inputs - lead - outputs); output k is typed like the first group's
  /// tensor k % n for k < n, like group (k / n + 1)'s tensor k % n after (the states).
  kGroups,
  /// Output 0 is a bool [1] flag (onnxruntime's in-place operators: "updated"); output k >= 1 is
  /// typed like input like[min(k - 1, like.size() - 1)] (its shape too).
  kFlagThenLike,
};

/// A fixed output type: element type and shape.
struct FixedType {
  DType dtype = DType::kUndefined;
  std::vector<int64_t> shape;
};

/// One com.onnxtrain operator.
struct OpDef {
  std::string name;
  int min_inputs = 0, max_inputs = -1;    ///< input count range (-1: any number)
  int min_outputs = 1, max_outputs = -1;  ///< output count range (-1: any number)
  TypeRule rule = TypeRule::kLikeInputs;
  std::vector<size_t> like;          ///< kLikeInputs: the input each output is typed like
  bool same_shape = false;           ///< kLikeInputs: outputs keep that input's shape
  std::vector<FixedType> fixed;      ///< kFixed
  size_t lead = 0;                   ///< kGroups: inputs before the first group
  std::vector<size_t> host_inputs;   ///< inputs read in host memory (shapes, indices of the step)
  bool session_internal = false;     ///< only a session places it in the graph it builds
  const OptimizerSpec* optimizer = nullptr;  ///< optimizer rows: algorithm, states, attributes
  std::string doc;                   ///< "(inputs) -> outputs: what it computes"
};

/// Every com.onnxtrain operator, sorted by name.
const std::vector<OpDef>& onnxtrain_ops();
/// The row of com.onnxtrain operator `name`, or null.
const OpDef* find_op(const std::string& name);
/// The com.microsoft operators onnxtrain implements, sorted by name.
const std::vector<OpDef>& microsoft_ops();
/// com.onnxtrain operators that onnxruntime's com.microsoft domain has under the same name, with
/// the same inputs, outputs, attributes and semantics (its gradient builders' *Grad operators):
/// microsoft_ops() has their rows and the CPU provider runs them with the com.onnxtrain kernels.
const std::vector<std::string>& shared_with_microsoft();
/// The row of operator `name` of `domain` (com.onnxtrain or com.microsoft), or null.
const OpDef* find_op(const std::string& domain, const std::string& name);
/// "2", "2 to 4" or "3 or more" (max -1: any number), for counts in messages and docs.
std::string count_range(int lo, int hi);
/// The documentation of the tables (docs/operators.md): a markdown page with one row per operator.
std::string operators_markdown();

}  // namespace onnxtrain::ops
