// make_artifacts / save_artifacts (include/onnxtrain/artifacts.h): onnxruntime's generate_artifacts
// over onnxtrain's loss builder (train/loss_builder.h), gradient builder (autodiff, portable mode:
// standard ONNX operators wherever possible) and checkpoint state (ODTC).
//
// The training model, as onnxruntime's onnxblock lays it out: inputs = the model's inputs, the
// loss's new input, the parameters (requires_grad and frozen, in initializer order), one
// "<p>_grad.accumulation.buffer" per trained parameter, "lazy_reset_grad" (bool [1]); outputs = the
// loss, additional_output_names, one "<p>_grad.accumulation.out" flag per trained parameter (the
// output of InPlaceAccumulatorV2(buffer, gradient, lazy_reset_grad)). The running statistics of
// BatchNormalization in training mode are written back by InPlaceAccumulatorV2(statistic, new
// value, true) whose flag output "<statistic>.running_update_grad.accumulation.out" carries the
// suffix onnxruntime's Module hides from the user's outputs.
#include "onnxtrain/artifacts.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <unordered_set>

#include "autodiff/builder.h"
#include "ir/emitter.h"
#include "ir/infer.h"
#include "ir/onnx_io.h"
#include "onnxtrain/error.h"
#include "ops/onnxtrain_ops.h"
#include "train/loss_builder.h"
#include "train/training_graph.h"

