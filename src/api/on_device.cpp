// onnxruntime's on-device Module, Optimizer and LinearLRScheduler over CheckpointState
// (include/onnxtrain/on_device.h). The graphs run in InferenceSessions fed with views of the
// state's tensors: InPlaceAccumulatorV2 writes the gradient buffers and the optimizer operators
// update parameters and moments in place, so nothing is copied back.
#include "onnxtrain/on_device.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>

#include "ir/ir.h"
#include "ir/onnx_io.h"

namespace onnxtrain::on_device {

namespace {

constexpr const char* kGradBufferSuffix = "_grad.accumulation.buffer";
constexpr const char* kLazyResetGrad = "lazy_reset_grad";
constexpr const char* kGroup = "group0";  // onnxruntime keeps one optimizer group
// onnxruntime's names of gradient values (its GRAD_SUFFIX): outputs with them are not the user's.
constexpr const char* kGradSuffixes[] = {"_grad.accumulation.buffer", "_grad.accumulation.out", "_grad"};

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// The parameter whose gradient buffer input `name` is (nullopt when it is not one).
std::optional<std::string> buffer_parameter(const std::string& name) {
  if (!ends_with(name, kGradBufferSuffix)) return std::nullopt;
  return name.substr(0, name.size() - std::strlen(kGradBufferSuffix));
}

bool is_gradient_name(const std::string& s) {
  return std::any_of(std::begin(kGradSuffixes), std::end(kGradSuffixes), [&](const char* x) { return ends_with(s, x); });
}

// onnxruntime's wording ("Please load the model parameters first"), which its users' tests match.
void require_loaded(const CheckpointState& s, const char* what) {
  if (s.nominal)
    throw_error<InvalidArgument>(what, ": the checkpoint state is nominal (parameter names and types only). Please "
                                 "load the model parameters first (Module.copy_buffer_to_parameters with "
                                 "trainable_only=False)");
}

InferenceSession open(const ModelSource& m, const SessionOptions& options) {
  if (!m.path.empty()) return InferenceSession(m.path, options);
  return InferenceSession(m.bytes.data(), m.bytes.size(), options);
}

ir::Model load_ir(const ModelSource& m) {
  if (!m.path.empty()) return ir::load_model_file(m.path);
  return ir::load_model_bytes(m.bytes.data(), m.bytes.size());
}

// The static shape of a declared input, or an error naming it.
Shape declared_shape(const NodeArg& a) {
  if (!a.has_shape) throw_error<InvalidArgument>("parameter input '", a.name, "' of the training model has no shape");
  Shape s;
  for (const DimInfo& d : a.shape) {
    if (d.value < 0)
      throw_error<InvalidArgument>("parameter input '", a.name, "' of the training model has a dimension that is not fixed");
    s.push_back(d.value);
  }
  return s;
}

// "[3, N]": a declared shape as text ("" when it has none).
std::string shape_text(const NodeArg& a) {
  if (!a.has_shape) return "";
  std::string r = "[";
  for (size_t i = 0; i < a.shape.size(); ++i)
    r += (i ? ", " : "") + (a.shape[i].value >= 0 ? std::to_string(a.shape[i].value) : a.shape[i].symbol.empty() ? "?" : a.shape[i].symbol);
  return r + "]";
}

// Whether a declared input accepts a tensor of `shape` (symbolic dimensions accept any size).
bool fits(const NodeArg& a, const Shape& shape) {
  if (!a.has_shape) return true;
  if (a.shape.size() != shape.size()) return false;
  for (size_t i = 0; i < shape.size(); ++i)
    if (a.shape[i].value >= 0 && a.shape[i].value != shape[i]) return false;
  return true;
}

Value bool_value(bool b) {
  Tensor t = Tensor::empty(DType::kBool, {1});
  t.data<bool>()[0] = b;
  return Value::of(std::move(t));
}

Value sequence_of(std::vector<Tensor> ts) {
  Value v;
  v.kind = Value::Kind::kSequence;
  v.elem = ts.empty() ? DType::kFloat32 : ts.front().dtype();
  v.sequence = std::move(ts);
  return v;
}

std::vector<std::pair<std::string, const Value*>> borrow(const std::vector<std::string>& names,
                                                         const std::vector<Value>& values) {
  std::vector<std::pair<std::string, const Value*>> feeds;
  for (size_t i = 0; i < names.size(); ++i) feeds.emplace_back(names[i], &values[i]);
  return feeds;
}

void check_user_inputs(const char* what, const std::vector<std::string>& names, size_t given) {
  if (given == names.size()) return;
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  throw_error<InvalidArgument>(what, " expects ", names.size(), " user inputs (", list, "), got ", given);
}

}  // namespace

// ---------------------------------------------------------------- Module
struct Module::Impl {
  CheckpointState* state;
  InferenceSession train;
  std::optional<InferenceSession> eval;
  ModelSource eval_source;
  std::vector<std::string> train_inputs;     // every input of the training model, in order
  std::vector<std::string> train_user_inputs, train_outputs, train_user_outputs;
  std::vector<size_t> user_output_index;     // positions of the user outputs among train_outputs
  std::vector<std::string> weights;          // parameter inputs of the training model, in order
  std::vector<Shape> weight_shapes;          // their declared shapes
  std::vector<std::string> eval_inputs, eval_user_inputs, eval_outputs;
  bool accumulate = false;                   // false: the next step overwrites the gradient buffers

