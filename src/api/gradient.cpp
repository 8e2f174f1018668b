#include "onnxtrain/gradient.h"

#include "autodiff/builder.h"
#include "ir/onnx_io.h"

namespace onnxtrain {

struct GradientGraphBuilder::Impl {
  ir::Model model;
  std::vector<std::string> ys, xs;
  std::string loss;
  bool portable = false;
  bool built = false;
  ir::Model result;
};

GradientGraphBuilder::GradientGraphBuilder(const std::string& model_bytes, const std::set<std::string>& ys,
                                           const std::set<std::string>& xs, const std::string& loss, bool portable,
                                           const std::string& base_dir)
    : impl_(std::make_unique<Impl>()) {
  impl_->model = ir::load_model_bytes(model_bytes.data(), model_bytes.size(), base_dir);
  impl_->ys.assign(ys.begin(), ys.end());
  impl_->xs.assign(xs.begin(), xs.end());
  impl_->loss = loss;
  impl_->portable = portable;
  if (xs.empty()) throw_error<InvalidArgument>("x_node_arg_names is empty: nothing to differentiate");
}

GradientGraphBuilder::~GradientGraphBuilder() = default;
GradientGraphBuilder::GradientGraphBuilder(GradientGraphBuilder&&) noexcept = default;
GradientGraphBuilder& GradientGraphBuilder::operator=(GradientGraphBuilder&&) noexcept = default;

void GradientGraphBuilder::build() {
  autodiff::BuildOptions o;
  o.portable = impl_->portable;
  impl_->result = autodiff::build_gradient_model(impl_->model, impl_->ys, impl_->xs, impl_->loss, o);
  impl_->built = true;
}

std::string GradientGraphBuilder::get_model() const {
  if (!impl_->built) throw_error<InvalidArgument>("GradientGraphBuilder: call build() before get_model()");
  return ir::serialize_model(impl_->result);
}

void GradientGraphBuilder::save(const std::string& path, const ModelSaveOptions& options) const {
  if (!impl_->built) throw_error<InvalidArgument>("GradientGraphBuilder: call build() before save()");
  ir::save_model(impl_->result, path, options);
}

}  // namespace onnxtrain