namespace onnxtrain {

namespace {

constexpr const char* kMicrosoft = "com.microsoft";
constexpr const char* kGradBuffer = "_grad.accumulation.buffer";
constexpr const char* kGradFlag = "_grad.accumulation.out";
constexpr const char* kStatFlag = ".running_update_grad.accumulation.out";

// onnxruntime's LossType -> onnxtrain's loss builder (reduction mean) and the name of the new input.
struct LossSpec {
  const char* name;
  const char* kind;
  const char* label;
};
constexpr LossSpec kLosses[] = {{"MSELoss", "squared_error", "target"},
                                {"CrossEntropyLoss", "cross_entropy", "labels"},
                                {"BCEWithLogitsLoss", "bce_with_logits", "target"},
                                {"L1Loss", "absolute_error", "target"}};

const LossSpec* loss_spec(const std::string& name) {
  if (name.empty()) return nullptr;
  for (const auto& l : kLosses)
    if (name == l.name) return &l;
  throw_error<InvalidArgument>("generate_artifacts: unknown loss '", name,
                               "' (MSELoss, CrossEntropyLoss, BCEWithLogitsLoss, L1Loss, or none)");
}

ir::Node node(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
              const std::string& domain = "", std::vector<ir::Attribute> attrs = {}) {
  ir::Node n;
  n.op_type = op;
  n.domain = domain;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  n.attrs = std::move(attrs);
  return n;
}

ir::ValueInfo tensor_info(const std::string& name, DType dt, const Shape& shape) {
  return ir::ValueInfo{name, ir::TypeInfo::tensor(dt, shape), ""};
}

// The declared or inferred type of `v` in g (unknown when nothing says).
ir::TypeInfo type_of(const ir::Graph& g, const std::string& v) {
  for (const auto* list : {&g.outputs, &g.inputs, &g.value_info})
    for (const auto& i : *list)
      if (i.name == v && i.type.kind != ir::TypeInfo::Kind::kUnknown) return i.type;
  if (const Tensor* t = g.initializer(v)) return ir::TypeInfo::tensor(t->dtype(), t->shape());
  return {};
}

std::unordered_set<std::string> value_names(const ir::Graph& g) {
  std::unordered_set<std::string> r;
  for (const auto& v : g.inputs) r.insert(v.name);
  for (const auto& [n, t] : g.initializers) r.insert(n);
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty()) r.insert(o);
  return r;
}

// The parameters (requires_grad and frozen) in initializer order, moved from initializers to inputs
// after the model's own inputs; initializers that IR < 4 also listed as inputs stay constants.
void parameters_to_inputs(ir::Graph& g, const std::set<std::string>& params) {
  std::vector<ir::ValueInfo> inputs;
  for (const auto& v : g.inputs)
    if (!g.initializer(v.name)) inputs.push_back(v);
  std::vector<std::pair<std::string, Tensor>> constants;
  for (auto& [n, t] : g.initializers) {
    if (params.count(n)) inputs.push_back(tensor_info(n, t.dtype(), t.shape()));
    else constants.emplace_back(n, t);
  }
  g.inputs = std::move(inputs);
  g.initializers = std::move(constants);
}

// com.onnxtrain operators that onnxruntime has in com.microsoft with the same semantics move
// there (ConvGrad, ReluGrad, ...); the others are returned (onnxtrain runs them, onnxruntime not).
std::vector<std::string> to_microsoft(ir::Model& m) {
  const auto& shared = ops::shared_with_microsoft();
  std::set<std::string> own;
  std::function<void(ir::Graph&)> walk = [&](ir::Graph& g) {
    for (auto& n : g.nodes) {
      if (n.domain == ops::kDomain) {
        if (std::find(shared.begin(), shared.end(), n.op_type) != shared.end()) n.domain = kMicrosoft;
        else own.insert(n.op_type);
      }
      for (auto& a : n.attrs) {
        if (a.g) walk(*a.g);
        for (auto& sg : a.graphs) walk(*sg);
      }
    }
  };
  walk(*m.graph);
  m.opsets[kMicrosoft] = std::max<int64_t>(m.opsets[kMicrosoft], 1);
  if (own.empty()) m.opsets.erase(ops::kDomain);
  return {own.begin(), own.end()};
}

ir::Model optimizer_model(const std::string& name, int64_t opset) {
  ir::Model m;
  m.ir_version = opset >= 19 ? 9 : opset >= 15 ? 8 : 7;
  m.opsets = {{"", opset}, {kMicrosoft, 1}};
  m.producer_name = "onnxtrain";
  m.graph = std::make_shared<ir::Graph>();
  ir::Graph& g = *m.graph;
  g.name = name == "AdamW" ? "adamw" : "sgd";
  auto seq = [](const std::string& n) {
    ir::ValueInfo v{n, {}, ""};
    v.type.kind = ir::TypeInfo::Kind::kSequence;
    v.type.inner = std::make_shared<ir::TypeInfo>(ir::TypeInfo::tensor(DType::kFloat32));
    return v;
  };
  g.inputs = {tensor_info("learning_rate", DType::kFloat32, {1}), tensor_info("step", DType::kInt64, {1}),
              seq("params"), seq("gradients"), seq("first_order_moments")};
  if (name == "AdamW") {
    g.inputs.push_back(seq("second_order_moments"));
    using E = ir::Emitter;
    g.nodes.push_back(node("AdamWOptimizer",
                           {"learning_rate", "step", "params", "gradients", "first_order_moments",
                            "second_order_moments"},
                           {"updated_flag"}, kMicrosoft,
                           {E::float_attr("alpha", 0.9f), E::float_attr("beta", 0.999f), E::float_attr("epsilon", 1e-6f),
                            E::float_attr("weight_decay", 0.0f), E::int_attr("correct_bias", 1),
                            E::int_attr("adam_mode", 1)}));
    g.outputs = {tensor_info("updated_flag", DType::kBool, {1})};
  } else {
    // onnxruntime's SGD graph declares step and the moments too; SGDOptimizerV2 reads neither.
    g.nodes.push_back(node("SGDOptimizerV2", {"learning_rate", "params", "gradients"}, {"update_completed"}, kMicrosoft));
    g.outputs = {tensor_info("update_completed", DType::kBool, {1})};
  }
  return m;
}

}  // namespace