  Impl(const ModelSource& t, CheckpointState& s, const SessionOptions& o) : state(&s), train(open(t, o)) {}

  // Zero gradient buffers of the trained parameters the training model accumulates into.
  void create_gradients() {
    for (const auto& name : train_inputs) {
      const std::optional<std::string> param = buffer_parameter(name);
      if (!param) continue;
      Parameter& p = state->parameter(*param);
      if (p.data.defined() && (!p.grad.defined() || p.grad.shape() != p.data.shape()))
        p.grad = Tensor::zeros(p.data.dtype(), p.data.shape());
    }
  }

  // The value fed for input `name` of a graph: a user input, a parameter, a gradient buffer or the
  // lazy_reset_grad flag.
  Value fed(const std::string& name) const {
    if (name == kLazyResetGrad) return bool_value(!accumulate);
    if (state->parameters.count(name)) return Value::of(state->parameters.at(name).data);
    return Value::of(state->parameter(*buffer_parameter(name)).grad);
  }

  std::vector<Value> run(InferenceSession& sess, const std::vector<std::string>& inputs,
                         const std::vector<std::string>& user_inputs, const std::vector<std::string>& outputs,
                         const std::vector<Value>& given) {
    std::vector<Value> values;
    values.reserve(inputs.size());
    size_t u = 0;
    for (const auto& name : inputs) {
      if (u < user_inputs.size() && user_inputs[u] == name) values.push_back(given[u++]);
      else values.push_back(fed(name));
    }
    return sess.run_values(outputs, borrow(inputs, values), RunOptions{});
  }

