// ModuleGraphBuilder (onnxruntime-training's OrtModuleGraphBuilder): the forward model with its
// weights turned into inputs, and the training graph cut by a YieldOp (autodiff's yield_outputs).
#include <algorithm>
#include <set>

#include "autodiff/builder.h"
#include "ir/emitter.h"
#include "ir/infer.h"
#include "ir/onnx_io.h"
#include "onnxtrain/agent.h"
#include "train/recompute.h"

namespace onnxtrain {

struct ModuleGraphBuilder::Impl {
  ir::Model model;
  ModuleGraphBuilderConfig config;
  bool initialized = false, built = false;
  std::string training_bytes, forward_bytes;
  ModuleGraphInfo info;

  void require(bool ok, const char* call) const {
    if (!ok) throw_error<InvalidArgument>("OrtModuleGraphBuilder: ", call);
  }
};

ModuleGraphBuilder::ModuleGraphBuilder() : impl_(std::make_unique<Impl>()) {}
ModuleGraphBuilder::~ModuleGraphBuilder() = default;
ModuleGraphBuilder::ModuleGraphBuilder(ModuleGraphBuilder&&) noexcept = default;
ModuleGraphBuilder& ModuleGraphBuilder::operator=(ModuleGraphBuilder&&) noexcept = default;

namespace {

// Throws InvalidArgument naming the first entry of `names` that is not in `allowed` (or repeats).
void check_names(const std::vector<std::string>& names, const std::set<std::string>& allowed, const char* field,
                 const char* what) {
  std::set<std::string> seen;
  for (const auto& n : names) {
    if (!allowed.count(n)) throw_error<InvalidArgument>("OrtModuleGraphBuilderConfiguration.", field, ": '", n, "' is not ", what);
    if (!seen.insert(n).second) throw_error<InvalidArgument>("OrtModuleGraphBuilderConfiguration.", field, ": '", n, "' is listed twice");
  }
}

// `shape` replaces the declared shape of input `vi` (whose rank and fixed dims must agree).
void set_input_shape(ir::ValueInfo& vi, const std::vector<int64_t>& shape) {
  ir::TypeInfo& t = vi.type;
  if (t.kind != ir::TypeInfo::Kind::kTensor)
    throw_error<InvalidArgument>("input_shapes: input '", vi.name, "' is not a tensor");
  if (t.has_shape && t.dims.size() != shape.size())
    throw_error<InvalidArgument>("input_shapes: input '", vi.name, "' has rank ", t.dims.size(), ", the shape given has ",
                                 shape.size(), " dimensions");
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) throw_error<InvalidArgument>("input_shapes: input '", vi.name, "': negative dimension ", shape[d]);
    if (t.has_shape && t.dims[d].fixed() && t.dims[d].value != shape[d])
      throw_error<InvalidArgument>("input_shapes: input '", vi.name, "' has dimension ", d, " fixed to ", t.dims[d].value,
                                   ", the shape given says ", shape[d]);
  }
  t = ir::TypeInfo::tensor(t.elem, shape);
}

}  // namespace

void ModuleGraphBuilder::initialize(const std::string& model_bytes, const ModuleGraphBuilderConfig& config) {
  if (config.enable_caching)
    throw_error<NotImplemented>("OrtModuleGraphBuilderConfiguration.enable_caching=True is not implemented by onnxtrain");
  if (config.use_memory_efficient_gradient)
    throw_error<NotImplemented>(
        "OrtModuleGraphBuilderConfiguration.use_memory_efficient_gradient=True is not implemented by onnxtrain");
  if (config.number_recompute_layers < 0)
    throw_error<InvalidArgument>("TrainingGraphTransformerConfiguration.number_recompute_layers must be >= 0, got ",
                                 config.number_recompute_layers);
  if (!config.non_default_transformers.empty()) {
    std::string names;
    for (const auto& n : config.non_default_transformers) names += (names.empty() ? "" : ", ") + n;
    throw_error<NotImplemented>("TrainingGraphTransformerConfiguration: ", names,
                                " not implemented by onnxtrain (only the defaults are)");
  }
  Impl& m = *impl_;
  m.model = ir::load_model_bytes(model_bytes.data(), model_bytes.size());
  const ir::Graph& g = *m.model.graph;
  std::set<std::string> inits, user_inputs;
  for (const auto& [n, t] : g.initializers) inits.insert(n);
  for (const auto& vi : g.inputs)
    if (!inits.count(vi.name)) user_inputs.insert(vi.name);
  check_names(config.initializer_names, inits, "initializer_names", "an initializer of the model");
  check_names(config.initializer_names_to_train, {config.initializer_names.begin(), config.initializer_names.end()},
              "initializer_names_to_train", "in initializer_names");
  check_names(config.input_names_require_grad, user_inputs, "input_names_require_grad", "an input of the model");
  m.config = config;
  m.initialized = true;
  m.built = false;
}