Artifacts make_artifacts(const std::string& model_bytes, const ArtifactOptions& o) {
  const LossSpec* loss = loss_spec(o.loss);
  if (!o.optimizer.empty() && o.optimizer != "AdamW" && o.optimizer != "SGD")
    throw_error<InvalidArgument>("generate_artifacts: unknown optimizer '", o.optimizer, "' (AdamW, SGD, or none)");
  if (o.requires_grad.empty())
    throw_error<InvalidArgument>("generate_artifacts: requires_grad is empty: name the initializers to train");
  ir::Model m = ir::load_model_bytes(model_bytes.data(), model_bytes.size(), o.base_dir);
  ir::Graph& g = *m.graph;

  // Parameters: float initializers, each in one list.
  std::set<std::string> trained, frozen, params;
  for (const auto& [list, set, what] : {std::tuple(&o.requires_grad, &trained, "requires_grad"),
                                        std::tuple(&o.frozen_params, &frozen, "frozen_params")}) {
    for (const std::string& p : *list) {
      const Tensor* t = g.initializer(p);
      if (!t) throw_error<InvalidArgument>("generate_artifacts: ", what, " names '", p, "', which is not an initializer");
      if (!dtype_is_float(t->dtype()))
        throw_error<InvalidArgument>("generate_artifacts: ", what, " names '", p, "', an initializer of type ",
                                     dtype_name(t->dtype()), " (parameters are float tensors)");
      if (!set->insert(p).second) throw_error<InvalidArgument>("generate_artifacts: '", p, "' is repeated in ", what);
      if (!params.insert(p).second)
        throw_error<InvalidArgument>("generate_artifacts: '", p, "' is in both requires_grad and frozen_params");
    }
  }
  if (o.loss_input_names.size() > 1)
    throw_error<NotImplemented>("generate_artifacts: loss_input_names holds ", o.loss_input_names.size(),
                                " names; onnxtrain's loss blocks score one output (give the one to score)");

  // The loss.
  std::string loss_name;
  if (!loss) {
    if (g.outputs.empty()) throw_error<InvalidArgument>("generate_artifacts: the model has no output to use as the loss");
    loss_name = o.loss_input_names.empty() ? g.outputs[0].name : o.loss_input_names[0];
  } else {
    std::string scored;
    if (!o.loss_input_names.empty()) scored = o.loss_input_names[0];
    else if (g.outputs.size() == 1) scored = g.outputs[0].name;
    else
      throw_error<InvalidArgument>("generate_artifacts: the model has ", g.outputs.size(),
                                   " outputs; onnxruntime passes them all to the loss (the second as its target). "
                                   "Give loss_input_names with the output to score");
    const auto names = value_names(g);
    loss_name = "loss";
    for (int k = 1; names.count(loss_name); ++k) loss_name = "loss_" + std::to_string(k);
    train::add_loss(m, loss->kind, loss_name, loss->label, "", {}, scored, {{"reduction", "mean"}});
  }
  ir::infer_types(m);
  {
    const auto names = value_names(g);
    if (!names.count(loss_name)) throw_error<InvalidArgument>("generate_artifacts: '", loss_name, "' is not a value of the model");
    for (const auto& a : o.additional_output_names)
      if (!names.count(a))
        throw_error<InvalidArgument>("generate_artifacts: additional_output_names names '", a,
                                     "', which is not a value of the model");
  }
  std::vector<std::string> outputs{loss_name};
  for (const auto& a : o.additional_output_names)
    if (std::find(outputs.begin(), outputs.end(), a) == outputs.end()) outputs.push_back(a);

  // Running statistics written back: those of frozen parameters.
  std::vector<train::RunningStat> stats;
  if (o.update_batchnorm_statistics)
    for (const auto& s : train::batchnorm_running_stats(m))
      if (frozen.count(s.initializer)) stats.push_back(s);

  // The eval model: the forward pass with the loss, training-only behaviour off.
  ir::Model eval = train::inference_graph(m, outputs, false);
  parameters_to_inputs(*eval.graph, params);

  // The training model: forward, loss, gradients of the trained parameters.
  std::vector<std::string> ys = outputs;
  for (const auto& s : stats) ys.push_back(s.output);
  autodiff::BuildOptions bo;
  bo.portable = true;
  const std::vector<std::string> xs(o.requires_grad.begin(), o.requires_grad.end());
  ir::Model tm = autodiff::build_gradient_model(m, ys, xs, loss_name, bo);
  ir::Graph& tg = *tm.graph;
  std::vector<ir::ValueInfo> tm_outputs;
  for (const auto& y : outputs) tm_outputs.push_back(ir::ValueInfo{y, type_of(tg, y), ""});
  // Parameters in initializer order; their buffers in the same order.
  std::vector<std::pair<std::string, Tensor>> trained_in_order;
  for (const auto& [n, t] : tg.initializers)
    if (trained.count(n)) trained_in_order.emplace_back(n, t);
  parameters_to_inputs(tg, params);
  for (const auto& [p, t] : trained_in_order) tg.inputs.push_back(tensor_info(p + kGradBuffer, t.dtype(), t.shape()));
  tg.inputs.push_back(tensor_info("lazy_reset_grad", DType::kBool, {1}));
  for (const auto& [p, t] : trained_in_order) {
    tg.nodes.push_back(node("InPlaceAccumulatorV2", {p + kGradBuffer, p + "_grad", "lazy_reset_grad"},
                            {p + kGradFlag}, kMicrosoft));
    tm_outputs.push_back(tensor_info(p + kGradFlag, DType::kBool, {1}));
  }
  if (!stats.empty()) {
    Tensor yes = Tensor::empty(DType::kBool, {1});
    *yes.data<bool>() = true;
    std::string flag = "running_update_overwrite";
    for (const auto names = value_names(tg); names.count(flag);) flag += "_";
    tg.initializers.emplace_back(flag, yes);
    for (const auto& s : stats) {
      tg.nodes.push_back(node("InPlaceAccumulatorV2", {s.initializer, s.output, flag}, {s.initializer + kStatFlag},
                              kMicrosoft));
      tm_outputs.push_back(tensor_info(s.initializer + kStatFlag, DType::kBool, {1}));
    }
  }
  tg.outputs = std::move(tm_outputs);

  Artifacts a;
  a.onnxtrain_operators = to_microsoft(tm);
  to_microsoft(eval);
  a.training_model = ir::serialize_model(tm);
  a.eval_model = ir::serialize_model(eval);
  if (!o.optimizer.empty()) a.optimizer_model = ir::serialize_model(optimizer_model(o.optimizer, m.opset("")));
  for (const auto& [n, t] : m.graph->initializers)
    if (params.count(n)) a.checkpoint.parameters[n] = Parameter{t.dtype(), t.clone(), trained.count(n) > 0, {}, {}};
  return a;
}