  // Indices into weights of the parameters a buffer covers.
  std::vector<size_t> covered(bool trainable_only) const {
    std::vector<size_t> r;
    for (size_t i = 0; i < weights.size(); ++i)
      if (!trainable_only || state->parameter(weights[i]).requires_grad) r.push_back(i);
    return r;
  }
};

Module::Module(const ModelSource& train_model, CheckpointState& state, const ModelSource& eval_model,
               const SessionOptions& options)
    : impl_(std::make_unique<Impl>(train_model, state, options)) {
  Impl& m = *impl_;
  for (const NodeArg& a : m.train.get_inputs()) {
    m.train_inputs.push_back(a.name);
    if (state.parameters.count(a.name)) {
      const Parameter& p = state.parameters.at(a.name);
      // The state gives the shape (a nominal state's file has it too); without one (a nominal
      // state made in memory) the model's declared shape must be static.
      const bool known = p.data.defined() || !p.nominal_shape.empty();
      const Shape shape = known ? p.shape() : declared_shape(a);
      if (a.elem != p.dtype || (known && !fits(a, shape)))
        throw_error<InvalidArgument>("training model input '", a.name, "' is ", a.type, shape_text(a),
                                     " but the checkpoint's parameter is ",
                                     p.data.defined() ? p.data.describe() : std::string(dtype_name(p.dtype)));
      m.weights.push_back(a.name);
      m.weight_shapes.push_back(shape);
    } else if (const std::optional<std::string> buffer_of = buffer_parameter(a.name)) {
      const std::string& param = *buffer_of;
      if (!state.parameters.count(param))
        throw_error<InvalidArgument>("training model input '", a.name, "' is the gradient buffer of '", param,
                                     "', which is not a parameter of the checkpoint");
      if (!state.parameters.at(param).requires_grad)
        throw_error<InvalidArgument>("training model input '", a.name, "' accumulates the gradient of '", param,
                                     "', a frozen parameter of the checkpoint");
    } else if (a.name != kLazyResetGrad) {
      m.train_user_inputs.push_back(a.name);
    }
  }
  for (const NodeArg& a : m.train.get_outputs()) {
    if (!is_gradient_name(a.name)) {
      m.user_output_index.push_back(m.train_outputs.size());
      m.train_user_outputs.push_back(a.name);
    }
    m.train_outputs.push_back(a.name);
  }
  m.create_gradients();
  if (!eval_model.empty()) {
    m.eval.emplace(open(eval_model, options));
    m.eval_source = eval_model;
    for (const NodeArg& a : m.eval->get_inputs()) {
      m.eval_inputs.push_back(a.name);
      if (!state.parameters.count(a.name)) m.eval_user_inputs.push_back(a.name);
    }
    for (const NodeArg& a : m.eval->get_outputs()) m.eval_outputs.push_back(a.name);
  }
}

Module::~Module() = default;
Module::Module(Module&&) noexcept = default;
Module& Module::operator=(Module&&) noexcept = default;

std::vector<Value> Module::train_step(const std::vector<Value>& user_inputs) {
  Impl& m = *impl_;
  require_loaded(*m.state, "train_step");
  check_user_inputs("train_step", m.train_user_inputs, user_inputs.size());
  // Every output is fetched (the accumulators' flags keep their nodes in the plan); the user's are returned.
  std::vector<Value> all = m.run(m.train, m.train_inputs, m.train_user_inputs, m.train_outputs, user_inputs);
  m.accumulate = true;
  std::vector<Value> out;
  for (size_t i : m.user_output_index) out.push_back(std::move(all[i]));
  return out;
}

std::vector<Value> Module::eval_step(const std::vector<Value>& user_inputs) {
  Impl& m = *impl_;
  if (!m.eval) throw_error<InvalidArgument>("eval_step: this Module has no eval model");
  require_loaded(*m.state, "eval_step");
  check_user_inputs("eval_step", m.eval_user_inputs, user_inputs.size());
  return m.run(*m.eval, m.eval_inputs, m.eval_user_inputs, m.eval_outputs, user_inputs);
}

void Module::lazy_reset_grad() { impl_->accumulate = false; }

int64_t Module::parameters_size(bool trainable_only) const {
  int64_t n = 0;
  for (size_t i : impl_->covered(trainable_only)) {
    int64_t k = 1;
    for (int64_t d : impl_->weight_shapes[i]) k *= d;
    n += k;
  }
  return n;
}

Tensor Module::copy_parameters_to_buffer(bool trainable_only) const {
  const Impl& m = *impl_;
  require_loaded(*m.state, "copy_parameters_to_buffer");
  Tensor out = Tensor::empty(DType::kFloat32, {parameters_size(trainable_only)});
  auto* dst = static_cast<char*>(out.raw_data());
  for (size_t i : m.covered(trainable_only)) {
    const Tensor& t = m.state->parameter(m.weights[i]).data;
    if (t.dtype() != DType::kFloat32)
      throw_error<InvalidArgument>("copy_parameters_to_buffer: parameter '", m.weights[i], "' is ", t.describe(),
                                   "; a contiguous buffer holds float32 parameters only");
    std::memcpy(dst, t.raw_data(), t.nbytes());
    dst += t.nbytes();
  }
  return out;
}

void Module::copy_buffer_to_parameters(const Tensor& buffer, bool trainable_only) {
  Impl& m = *impl_;
  const int64_t n = parameters_size(trainable_only);
  if (buffer.dtype() != DType::kFloat32 || buffer.numel() != n)
    throw_error<InvalidArgument>("copy_buffer_to_parameters: the buffer is ", buffer.describe(), "; expected ", n,
                                 " float32 elements (the ", trainable_only ? "trainable " : "",
                                 "parameters of the training model)");
  for (size_t i : m.covered(trainable_only))
    if (m.state->parameter(m.weights[i]).dtype != DType::kFloat32)
      throw_error<InvalidArgument>("copy_buffer_to_parameters: parameter '", m.weights[i], "' is ",
                                   dtype_name(m.state->parameter(m.weights[i]).dtype), ", not float32");
  const auto* src = static_cast<const char*>(buffer.raw_data());
  for (size_t i : m.covered(trainable_only)) {
    Parameter& p = m.state->parameter(m.weights[i]);
    if (!p.data.defined()) {
      p.data = Tensor::empty(DType::kFloat32, m.weight_shapes[i]);
      p.nominal_shape.clear();
    }
    std::memcpy(p.data.raw_data(), src, p.data.nbytes());
    src += p.data.nbytes();
  }
  m.state->nominal = std::any_of(m.state->parameters.begin(), m.state->parameters.end(),
                                 [](const auto& kv) { return !kv.second.data.defined(); });
  m.create_gradients();
}

void Module::export_model_for_inferencing(const std::string& path,
                                          const std::vector<std::string>& graph_output_names) const {
  const Impl& m = *impl_;
  if (!m.eval)
    throw_error<InvalidArgument>("export_model_for_inferencing: this Module has no eval model (the inference model is "
                                 "made from the eval model)");
  require_loaded(*m.state, "export_model_for_inferencing");
  if (graph_output_names.empty())
    throw_error<InvalidArgument>("export_model_for_inferencing: no graph output names given");
  ir::Model model = load_ir(m.eval_source);
  ir::Graph& g = *model.graph;
  // Every value the graph knows, with its declared type where it has one.
  std::map<std::string, ir::ValueInfo> known;
  for (const auto* list : {&g.inputs, &g.value_info, &g.outputs})
    for (const auto& vi : *list) known[vi.name] = vi;
  std::set<std::string> produced;
  for (const auto& n : g.nodes) produced.insert(n.outputs.begin(), n.outputs.end());
  std::vector<ir::ValueInfo> outputs;
  for (const auto& name : graph_output_names) {
    if (!produced.count(name) && !known.count(name))
      throw_error<InvalidArgument>("export_model_for_inferencing: '", name, "' is not a value of the eval model");
    ir::ValueInfo vi = known.count(name) ? known[name] : ir::ValueInfo{name, {}, {}};
    outputs.push_back(vi);
  }
  // The nodes the outputs need (a node list is topologically ordered; walk it backwards).
  std::set<std::string> needed(graph_output_names.begin(), graph_output_names.end());
  std::vector<ir::Node> kept;
  for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it) {
    if (std::none_of(it->outputs.begin(), it->outputs.end(), [&](const std::string& o) { return needed.count(o) > 0; }))
      continue;
    for (const auto& i : it->inputs) needed.insert(i);
    for (const auto& i : ir::implicit_inputs(*it)) needed.insert(i);
    kept.push_back(std::move(*it));
  }
  std::reverse(kept.begin(), kept.end());
  g.nodes = std::move(kept);
  // Parameters become initializers; unused inputs and initializers go.
  std::vector<ir::ValueInfo> inputs;
  for (auto& vi : g.inputs) {
    if (!needed.count(vi.name)) continue;
    if (m.state->parameters.count(vi.name)) {
      const Tensor& t = m.state->parameters.at(vi.name).data;
      if (Tensor* init = g.initializer(vi.name)) *init = t;
      else g.initializers.emplace_back(vi.name, t);
    } else {
      inputs.push_back(vi);
    }
  }
  g.inputs = std::move(inputs);
  std::erase_if(g.initializers, [&](const auto& kv) { return !needed.count(kv.first); });
  g.outputs = std::move(outputs);
  std::erase_if(g.value_info, [&](const ir::ValueInfo& vi) { return !needed.count(vi.name); });
  ir::validate_graph(g);
  ir::save_model(model, path);
}