void ModuleGraphBuilder::build(const std::vector<std::vector<int64_t>>& input_shapes) {
  Impl& m = *impl_;
  m.require(m.initialized, "call initialize() before build()");
  const ModuleGraphBuilderConfig& c = m.config;
  ir::Model fwd = m.model;
  fwd.graph = std::make_shared<ir::Graph>(*m.model.graph);
  ir::Graph& g = *fwd.graph;
  ModuleGraphInfo info;

  // User inputs first (declared order), with the shapes asked for.
  std::vector<ir::ValueInfo> inputs;
  for (const auto& vi : g.inputs)
    if (!g.initializer(vi.name)) inputs.push_back(vi);
  if (!input_shapes.empty() && input_shapes.size() != inputs.size())
    throw_error<InvalidArgument>("input_shapes: ", input_shapes.size(), " shapes for ", inputs.size(), " user inputs");
  for (size_t k = 0; k < input_shapes.size(); ++k) set_input_shape(inputs[k], input_shapes[k]);
  for (const auto& vi : inputs) info.user_input_names.push_back(vi.name);
  // Then the weights, which leave the initializers.
  for (const auto& name : c.initializer_names) {
    const Tensor* t = g.initializer(name);
    inputs.push_back(ir::ValueInfo{name, ir::TypeInfo::tensor(t->dtype(), t->shape()), ""});
  }
  const std::set<std::string> moved(c.initializer_names.begin(), c.initializer_names.end());
  g.initializers.erase(std::remove_if(g.initializers.begin(), g.initializers.end(),
                                      [&](const auto& it) { return moved.count(it.first) > 0; }),
                       g.initializers.end());
  g.inputs = inputs;
  info.initializer_names = c.initializer_names;
  info.initializer_names_to_train = c.initializer_names_to_train;
  for (const auto& o : g.outputs) info.user_output_names.push_back(o.name);
  ir::infer_types(fwd);
  m.forward_bytes = ir::serialize_model(fwd);

  if (c.build_gradient_graph) {
    // xs: the float inputs asked for (declared order), then the weights to train.
    std::vector<std::string> xs;
    for (const auto& vi : g.inputs) {
      const bool asked = std::count(c.input_names_require_grad.begin(), c.input_names_require_grad.end(), vi.name) > 0;
      if (asked && vi.type.kind == ir::TypeInfo::Kind::kTensor && dtype_is_float(vi.type.elem)) {
        xs.push_back(vi.name);
        info.user_input_grad_names[vi.name] = vi.name + "_grad";
      }
    }
    for (const auto& w : c.initializer_names_to_train) {
      xs.push_back(w);
      info.initializer_grad_names_to_train.push_back(w + "_grad");
    }
    autodiff::BuildOptions o;
    o.yield_outputs = info.user_output_names;
    ir::Model train = autodiff::build_gradient_model(fwd, {}, xs, "", o);
    train::RecomputeConfig rc;
    rc.attn_dropout = c.attn_dropout_recompute;
    rc.gelu = c.gelu_recompute;
    rc.transformer_layer = c.transformer_layer_recompute;
    rc.number_layers = c.number_recompute_layers;
    train::apply_recompute(train, *fwd.graph, rc);
    const ir::Graph& tg = *train.graph;
    for (const auto& n : tg.nodes)
      if (n.domain == ir::kMicrosoftDomain && n.op_type == "YieldOp") {
        const ir::Attribute* full = n.attr("full_shape_outputs");
        for (size_t k = 0; k < n.outputs.size(); ++k) {
          if (n.outputs[k].empty()) {
            info.output_grad_indices_non_differentiable.push_back(int64_t(k));
            continue;
          }
          if (full && std::count(full->ints.begin(), full->ints.end(), int64_t(k)))
            info.output_grad_indices_require_full_shape.push_back(int64_t(k));
          info.module_output_gradient_name.push_back(n.outputs[k]);
        }
      }
    m.training_bytes = ir::serialize_model(train);
  } else {
    m.training_bytes.clear();
  }
  m.info = std::move(info);
  m.built = true;
}

std::string ModuleGraphBuilder::get_model() const {
  impl_->require(impl_->built, "call build() before get_model()");
  impl_->require(impl_->config.build_gradient_graph,
                 "get_model(): build_gradient_graph is False, only the forward model was built");
  return impl_->training_bytes;
}

std::string ModuleGraphBuilder::get_inference_optimized_model() const {
  impl_->require(impl_->built, "call build() before get_inference_optimized_model()");
  return impl_->forward_bytes;
}

const ModuleGraphInfo& ModuleGraphBuilder::graph_info() const {
  impl_->require(impl_->built, "call build() before get_graph_info()");
  return impl_->info;
}

}  // namespace onnxtrain
