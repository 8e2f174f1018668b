#include "kernels/shape/optimizer.h"

#include <cmath>

namespace onnxtrain::kernels::shape {

using ops::kOptimizerGradScaleInput;
using ops::kOptimizerLrInput;
using ops::kOptimizerStepInput;
using ops::kOptimizerUpdateSignalAttr;
using ops::kOptimizerUpdateSignalInput;

namespace {

bool one_element(const Shape& s) { return s.empty() || (s.size() == 1 && s[0] == 1); }

void check_scalar(const PrepareContext& ctx, size_t i, const char* what, DType dt) {
  if (!ctx.has_input(i)) ctx.fail(what, " (input ", i, ") is required");
  if (ctx.input_dtype(i) != dt || !one_element(ctx.input_shape(i)))
    ctx.fail(what, " (input ", i, ") must be ", dtype_name(dt), " of shape [] or [1], got ",
             dtype_name(ctx.input_dtype(i)), shape_to_string(ctx.input_shape(i)));
}

void check_float_tensor(const PrepareContext& ctx, size_t i, const std::string& what) {
  if (!ctx.has_input(i)) ctx.fail(what, " (input ", i, ") is missing");
  const DType dt = ctx.input_dtype(i);
  if (dt != DType::kFloat32 && dt != DType::kFloat64)
    ctx.fail(what, " (input ", i, ") must be float or double, got ", dtype_name(dt));
}

void check_like(const PrepareContext& ctx, size_t i, const std::string& what, size_t ref, const std::string& ref_what) {
  if (!ctx.has_input(i)) ctx.fail(what, " (input ", i, ") is missing");
  if (ctx.input_dtype(i) != ctx.input_dtype(ref) || ctx.input_shape(i) != ctx.input_shape(ref))
    ctx.fail(what, " (input ", i, ") is ", dtype_name(ctx.input_dtype(i)), shape_to_string(ctx.input_shape(i)), ", ",
             ref_what, " is ", dtype_name(ctx.input_dtype(ref)), shape_to_string(ctx.input_shape(ref)));
}

void require_named_outputs(const PrepareContext& ctx, size_t expected) {
  if (ctx.num_outputs() != expected) ctx.fail("expects ", expected, " outputs, got ", ctx.num_outputs());
  for (size_t k = 0; k < expected; ++k)
    if (!ctx.has_output(k)) ctx.fail("output ", k, " must be named (every output overwrites its input in place)");
}

std::string state_list(const ops::OptimizerSpec& spec) {
  std::string r;
  for (const auto& s : spec.states) r += (r.empty() ? "" : ", ") + s;
  return r;
}

// The attribute names of an operator whose only attribute is max_norm.
void check_max_norm_only(const KernelInfo& info, const char* op) {
  for (const auto& a : info.node().attrs)
    if (a.name != "max_norm") info.fail(op, " has no attribute '", a.name, "' (it has: max_norm)");
}

}  // namespace

// ---------------------------------------------------------------- com.onnxtrain optimizers
OptimizerAttrs read_optimizer_attrs(const KernelInfo& info, const ops::OptimizerSpec& spec) {
  for (const auto& a : info.node().attrs)
    if (!spec.has_float(a.name) && !spec.has_int(a.name) && a.name != kOptimizerUpdateSignalAttr)
      info.fail(spec.name, " has no attribute '", a.name, "' (it has: ", spec.attr_list(), ", ",
                kOptimizerUpdateSignalAttr, ")");
  OptimizerAttrs at;
  at.spec = &spec;
  const int64_t gated = info.attr_int(kOptimizerUpdateSignalAttr, 0);
  if (gated != 0 && gated != 1) info.fail("attribute '", kOptimizerUpdateSignalAttr, "' must be 0 or 1, got ", gated);
  at.first = ops::kOptimizerFirstWeightInput + size_t(gated);
  auto f = [&](const char* n) { return spec.has_float(n) ? info.attr_float(n, spec.float_default(n)) : 0.f; };
  auto flag = [&](const char* n) {
    if (!spec.has_int(n)) return false;
    const int64_t v = info.attr_int(n, spec.int_default(n));
    if (v != 0 && v != 1) info.fail("attribute '", n, "' must be 0 or 1, got ", v);
    return v != 0;
  };
  at.lambda = f("lambda");
  at.momentum = f("momentum");
  at.alpha = f("alpha");
  at.beta = f("beta");
  at.epsilon = f("epsilon");
  at.lr_decay = f("lr_decay");
  at.ratio_min = f("ratio_min");
  at.ratio_max = f("ratio_max");
  at.nesterov = flag("nesterov");
  at.bias_correction = flag("do_bias_correction");
  return at;
}

size_t check_optimizer_inputs(const PrepareContext& ctx, const OptimizerAttrs& at) {
  const ops::OptimizerSpec& spec = *at.spec;
  const size_t S = spec.states.size(), groups = 2 + S, first = at.first;
  const size_t nin = ctx.num_inputs();
  if (nin < first + groups || (nin - first) % groups != 0)
    ctx.fail("expects lr, step, grad_scale (may be empty)", at.gated() ? ", update_signal" : "", " and ", groups,
             " groups of n tensors (weights, gradients", S ? ", " : "", state_list(spec), "), got ", nin, " inputs");
  const size_t n = (nin - first) / groups;
  check_scalar(ctx, kOptimizerLrInput, "lr", DType::kFloat32);
  check_scalar(ctx, kOptimizerStepInput, "step", DType::kInt64);
  if (ctx.has_input(kOptimizerGradScaleInput))
    check_scalar(ctx, kOptimizerGradScaleInput, "grad_scale", DType::kFloat64);
  if (at.gated()) check_scalar(ctx, kOptimizerUpdateSignalInput, "update_signal", DType::kBool);
  require_named_outputs(ctx, n * (1 + S));
  for (size_t i = 0; i < n; ++i) {
    const std::string wi = "weight " + std::to_string(i + 1);
    check_float_tensor(ctx, first + i, wi);
    check_like(ctx, first + n + i, "gradient " + std::to_string(i + 1), first + i, wi);
    for (size_t s = 0; s < S; ++s)
      check_like(ctx, first + (2 + s) * n + i, spec.states[s] + " " + std::to_string(i + 1), first + i, wi);
  }
  return n;
}

void check_optimizer_step(const RunContext& ctx, float lr, int64_t step) {
  if (!std::isfinite(lr)) ctx.fail("learning rate ", lr, " is not finite");
  if (step < 1) ctx.fail("step must be >= 1 (the 1-based index of this update), got ", step);
}

// ---------------------------------------------------------------- AccumulateGradients
void check_accumulate_gradients_attrs(const KernelInfo& info) {
  if (!info.node().attrs.empty())
    info.fail("AccumulateGradients has no attributes, got '", info.node().attrs[0].name, "'");
}

size_t check_accumulate_gradients(const PrepareContext& ctx) {
  const size_t nin = ctx.num_inputs();
  if (nin < 3 || (nin - 1) % 2 != 0)
    ctx.fail("expects reset and 2 groups of n tensors (accumulators, gradients), got ", nin, " inputs");
  const size_t n = (nin - 1) / 2;
  check_scalar(ctx, 0, "reset", DType::kBool);
  require_named_outputs(ctx, n);
  for (size_t i = 0; i < n; ++i) {
    const std::string ai = "accumulator " + std::to_string(i + 1);
    check_float_tensor(ctx, 1 + i, ai);
    check_like(ctx, 1 + n + i, "gradient " + std::to_string(i + 1), 1 + i, ai);
  }
  return n;
}

// ---------------------------------------------------------------- GlobalNormClip, LossScaleCheck
float read_global_norm_clip_max_norm(const KernelInfo& info) {
  check_max_norm_only(info, "GlobalNormClip");
  const float max_norm = info.attr_float("max_norm");
  if (!(max_norm > 0.f) || !std::isfinite(max_norm)) info.fail("max_norm must be finite and > 0, got ", max_norm);
  return max_norm;
}

void check_global_norm_clip(const PrepareContext& ctx) {
  if (ctx.num_inputs() < 1) ctx.fail("expects at least one gradient");
  if (ctx.num_outputs() < 1 || ctx.num_outputs() > 2)
    ctx.fail("expects outputs scale and optional norm, got ", ctx.num_outputs());
  if (!ctx.has_output(0)) ctx.fail("output 0 (scale) must be named");
  for (size_t i = 0; i < ctx.num_inputs(); ++i) check_float_tensor(ctx, i, "gradient " + std::to_string(i + 1));
}

float read_loss_scale_max_norm(const KernelInfo& info) {
  check_max_norm_only(info, "LossScaleCheck");
  const float max_norm = info.attr_float("max_norm", 0.f);
  if (!(max_norm >= 0.f) || !std::isfinite(max_norm)) info.fail("max_norm must be finite and >= 0, got ", max_norm);
  return max_norm;
}

void check_loss_scale_check(const PrepareContext& ctx) {
  if (ctx.num_inputs() < 2) ctx.fail("expects the loss scale and at least one gradient");
  check_scalar(ctx, 0, "loss_scale", DType::kFloat32);
  if (ctx.num_outputs() != 2 || !ctx.has_output(0) || !ctx.has_output(1))
    ctx.fail("expects two named outputs (grad_scale, all_finite), got ", ctx.num_outputs());
  for (size_t i = 1; i < ctx.num_inputs(); ++i) check_float_tensor(ctx, i, "gradient " + std::to_string(i));
}

void check_loss_scale(const RunContext& ctx, double loss_scale) {
  if (!(loss_scale > 0) || !std::isfinite(loss_scale)) ctx.fail("loss_scale ", loss_scale, " must be finite and > 0");
}

// ---------------------------------------------------------------- ai.onnx.preview.training
PreviewAttrs read_preview_attrs(const KernelInfo& info, PreviewAlgorithm algo) {
  PreviewAttrs at;
  at.algo = algo;
  at.norm = info.attr_float("norm_coefficient", 0.f);
  if (algo == PreviewAlgorithm::kAdagrad) {
    at.decay = info.attr_float("decay_factor", 0.f);
    at.epsilon = info.attr_float("epsilon", 0.f);
    at.groups = 3;
  } else if (algo == PreviewAlgorithm::kMomentum) {
    at.alpha = info.attr_float("alpha");
    at.beta = info.attr_float("beta");
    const std::string mode = info.attr_string("mode");
    if (mode != "standard" && mode != "nesterov") info.fail("mode must be 'standard' or 'nesterov', got '", mode, "'");
    at.nesterov = mode == "nesterov";
    at.groups = 3;
  } else {
    at.alpha = info.attr_float("alpha", 0.9f);
    at.beta = info.attr_float("beta", 0.999f);
    at.epsilon = info.attr_float("epsilon", 0.f);
    at.norm_post = info.attr_float("norm_coefficient_post", 0.f);
    at.groups = 4;
  }
  return at;
}

size_t check_preview_inputs(const PrepareContext& ctx, const PreviewAttrs& at) {
  const size_t groups = at.groups;
  if (ctx.num_inputs() < 2 + groups || (ctx.num_inputs() - 2) % groups != 0)
    ctx.fail("expects R, T and ", groups, " groups of n tensors, got ", ctx.num_inputs(), " inputs");
  const size_t n = (ctx.num_inputs() - 2) / groups;
  if (ctx.num_outputs() != n * (groups - 1))
    ctx.fail("expects ", n * (groups - 1), " outputs, got ", ctx.num_outputs());
  if (shape_numel(ctx.input_shape(0)) != 1 || !dtype_is_float(ctx.input_dtype(0))) ctx.fail("R must be a float scalar");
  if (shape_numel(ctx.input_shape(1)) != 1 || ctx.input_dtype(1) != DType::kInt64)
    ctx.fail("T must be an int64 scalar");
  const std::string group_names =
      at.algo == PreviewAlgorithm::kAdam ? "XGVH" : at.algo == PreviewAlgorithm::kMomentum ? "XGV" : "XGH";
  for (size_t i = 0; i < n; ++i) {
    const DType dt = ctx.input_dtype(2 + i);
    require_element_type(ctx, dt, dt == DType::kFloat32 || dt == DType::kFloat64);
    for (size_t gi = 1; gi < groups; ++gi)
      check_like(ctx, 2 + gi * n + i, group_names.substr(gi, 1).append(std::to_string(i + 1)), 2 + i,
                 std::string("X").append(std::to_string(i + 1)));
  }
  return n;
}

void check_inplace_accumulator(const PrepareContext& ctx) {
  for (size_t i : {0, 1})
    if (!ctx.has_input(i) || ctx.input_kind(i) != Value::Kind::kTensor)
      ctx.fail(i == 0 ? "accumulation_buffer" : "value", " (input ", i, ") must be a tensor");
  const DType dt = ctx.input_dtype(0);
  require_element_type(ctx, dt, dt == DType::kFloat32 || dt == DType::kFloat64);
  if (ctx.input_dtype(1) != dt || ctx.input_shape(1) != ctx.input_shape(0))
    ctx.fail("value is ", dtype_name(ctx.input_dtype(1)), shape_to_string(ctx.input_shape(1)),
             ", the accumulation buffer ", dtype_name(ctx.input_dtype(0)), shape_to_string(ctx.input_shape(0)));
  if (ctx.has_input(2)) check_scalar(ctx, 2, "overwrite_flag", DType::kBool);
}

AdamWAttrs read_adamw_attrs(const KernelInfo& info) {
  AdamWAttrs at;
  at.alpha = info.attr_float("alpha", at.alpha);
  at.beta = info.attr_float("beta", at.beta);
  at.epsilon = info.attr_float("epsilon", at.epsilon);
  at.weight_decay = info.attr_float("weight_decay", at.weight_decay);
  at.adam_mode = info.attr_int("adam_mode", 0);
  const int64_t correct = info.attr_int("correct_bias", 1);
  if (at.adam_mode != 0 && at.adam_mode != 1) info.fail("adam_mode must be 0 (PyTorch) or 1 (Hugging Face), got ", at.adam_mode);
  if (correct != 0 && correct != 1) info.fail("correct_bias must be 0 or 1, got ", correct);
  if (at.adam_mode == 0 && correct == 0) info.fail("correct_bias must be 1 with adam_mode 0 (PyTorch's AdamW)");
  at.correct_bias = correct == 1;
  return at;
}

void check_sequence_optimizer_inputs(const PrepareContext& ctx, int step, size_t first, size_t last, size_t signal) {
  check_scalar(ctx, 0, "lr", DType::kFloat32);
  if (step >= 0) check_scalar(ctx, size_t(step), "step", DType::kInt64);
  static const char* const names[] = {"weights", "gradients", "momentums_1", "momentums_2"};
  for (size_t i = first; i < last; ++i)
    if (!ctx.has_input(i) || ctx.input_kind(i) != Value::Kind::kSequence)
      ctx.fail(names[std::min<size_t>(i - first, 3)], " (input ", i, ") must be a sequence of tensors");
  if (ctx.has_input(signal)) check_scalar(ctx, signal, "update_signal", DType::kBool);
}

size_t check_sequence_optimizer_tensors(const RunContext& ctx, size_t first, size_t last) {
  const size_t n = ctx.input_value(first).sequence.size();
  if (n == 0) ctx.fail("the weights sequence is empty");
  for (size_t i = first + 1; i < last; ++i)
    if (ctx.input_value(i).sequence.size() != n)
      ctx.fail("input ", i, " holds ", ctx.input_value(i).sequence.size(), " tensors, the weights ", n);
  for (size_t k = 0; k < n; ++k) {
    const Tensor& w = ctx.input_value(first).sequence[k];
    for (size_t i = first; i < last; ++i) {
      const Tensor& t = ctx.input_value(i).sequence[k];
      if (t.dtype() != DType::kFloat32)
        throw_error<NotImplemented>(ctx.node().describe(), ": tensor ", k, " of input ", i, " is ",
                                    dtype_name(t.dtype()), ": only float32 is supported");
      if (t.shape() != w.shape())
        ctx.fail("tensor ", k, " of input ", i, " has shape ", shape_to_string(t.shape()), ", weight ", k, " ",
                 shape_to_string(w.shape()));
    }
  }
  return n;
}

float read_clip_grad_norm_attrs(const KernelInfo& info) {
  const std::string type = info.attr_string("norm_type", "fro");
  if (type != "fro") info.fail("norm_type '", type, "' is not implemented (only \"fro\")");
  return info.attr_float("max_norm", 1.0f);
}

}  // namespace onnxtrain::kernels::shape