const std::vector<std::string>& Module::train_input_names() const { return impl_->train_user_inputs; }
const std::vector<std::string>& Module::train_output_names() const { return impl_->train_user_outputs; }
const std::vector<std::string>& Module::eval_input_names() const { return impl_->eval_user_inputs; }
const std::vector<std::string>& Module::eval_output_names() const { return impl_->eval_outputs; }
bool Module::has_eval_model() const { return impl_->eval.has_value(); }
const std::vector<std::string>& Module::parameter_names() const { return impl_->weights; }
CheckpointState& Module::state() const { return *impl_->state; }

// ---------------------------------------------------------------- Optimizer
namespace {

const std::vector<std::string> kAdamWInputs = {"learning_rate", "step", "params", "gradients", "first_order_moments",
                                               "second_order_moments"};
// onnxblock's SGD declares the step and one moment (onnxruntime feeds both, SGDOptimizerV2 reads
// neither); a model with the operator's own three inputs runs too.
const std::vector<std::string> kSgdInputs = {"learning_rate", "step", "params", "gradients", "first_order_moments"};
const std::vector<std::string> kSgdOperatorInputs = {"learning_rate", "params", "gradients"};
const char* const kMomentNames[] = {"momentum0", "momentum1"};

}  // namespace

struct Optimizer::Impl {
  CheckpointState* state;
  InferenceSession sess;
  std::vector<std::string> inputs, params;  // params: the trained parameters, in the state's name order
  std::string flag_output;
  size_t moments = 0;                       // optimizer states per parameter: 2 (AdamW), 1 or 0 (SGD)
  bool feeds_step = true;                   // the model takes the step count

