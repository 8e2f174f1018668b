// Provider-neutral view operators (src/kernels/shape/: any provider's kernels use them): Reshape,
// Flatten, Squeeze and Unsqueeze. prepare() declares the output a view of input 0 with its new
// shape (dynamic when the shape needs values known only while running: prepared again then); run()
// copies only where the executor could not make the view. A provider supplies the Policy:
//   static void check(const PrepareContext&)  declines (NotImplemented) what it cannot hold
//   static void copy(RunContext&)             output 0 = input 0, on its device
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "kernels/kernel.h"
#include "kernels/shape/reshape.h"

namespace onnxtrain::kernels::shape {

template <class Policy>
class ViewKernel : public Kernel {
 public:
  void prepare(PrepareContext& ctx) override {
    Policy::check(ctx);
    Shape s;
    if (!target(ctx, &s)) {
      ctx.set_output_dynamic(0, ctx.input_dtype(0));
      return;
    }
    ctx.set_output_alias(0, 0, std::move(s));
  }
  void run(RunContext& ctx) override {
    if (!ctx.output_aliases_input(0, 0)) Policy::copy(ctx);
  }

 protected:
  /// The output's shape; false when it needs input values not known yet.
  virtual bool target(const PrepareContext& ctx, Shape* out) = 0;
};

// Reshape-1..4 takes the shape as an attribute; 5+ as input 1; 14 adds allowzero.
template <class Policy>
class ReshapeView final : public ViewKernel<Policy> {
 public:
  explicit ReshapeView(const KernelInfo& info) : at_(read_reshape_attrs(info)) {}

 private:
  bool target(const PrepareContext& ctx, Shape* out) override { return reshape_shape(ctx, at_, out); }
  ReshapeAttrs at_;
};

// Flatten: axis in [0, r] (opset < 11) or [-r, r].
template <class Policy>
class FlattenView final : public ViewKernel<Policy> {
 public:
  explicit FlattenView(const KernelInfo& info) : axis_(info.attr_int("axis", 1)), negative_ok_(info.opset() >= 11) {}

 private:
  bool target(const PrepareContext& ctx, Shape* out) override {
    *out = flatten_shape(ctx, axis_, negative_ok_);
    return true;
  }
  int64_t axis_;
  bool negative_ok_;
};

template <class Policy>
class SqueezeView final : public ViewKernel<Policy> {
 public:
  explicit SqueezeView(const KernelInfo& info) : at_(read_squeeze_attrs(info)) {}

 private:
  bool target(const PrepareContext& ctx, Shape* out) override { return squeeze_shape(ctx, at_, out); }
  AxesAttrs at_;
};

template <class Policy>
class UnsqueezeView final : public ViewKernel<Policy> {
 public:
  explicit UnsqueezeView(const KernelInfo& info) : at_(read_unsqueeze_attrs(info)) {}

 private:
  bool target(const PrepareContext& ctx, Shape* out) override { return unsqueeze_shape(ctx, at_, out); }
  AxesAttrs at_;
};

template <template <class> class K, class Policy>
KernelFactory view_factory() {
  return [](const KernelInfo& info) -> std::unique_ptr<Kernel> { return std::make_unique<K<Policy>>(info); };
}

/// Registers the four view operators with `Policy`, by opset range; the shape and axes inputs
/// (Reshape 5+, Squeeze and Unsqueeze 13+) are read in host memory.
template <class Policy>
void register_views(KernelRegistry& r) {
  r.add("", "Reshape", 1, 4, view_factory<ReshapeView, Policy>());                  // shape attribute
  r.add("", "Reshape", 5, kMaxOpsetAll, view_factory<ReshapeView, Policy>(), {1});  // shape input; 14: allowzero
  r.add("", "Flatten", 1, 10, view_factory<FlattenView, Policy>());                 // axis in [0, r]
  r.add("", "Flatten", 11, kMaxOpsetAll, view_factory<FlattenView, Policy>());      // negative axis
  r.add("", "Squeeze", 1, 12, view_factory<SqueezeView, Policy>());                 // axes attribute (11: negative)
  r.add("", "Squeeze", 13, kMaxOpsetAll, view_factory<SqueezeView, Policy>(), {1}); // axes input
  r.add("", "Unsqueeze", 1, 12, view_factory<UnsqueezeView, Policy>());
  r.add("", "Unsqueeze", 13, kMaxOpsetAll, view_factory<UnsqueezeView, Policy>(), {1});
}

}  // namespace onnxtrain::kernels::shape
