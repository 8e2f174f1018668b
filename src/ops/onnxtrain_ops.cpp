#include "ops/onnxtrain_ops.h"

#include <algorithm>

#include "onnxtrain/error.h"
#include "onnxtrain/tensor.h"

namespace onnxtrain::ops {

namespace {

constexpr int kAny = -1;

// The fields every row has.
OpDef row(std::string name, int min_in, int max_in, int min_out, int max_out, TypeRule rule, std::string doc,
          std::vector<size_t> host, bool internal = false) {
  OpDef d;
  d.name = std::move(name);
  d.min_inputs = min_in, d.max_inputs = max_in, d.min_outputs = min_out, d.max_outputs = max_out;
  d.rule = rule;
  d.host_inputs = std::move(host);
  d.session_internal = internal;
  d.doc = std::move(doc);
  return d;
}

// A row typed like inputs: `like[k]` for output k (the last repeating).
OpDef like(std::string name, int min_in, int max_in, int min_out, int max_out, std::vector<size_t> from,
           std::string doc, std::vector<size_t> host = {}, bool same_shape = false) {
  OpDef d = row(std::move(name), min_in, max_in, min_out, max_out, TypeRule::kLikeInputs, std::move(doc), std::move(host));
  d.like = std::move(from);
  d.same_shape = same_shape;
  return d;
}

// An elementwise row: outputs typed and shaped like input `from`.
OpDef elementwise(std::string name, int min_in, int max_in, int max_out, size_t from, std::string doc) {
  return like(std::move(name), min_in, max_in, 1, max_out, {from}, std::move(doc), {}, true);
}

// A blocked-layout inference operator: one output typed like input 0; only a session places it.
OpDef blocked(std::string name, int min_in, int max_in, std::string doc) {
  OpDef d = like(std::move(name), min_in, max_in, 1, 1, {0}, std::move(doc));
  d.session_internal = true;
  return d;
}

OpDef fixed(std::string name, int min_in, int min_out, int max_out, std::vector<FixedType> types, std::string doc,
            std::vector<size_t> host = {}, bool internal = false) {
  OpDef d = row(std::move(name), min_in, kAny, min_out, max_out, TypeRule::kFixed, std::move(doc), std::move(host), internal);
  d.fixed = std::move(types);
  return d;
}

OpDef trailing(std::string name, int min_in, std::string doc, bool internal, std::vector<size_t> host = {}) {
  return row(std::move(name), min_in, kAny, 1, kAny, TypeRule::kLikeTrailing, std::move(doc), std::move(host), internal);
}

OpDef groups(std::string name, size_t lead, std::vector<size_t> host, std::string doc,
             const OptimizerSpec* optimizer = nullptr) {
  OpDef d = row(std::move(name), int(lead) + 2, kAny, 1, kAny, TypeRule::kGroups, std::move(doc), std::move(host));
  d.lead = lead;
  d.optimizer = optimizer;
  return d;
}

std::vector<OpDef> build() {
  const FixedType f64_1{DType::kFloat64, {1}}, bool_1{DType::kBool, {1}}, i64_1{DType::kInt64, {1}};
  std::vector<OpDef> t = {
      // Elementwise forward and backward.
      elementwise("Gelu", 1, 1, 2, 0, "(X) -> Y[, A]: the exact GELU, Y = X (1 + erf(X / sqrt 2)) / 2; A = 1 + erf(X / sqrt 2) kept for GeluGrad"),
      elementwise("GeluGrad", 2, 3, 1, 1, "(dY, X[, A]) -> dX = dY (A / 2 + X phi(X))"),
      elementwise("ReluGrad", 2, 2, 1, 0, "(dY, Y) -> dX = Y > 0 ? dY : 0"),
      elementwise("SoftmaxGrad", 2, 2, 1, 0, "(dY, Y) -> dX = Y (dY - sum(dY Y)) over attribute axis"),
      elementwise("LogSoftmaxGrad", 2, 2, 1, 0, "(dY, Y) -> dX = dY - exp(Y) sum(dY) over attribute axis"),
      like("DropoutGrad", 2, 4, 1, 1, {0}, "(dY, mask[, ratio, training_mode]) -> dX = dY mask / (1 - ratio)", {2, 3}),
      // Shapes, movement, indexing.
      like("SumToShape", 2, 2, 1, 1, {0}, "(G, shape) -> Y: G summed over its broadcast axes down to shape", {1}),
      like("SliceGrad", 4, 6, 1, 1, {0}, "(dY, shape(X), starts, ends[, axes, steps]) -> dX: zeros with dY at the slice",
           {1, 2, 3, 4, 5}),
      like("SliceGradSum", 6, 21, 1, 1, {1},
           "(shape(X), then per slice dY, starts, ends, axes, steps; 2 to 4 slices) -> dX: the sum of their SliceGrads "
           "(copies alone where the slices tile X)",
           {0, 2, 3, 4, 5, 7, 8, 9, 10, 12, 13, 14, 15, 17, 18, 19, 20}),
      like("PadGrad", 3, 4, 1, 1, {0}, "(dY, shape(X), pads[, axes]) -> dX: dY cropped (reflect/edge: folded back); attribute mode",
           {1, 2, 3}),
      like("GatherGrad", 3, 3, 1, 1, {2}, "(shape(X), indices, dY) -> dX: dY added at the gathered rows (axis); duplicates accumulate", {0}),
      like("GatherElementsGrad", 3, 3, 1, 1, {2}, "(shape(X), indices, dY) -> dX: dY added at the gathered elements (axis)", {0}),
      like("GatherNDGrad", 3, 3, 1, 1, {2}, "(shape(X), indices, dY) -> dX: dY added at the gathered slices (batch_dims)", {0}),
      like("ResizeGrad", 3, 5, 1, 1, {0},
           "(dY, roi, scales, sizes, shape(X)) -> dX (forward opset 10: dY, scales, shape(X)): the transposed interpolation of "
           "Resize (its attributes, forward_opset)",
           {1, 2, 3, 4}),
      // Products, convolution, pooling.
      like("FusedMatMul", 2, 3, 1, 1, {0},
           "(A, B[, C]) -> alpha op(A) @ op(B) [+ C on every row, C of shape [N], alpha 1], op transposing the last "
           "two axes (transA, transB) after transBatchA / transBatchB moved a rank-3 operand's first axis behind its "
           "batch axis; transBatchY: the product stored with its row axis first"),
      like("ConvGrad", 3, 3, 1, 3, {1, 2, 2}, "(dY, X, W) -> dX, dW, dB (attributes of the Conv; unneeded outputs unnamed)"),
      like("ConvTransposeGrad", 3, 3, 1, 3, {1, 2, 2}, "(dY, X, W) -> dX, dW, dB (attributes of the ConvTranspose)"),
      // oneDNN's blocked activation layout (inference sessions' runtime::block_conv_layouts).
      blocked("NchwcConv", 2, 4, "(X, W[, B, Z]) -> Y: com.microsoft.FusedConv over blocked X (or plain, few channels), Z and Y "
              "(float32 2-D; [N, C, H, W] stored as [N, ceil(C/16), H, W, 16], padded channels zero; activation also SiLU and HardSwish)"),
      blocked("ReorderToNchwc", 1, 1, "(X[N, C, H, W]) -> Y[N, ceil(C/16), H, W, 16]: the blocked layout, padded channels zero"),
      blocked("ReorderFromNchwc", 1, 1, "(X[N, ceil(C/16), H, W, 16]) -> Y[N, C, H, W]: the plain layout (attribute channels = C)"),
      blocked("NchwcMaxPool", 1, 1, "(X) -> Y: MaxPool (its attributes) over blocked X and Y"),
      blocked("NchwcAveragePool", 1, 1, "(X) -> Y: AveragePool (its attributes) over blocked X and Y"),
      blocked("NchwcChannels", 1, kAny, "(X_0, ...) -> Y[N, ceil(M/16), H, W, 16]: channel m of Y is channel channels[m] of the "
              "blocked inputs' channels end to end (attributes channels, input_channels); a blocked Concat, channel Slice or shuffle"),
      blocked("NchwcGlobalAveragePool", 1, 1, "(X) -> Y[N, ceil(C/16), 1, 1, 16]: GlobalAveragePool over blocked X"),
      like("MaxPoolGrad", 2, 3, 1, 1, {1}, "(dY, X[, indices]) -> dX: dY routed to each window's maximum (relu_mask = 1: dX masked by X > 0)"),
      like("AveragePoolGrad", 2, 2, 1, 1, {1}, "(dY, X) -> dX: dY spread over each window (count_include_pad)"),
      like("LpPoolGrad", 3, 3, 1, 1, {1}, "(dY, X, Y) -> dX = dY |x|^(p-1) sign(x) / y^(p-1) per window"),
      like("GlobalMaxPoolGrad", 2, 2, 1, 1, {1}, "(dY, X) -> dX: dY routed to each channel's maximum"),
      like("GlobalAveragePoolGrad", 2, 2, 1, 1, {1}, "(dY, X) -> dX = dY / spatial size, broadcast"),
      like("GlobalLpPoolGrad", 3, 3, 1, 1, {1}, "(dY, X, Y) -> dX, as LpPoolGrad over the whole spatial extent"),
      // Normalization, losses.
      like("BatchNormalizationGrad", 3, 5, 1, 5, {1, 2, 2, 3, 4},
           "(dY, X, scale[, mean, var]) -> dX, dscale, dB[, dmean, dvar] (batch statistics when mean and var are absent)"),
      like("LayerNormalizationGrad", 5, 5, 1, 3, {1}, "(dY, X, Scale, Mean, InvStdDev) -> dX, dScale, dB (attribute axis)"),
      like("LRNGrad", 2, 2, 1, 1, {1}, "(dY, X) -> dX (LRN's attributes)"),
      like("SoftmaxCrossEntropyLossGrad", 3, 4, 1, 1, {1}, "(dloss, log_prob, labels[, weights]) -> dscores (reduction, ignore_index)"),
      like("NegativeLogLikelihoodLossGrad", 3, 4, 1, 1, {1}, "(dloss, input, labels[, weights]) -> dinput (reduction, ignore_index)"),
      // Recurrent networks: the forward with its training reserve, and the backward from it.
      like("LSTMTrain", 3, 8, 1, 4, {0}, "LSTM's inputs -> LSTM's outputs, then the reserve LSTMGrad reads (LSTM's attributes, layout at any opset)"),
      like("GRUTrain", 3, 6, 1, 3, {0}, "GRU's inputs -> GRU's outputs, then the reserve GRUGrad reads"),
      like("RNNTrain", 3, 6, 1, 3, {0}, "RNN's inputs -> RNN's outputs, then the reserve RNNGrad reads"),
      like("LSTMGrad", 3, kAny, 1, kAny, {0}, "(LSTM's inputs, reserve, dY, dY_h, dY_c) -> gradients of LSTM's inputs"),
      like("GRUGrad", 3, kAny, 1, kAny, {0}, "(GRU's inputs, reserve, dY, dY_h) -> gradients of GRU's inputs"),
      like("RNNGrad", 3, kAny, 1, kAny, {0}, "(RNN's inputs, reserve, dY, dY_h) -> gradients of RNN's inputs"),
      // The training step.
      groups(kAccumulateGradients, 1, {0}, "(reset, A1..An, G1..Gn) -> A1'..An' in place: A' = reset ? G : A + G"),
      fixed(kGlobalNormClip, 1, 1, 2, {f64_1},
            "(G1..Gn) -> scale[, norm] (float64 [1]): norm = sqrt(sum g^2), scale = min(1, max_norm / (norm + 1e-6))"),
      fixed(kLossScaleCheck, 2, 2, 2, {f64_1, bool_1},
            "(loss_scale, G1..Gn) -> grad_scale (float64 [1]), all_finite (bool [1]): 1 / loss_scale times the clip coefficient (max_norm > 0)",
            {0}),
      // Data parallelism: only a TrainingSession places these, in the graph it builds.
      fixed("GradientReduceStart", 2, 1, 1, {i64_1},
            "(contribution, G1..Gn) -> token (int64 [1]): queues the reduction of the bucket over the ranks (mode mean | adasum)",
            {0}, true),
      trailing("GradientReduceWait", 2, "(token, G1..Gn) -> R1..Rn: waits for the token's reduction (the G give the shapes)", true, {0}),
      trailing("ZeroAllGather", 1, "(P1..Pp, W1..Wn) -> W1'..Wn' in place: ZeRO stage 1's allgather of every rank's updated block (attribute pieces = p)",
               true),
  };
  for (const OptimizerSpec& s : optimizer_specs())
    t.push_back(groups(s.name, kOptimizerFirstWeightInput, {kOptimizerLrInput, kOptimizerStepInput, kOptimizerGradScaleInput},
                       "(lr, step, grad_scale[, update_signal], W1..Wn, G1..Gn, states) -> W', states' in place: " + s.doc,
                       &s));
  std::sort(t.begin(), t.end(), [](const OpDef& a, const OpDef& b) { return a.name < b.name; });
  return t;
}

OpDef flag_then_like(std::string name, int min_in, int max_in, int max_out, std::vector<size_t> from, std::string doc,
                     std::vector<size_t> host = {}) {
  OpDef d = row(std::move(name), min_in, max_in, 1, max_out, TypeRule::kFlagThenLike, std::move(doc), std::move(host));
  d.like = std::move(from);
  d.same_shape = true;
  return d;
}

}  // namespace

const std::vector<std::string>& shared_with_microsoft() {
  static const std::vector<std::string> names = {"ConvGrad", "DropoutGrad", "FusedMatMul", "GatherGrad", "GeluGrad",
                                                 "LayerNormalizationGrad", "ReluGrad", "SoftmaxCrossEntropyLossGrad"};
  return names;
}

namespace {

// onnxruntime's contrib operators of its training artifacts (training_op_defs.cc), as onnxtrain
// implements them.
std::vector<OpDef> build_microsoft() {
  std::vector<OpDef> t = {
      flag_then_like("InPlaceAccumulatorV2", 2, 3, 2, {0},
                     "(accumulation_buffer, value[, overwrite_flag]) -> updated_flag[, accumulation_buffer_out]: the "
                     "buffer becomes value (overwrite_flag) or buffer + value, in place",
                     {2}),
      flag_then_like("AdamWOptimizer", 6, 7, 4, {2, 4, 5},
                     "(lr, step, weights, gradients, momentums_1, momentums_2[, update_signal]: sequences) -> "
                     "updated_flag[, updated weights, momentums_1, momentums_2]: AdamW in place (adam_mode 0: "
                     "PyTorch's, 1: Hugging Face's; correct_bias)",
                     {0, 1, 6}),
      like("SoftmaxCrossEntropyLossInternal", 2, 4, 1, 2, {0},
           "(scores, labels[, weights, ignore_index]) -> loss[, log_prob]: SoftmaxCrossEntropyLoss with ignore_index "
           "an int64 input (reduction)",
           {3}),
      like("SoftmaxCrossEntropyLossInternalGrad", 3, 5, 1, 1, {1},
           "(dloss, log_prob, labels[, weights, ignore_index]) -> dscores (reduction)", {4}),
      like("InplaceClipGradNorm", 1, 1, 1, 1, {0},
           "(gradients: sequence) -> clipped_gradients: every gradient times min(max_norm / (norm + 1e-6), 1), "
           "norm the global L2 norm (norm_type \"fro\"), in place"),
      // onnxruntime's Softmax gradients: SoftmaxGrad / LogSoftmaxGrad for opsets < 13 (coerced to
      // 2D at axis, default 1), the _13 forms for 13+ (one axis, default -1).
      elementwise("SoftmaxGrad", 2, 2, 1, 0, "(dY, Y) -> dX = Y (dY - sum(dY Y)), every dim from axis on (default 1)"),
      elementwise("LogSoftmaxGrad", 2, 2, 1, 0, "(dY, Y) -> dX = dY - exp(Y) sum(dY), every dim from axis on (default 1)"),
      elementwise("SoftmaxGrad_13", 2, 2, 1, 0, "(dY, Y) -> dX = Y (dY - sum(dY Y)) along axis (default -1)"),
      elementwise("LogSoftmaxGrad_13", 2, 2, 1, 0, "(dY, Y) -> dX = dY - exp(Y) sum(dY) along axis (default -1)"),
      like("FusedConv", 2, 4, 1, 1, {0},
           "(X, W[, B, Z]) -> Y = activation(Conv(X, W, B) + Z), Conv's attributes plus activation (Relu, LeakyRelu, "
           "Clip, Sigmoid, Tanh, HardSigmoid) and activation_params; what inference sessions fuse Conv [+ Add] + "
           "Relu / Clip into"),
      like("SparseToDenseMatMul", 2, 2, 1, 1, {1},
           "(A, B) -> Y = alpha op(A) @ op(B) (transA, transB; 2-D): onnxruntime's product of a sparse A (COO or "
           "CSR) with a dense B; A is densified where a session takes it in (docs/python-api.md)"),
      flag_then_like("SGDOptimizerV2", 3, 4, 2, {1},
                     "(lr, weights, gradients[, update_signal]: sequences) -> update_completed[, updated weights]: "
                     "w = w - lr g in place",
                     {0, 3}),
  };
  for (const std::string& name : shared_with_microsoft()) {
    t.push_back(*find_op(name));
    if (name == "FusedMatMul") {  // onnxruntime's schema: no bias input
      t.back().max_inputs = 2;
      t.back().doc =
          "(A, B) -> alpha op(A) @ op(B), op transposing the last two axes (transA, transB) after transBatchA / "
          "transBatchB moved a rank-3 operand's first axis behind its batch axis";
    }
  }
  std::sort(t.begin(), t.end(), [](const OpDef& a, const OpDef& b) { return a.name < b.name; });
  return t;
}

// "0, 2, 3": input positions for the generated page.
std::string positions(const std::vector<size_t>& v) {
  std::string s;
  for (size_t x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

std::string type_rule(const OpDef& d) {
  switch (d.rule) {
    case TypeRule::kLikeInputs:
      return (d.like.size() == 1 ? "like input " : "like inputs ") + positions(d.like) + (d.same_shape ? " (shape too)" : "");
    case TypeRule::kFixed: {
      std::string s;
      for (const auto& f : d.fixed) s += (s.empty() ? "" : "; ") + std::string(dtype_name(f.dtype)) + " " + shape_to_string(f.shape);
      return s;
    }
    case TypeRule::kLikeTrailing: return "like the last inputs";
    case TypeRule::kGroups: return "like the groups after input " + std::to_string(d.lead - 1);
    case TypeRule::kFlagThenLike: return "bool [1]; then like inputs " + positions(d.like) + " (shape too)";
  }
  return "";
}

}  // namespace

std::string count_range(int lo, int hi) {
  if (hi == kAny) return std::to_string(lo) + " or more";
  return lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi);
}

const std::vector<OpDef>& onnxtrain_ops() {
  static const std::vector<OpDef> t = build();
  return t;
}

const std::vector<OpDef>& microsoft_ops() {
  static const std::vector<OpDef> t = build_microsoft();
  return t;
}

namespace {

const OpDef* find_in(const std::vector<OpDef>& t, const std::string& name) {
  auto it = std::lower_bound(t.begin(), t.end(), name, [](const OpDef& d, const std::string& n) { return d.name < n; });
  return it != t.end() && it->name == name ? &*it : nullptr;
}

}  // namespace

const OpDef* find_op(const std::string& name) { return find_in(onnxtrain_ops(), name); }

const OpDef* find_op(const std::string& domain, const std::string& name) {
  if (domain == kDomain) return find_in(onnxtrain_ops(), name);
  if (domain == kMicrosoftDomain) return find_in(microsoft_ops(), name);
  return nullptr;
}

std::string operators_markdown() {
  std::string s =
      "# The " + std::string(kDomain) + " operators\n\n"
      "Generated from the operator table (`src/ops/onnxtrain_ops.cpp`, `operators_markdown()`): do not edit by hand. "
      "`OpTable.DocsAreCurrent` fails when this page differs from the table; `ONNXTRAIN_WRITE_DOCS=1 "
      "build/onnxtrain_tests --gtest_filter=OpTable.DocsAreCurrent` rewrites it.\n\n"
      "Every operator has opset " + std::to_string(kOpset) + " of domain `" + kDomain +
      "`. Inputs and outputs: counts accepted; types: how the outputs are typed; host: inputs read in host "
      "memory on any device; session: only a TrainingSession places it (refused in a loaded model).\n\n"
      "| operator | inputs | outputs | types | host | session | what it computes |\n"
      "|---|---|---|---|---|---|---|\n";
  auto rows = [&](const std::vector<OpDef>& table) {
    for (const OpDef& d : table)
      s += "| " + d.name + " | " + count_range(d.min_inputs, d.max_inputs) + " | " +
           count_range(d.min_outputs, d.max_outputs) + " | " + type_rule(d) + " | " + positions(d.host_inputs) + " | " +
           (d.session_internal ? "yes" : "") + " | " + d.doc + " |\n";
  };
  rows(onnxtrain_ops());
  s += "\n## The " + std::string(kMicrosoftDomain) + " operators onnxtrain implements\n\n"
       "onnxruntime's contrib operators that its on-device training artifacts contain, with onnxruntime's schemas and "
       "semantics (opset 1 of `" + kMicrosoftDomain + "`), described by the second table of the same file "
       "(`microsoft_ops()`).\n\n"
       "| operator | inputs | outputs | types | host | session | what it computes |\n"
       "|---|---|---|---|---|---|---|\n";
  rows(microsoft_ops());
  return s;
}

}  // namespace onnxtrain::ops