  OptimizerGroup& group() const { return state->optimizer_groups.at(kGroup); }
};

Optimizer::Optimizer(const ModelSource& optimizer_model, Module& module, const SessionOptions& options)
    : impl_(std::make_unique<Impl>(Impl{&module.state(), open(optimizer_model, options), {}, {}, {}, 0})) {
  Impl& o = *impl_;
  CheckpointState& s = *o.state;
  require_loaded(s, "Optimizer");
  for (const NodeArg& a : o.sess.get_inputs()) o.inputs.push_back(a.name);
  if (o.inputs == kAdamWInputs) {
    o.moments = 2;
  } else if (o.inputs == kSgdInputs) {
    o.moments = 1;
  } else if (o.inputs == kSgdOperatorInputs) {
    o.feeds_step = false;
  } else {
    std::string got;
    for (const auto& n : o.inputs) got += (got.empty() ? "" : ", ") + n;
    throw_error<InvalidArgument>("the optimizer model's inputs are [", got, "]; onnxruntime's optimizer models have "
                                 "[learning_rate, step, params, gradients, first_order_moments, second_order_moments] "
                                 "(AdamW), [learning_rate, step, params, gradients, first_order_moments] (SGD) or "
                                 "[learning_rate, params, gradients] (SGDOptimizerV2's own)");
  }
  const auto outs = o.sess.get_outputs();
  if (outs.empty() || outs[0].elem != DType::kBool)
    throw_error<InvalidArgument>("the optimizer model's first output must be its bool update flag");
  o.flag_output = outs[0].name;
  for (auto& [name, p] : s.parameters) {
    if (!p.requires_grad) continue;
    if (!p.grad.defined())
      throw_error<InvalidArgument>("parameter '", name, "' is trained but the training model has no input '", name,
                                   kGradBufferSuffix, "' to accumulate its gradient into");
    o.params.push_back(name);
  }
  if (o.params.empty()) throw_error<InvalidArgument>("Optimizer: the checkpoint has no trainable parameter");
  OptimizerGroup& g = s.optimizer_groups[kGroup];
  for (const auto& name : o.params) {
    const Tensor& w = s.parameters.at(name).data;
    auto& states = g.states[name];
    for (size_t k = 0; k < o.moments; ++k) {
      Tensor& st = states[kMomentNames[k]];
      if (!st.defined()) st = Tensor::zeros(w.dtype(), w.shape());
      else if (st.dtype() != w.dtype() || st.shape() != w.shape())
        throw_error<InvalidArgument>("optimizer state '", kMomentNames[k], "' of parameter '", name, "' is ",
                                     st.describe(), " but the parameter is ", w.describe());
    }
  }
}