void save_artifacts(const Artifacts& a, const std::string& dir, const std::string& prefix, bool nominal_checkpoint) {
  if (!std::filesystem::is_directory(dir))
    throw_error<InvalidArgument>("generate_artifacts: artifact_directory '", dir, "' is not a folder");
  if (prefix.find('/') != std::string::npos || prefix == "." || prefix == "..")
    throw_error<InvalidArgument>("generate_artifacts: prefix '", prefix, "' must be a plain file-name prefix");
  const auto path = [&](const char* name) { return (std::filesystem::path(dir) / (prefix + name)).string(); };
  ir::write_file_atomic(path("training_model.onnx"), a.training_model);
  ir::write_file_atomic(path("eval_model.onnx"), a.eval_model);
  if (!a.optimizer_model.empty()) ir::write_file_atomic(path("optimizer_model.onnx"), a.optimizer_model);
  a.checkpoint.save(path("checkpoint"));
  if (nominal_checkpoint) {
    CheckpointState nominal;
    nominal.nominal = true;
    for (const auto& [n, p] : a.checkpoint.parameters)
      nominal.parameters[n] = Parameter{p.dtype, {}, p.requires_grad, {}, p.shape()};
    nominal.save(path("nominal_checkpoint"));
  }
}

}  // namespace onnxtrain