Optimizer::~Optimizer() = default;
Optimizer::Optimizer(Optimizer&&) noexcept = default;
Optimizer& Optimizer::operator=(Optimizer&&) noexcept = default;

void Optimizer::step() {
  Impl& o = *impl_;
  require_loaded(*o.state, "Optimizer.step");
  OptimizerGroup& g = o.group();
  std::vector<Tensor> params, grads, moments[2];
  for (const auto& name : o.params) {
    const Parameter& p = o.state->parameter(name);
    params.push_back(p.data);
    grads.push_back(p.grad);
    for (size_t k = 0; k < o.moments; ++k) moments[k].push_back(g.states.at(name).at(kMomentNames[k]));
  }
  std::vector<Value> values;
  values.push_back(Value::of(Tensor::from_vector<float>({1}, {g.learning_rate})));
  if (o.feeds_step) values.push_back(Value::of(Tensor::from_vector<int64_t>({1}, {g.step + 1})));
  values.push_back(sequence_of(std::move(params)));
  values.push_back(sequence_of(std::move(grads)));
  for (size_t k = 0; k < o.moments; ++k) values.push_back(sequence_of(std::move(moments[k])));
  const std::vector<Value> out = o.sess.run_values({o.flag_output}, borrow(o.inputs, values), RunOptions{});
  if (out[0].is_tensor() && out[0].tensor.numel() > 0 && out[0].tensor.data<bool>()[0]) ++g.step;
}

void Optimizer::set_learning_rate(float lr) { impl_->group().learning_rate = lr; }
float Optimizer::learning_rate() const { return impl_->group().learning_rate; }
void Optimizer::set_initial_learning_rate(float lr) { impl_->group().initial_learning_rate = lr; }
float Optimizer::initial_learning_rate() const { return impl_->group().initial_learning_rate; }
int64_t Optimizer::step_count() const { return impl_->group().step; }

// ---------------------------------------------------------------- LinearLRScheduler
LinearLRScheduler::LinearLRScheduler(Optimizer& optimizer, int64_t warmup_step_count, int64_t total_step_count,
                                     float initial_lr)
    : optimizer_(&optimizer), warmup_(warmup_step_count), total_(total_step_count) {
  if (warmup_ < 0 || total_ < 0)
    throw_error<InvalidArgument>("LinearLRScheduler: warmup_step_count (", warmup_, ") and total_step_count (", total_,
                                 ") must not be negative");
  optimizer.set_initial_learning_rate(initial_lr);
  step();
}

void LinearLRScheduler::step() {
  // In float, as onnxruntime's lr_scheduler.cc computes it.
  const int64_t t = optimizer_->step_count();
  const float f = t < warmup_ ? float(t) / float(std::max<int64_t>(1, warmup_))
                              : std::max(0.0f, float(total_ - t) / float(std::max<int64_t>(1, total_ - warmup_)));
  optimizer_->set_learning_rate(optimizer_->initial_learning_rate() * f);
}

}  // namespace onnxtrain::on_device
