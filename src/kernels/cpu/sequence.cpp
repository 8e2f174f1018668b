// Sequences and optionals.
//   SequenceEmpty (dtype)                    -> []
//   SequenceConstruct (X_0, ..., X_n-1)       -> [X_0, ..., X_n-1]
//   SequenceInsert (S, T, position = len(S))  -> S with T inserted before `position`
//   SequenceAt (S, position)                  -> S[position]
//   SequenceErase (S, position = -1)          -> S without S[position]
//   SequenceLength (S)                        -> len(S), int64 scalar
//   SplitToSequence (X, split?; axis, keepdims)      -> the pieces of X along axis
//   ConcatFromSequence (S; axis, new_axis)            -> concatenation (new_axis: stacking) of S
//   Optional (X?; type), OptionalHasElement (O), OptionalGetElement (O)
// Positions are int32/int64 scalars, negative ones counting from the back; out of range fails
// naming the node, the position and the length.
//
// Ownership: a sequence owns its tensors, and every sequence these kernels produce holds tensors of
// its own: SequenceConstruct, SequenceInsert, SequenceErase and SplitToSequence copy what they take
// (as onnxruntime does), never keeping a view of an arena buffer, of a caller's array or of another
// sequence's tensor. This matters because some kernels do write into a sequence's tensors (the
// com.microsoft optimizers and InplaceClipGradNorm update their input sequences in place): a sequence
// one node produced is never changed through another node's result. SequenceAt hands out a copy.
// Sequence outputs are dynamic: their consumers are prepared when the node has run.
//
// An empty optional is no value (Value::Kind::kNone): its readers see has_input() false.
#include "kernels/shape/sequence.h"

#include <algorithm>

#include "kernels/cpu/common.h"
#include "kernels/registry.h"

namespace onnxtrain::kernels::cpu {

namespace {

// The element type of a sequence value: declared, else its first tensor's (undefined when neither).
DType element_type(const Value& s) {
  if (s.elem != DType::kUndefined || s.sequence.empty()) return s.elem;
  return s.sequence[0].dtype();
}

// A new sequence value holding tensors of type `elem`.
Value new_sequence(DType elem) {
  Value v;
  v.kind = Value::Kind::kSequence;
  v.elem = elem;
  return v;
}

const Tensor* optional_input(const RunContext& ctx, size_t i) { return ctx.has_input(i) ? &ctx.input(i) : nullptr; }

// One row of a [outer, width] tensor `whole` is the side-by-side rows of parts [outer, w_k]:
// gathered into `whole` (ConcatFromSequence) or scattered out of it (SplitToSequence).
struct Part {
  void* data;
  int64_t width;
};
void move_rows(const ir::Node& node, DType dt, void* whole, int64_t outer, const std::vector<Part>& parts,
               bool gather) {
  dispatch_by_size(dt, node, [&]<class T>() {
    T* w = static_cast<T*>(whole);
    int64_t row = 0;
    for (const Part& p : parts) row += p.width;
    for (int64_t o = 0; o < outer; ++o) {
      T* at = w + o * row;
      for (const Part& p : parts) {
        T* part = static_cast<T*>(p.data) + o * p.width;
        if (gather)
          std::copy_n(part, p.width, at);
        else
          std::copy_n(at, p.width, part);
        at += p.width;
      }
    }
  });
}

// ---------------------------------------------------------------- SequenceEmpty
class SequenceEmptyKernel final : public Kernel {
 public:
  explicit SequenceEmptyKernel(const KernelInfo& info)
      : elem_(static_cast<DType>(info.attr_int("dtype", int64_t(DType::kFloat32)))) {
    if (!dtype_supported(elem_)) info.fail("dtype ", int64_t(elem_), " is not a supported tensor element type");
  }
  void prepare(PrepareContext& ctx) override { ctx.set_output_sequence(0, elem_); }
  void run(RunContext& ctx) override { ctx.output_value(0) = new_sequence(elem_); }

 private:
  DType elem_;
};

// ---------------------------------------------------------------- SequenceConstruct
class SequenceConstructKernel final : public Kernel {
 public:
  explicit SequenceConstructKernel(const KernelInfo& info) {
    if (info.node().inputs.empty()) info.fail("takes at least one tensor");
  }
  void prepare(PrepareContext& ctx) override {
    for (size_t i = 0; i < ctx.num_inputs(); ++i) shape::check_tensor_input(ctx, i, "every input");
    check_same_dtype(ctx, 0, ctx.num_inputs());
    ctx.set_output_sequence(0, ctx.input_dtype(0));
  }
  void run(RunContext& ctx) override {
    Value s = new_sequence(ctx.input(0).dtype());
    s.sequence.reserve(ctx.num_inputs());
    for (size_t i = 0; i < ctx.num_inputs(); ++i) s.sequence.push_back(ctx.input(i).clone());
    ctx.output_value(0) = std::move(s);
  }
};

// ---------------------------------------------------------------- SequenceInsert, SequenceErase
// A copy of the sequence with one tensor more (SequenceInsert: input 1 before position input 2) or
// less (SequenceErase: the one at position input 1).
class SequenceEditKernel final : public Kernel {
 public:
  SequenceEditKernel(const KernelInfo&, bool insert) : insert_(insert), pos_(insert ? 2 : 1) {}
  void prepare(PrepareContext& ctx) override {
    shape::check_sequence_input(ctx, 0);
    if (insert_) {
      shape::check_tensor_input(ctx, 1, kInserted);
      shape::check_element_type(ctx.node(), ctx.input_dtype(0), ctx.input_dtype(1), kInserted);
    }
    shape::check_index_input(ctx, pos_, "position", true);
    ctx.set_output_sequence(0, ctx.input_dtype(insert_ ? 1 : 0));
  }
  void run(RunContext& ctx) override {
    const Value& in = ctx.input_value(0);
    const Tensor* t = insert_ ? &ctx.input(1) : nullptr;
    if (t) shape::check_element_type(ctx.node(), element_type(in), t->dtype(), kInserted);
    const size_t n = in.sequence.size();
    const auto at = size_t(shape::sequence_position(ctx.node(), optional_input(ctx, pos_), n, insert_));
    Value s = new_sequence(t ? t->dtype() : element_type(in));
    s.sequence.reserve(n + 1);
    for (size_t i = 0; i <= n; ++i) {
      if (t && i == at) s.sequence.push_back(t->clone());
      if (i < n && (t || i != at)) s.sequence.push_back(in.sequence[i].clone());
    }
    ctx.output_value(0) = std::move(s);
  }

 private:
  static constexpr const char* kInserted = "the tensor to insert";
  bool insert_;
  size_t pos_;
};

// ---------------------------------------------------------------- SequenceAt
class SequenceAtKernel final : public Kernel {
 public:
  explicit SequenceAtKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    shape::check_sequence_input(ctx, 0);
    if (!ctx.has_input(1)) ctx.fail("position (input 1) is missing");
    shape::check_index_input(ctx, 1, "position", true);
    ctx.set_output_dynamic(0, ctx.input_dtype(0));
  }
  void run(RunContext& ctx) override {
    const Value& in = ctx.input_value(0);
    const Tensor& e =
        in.sequence[size_t(shape::sequence_position(ctx.node(), &ctx.input(1), in.sequence.size(), false))];
    ctx.allocate_output(0, e.dtype(), e.shape()).copy_from(e);
  }
};

// ---------------------------------------------------------------- SequenceLength
class SequenceLengthKernel final : public Kernel {
 public:
  explicit SequenceLengthKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    shape::check_sequence_input(ctx, 0);
    ctx.set_output(0, DType::kInt64, {});
  }
  void run(RunContext& ctx) override { *ctx.output(0).data<int64_t>() = int64_t(ctx.input_value(0).sequence.size()); }
};

// ---------------------------------------------------------------- SplitToSequence
class SplitToSequenceKernel final : public Kernel {
 public:
  explicit SplitToSequenceKernel(const KernelInfo& info) : at_(shape::read_sequence_axis_attrs(info, true)) {}
  void prepare(PrepareContext& ctx) override {
    shape::check_tensor_input(ctx, 0, "the input");
    shape::check_index_input(ctx, 1, "split", false);
    if (!ctx.has_input(1) || ctx.input_value(1))  // checked now when the split is known
      shape::split_to_sequence_geometry(ctx.node(), at_, ctx.input_shape(0), ctx.input_value(1));
    ctx.set_output_sequence(0, ctx.input_dtype(0));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const shape::SplitToSequenceGeom g =
        shape::split_to_sequence_geometry(ctx.node(), at_, x.shape(), optional_input(ctx, 1));
    const auto axis = size_t(g.axis);
    const int64_t outer = dim_product(x.shape(), 0, axis), inner = dim_product(x.shape(), axis + 1, x.rank());
    Value s = new_sequence(x.dtype());
    std::vector<Part> parts;
    for (int64_t size : g.sizes) {
      Shape piece = x.shape();
      piece[axis] = size;
      if (g.squeeze) piece.erase(piece.begin() + long(axis));
      s.sequence.push_back(Tensor::empty(x.dtype(), piece));
      parts.push_back(Part{s.sequence.back().raw_data(), size * inner});
    }
    move_rows(ctx.node(), x.dtype(), const_cast<void*>(x.raw_data()), outer, parts, false);
    ctx.output_value(0) = std::move(s);
  }

 private:
  shape::SequenceAxisAttrs at_;
};

// ---------------------------------------------------------------- ConcatFromSequence
class ConcatFromSequenceKernel final : public Kernel {
 public:
  explicit ConcatFromSequenceKernel(const KernelInfo& info) : at_(shape::read_sequence_axis_attrs(info, false)) {}
  void prepare(PrepareContext& ctx) override {
    shape::check_sequence_input(ctx, 0);
    ctx.set_output_dynamic(0, ctx.input_dtype(0));
  }
  void run(RunContext& ctx) override {
    const std::vector<Tensor>& seq = ctx.input_value(0).sequence;
    const shape::ConcatFromSequenceGeom g = shape::concat_from_sequence_geometry(ctx.node(), at_, seq);
    const auto axis = size_t(g.axis);
    const DType dt = seq[0].dtype();
    Tensor& y = ctx.allocate_output(0, dt, g.output);
    // Rows of the output: [outer, sum of the pieces' widths] with outer the product of the dims
    // before the axis; each tensor contributes its elements from the axis on.
    const int64_t outer = dim_product(g.output, 0, axis);
    std::vector<Part> parts;
    for (const Tensor& t : seq)
      parts.push_back(Part{const_cast<void*>(t.raw_data()), outer > 0 ? t.numel() / outer : 0});
    move_rows(ctx.node(), dt, y.raw_data(), outer, parts, true);
  }

 private:
  shape::SequenceAxisAttrs at_;
};

// ---------------------------------------------------------------- Optional
// Optional(X) is X; Optional() with its `type` attribute an empty optional.
class OptionalKernel final : public Kernel {
 public:
  explicit OptionalKernel(const KernelInfo& info) {
    const auto& in = info.node().inputs;
    if ((in.empty() || in[0].empty()) && !info.has_attr("type"))
      info.fail("an Optional without input needs the 'type' attribute (the element type of the empty optional)");
  }
  void prepare(PrepareContext& ctx) override {
    if (ctx.has_input(0)) return identity_prepare(ctx);
    ctx.set_output_dynamic(0, DType::kUndefined);
    // An empty optional is no value, which the planner cannot hold as a folded constant.
    ctx.set_nondeterministic();
  }
  void run(RunContext& ctx) override {
    if (ctx.has_input(0)) return identity_run(ctx);
    Value none;
    none.optional = true;
    ctx.output_value(0) = std::move(none);
  }
};

class OptionalHasElementKernel final : public Kernel {
 public:
  explicit OptionalHasElementKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override { ctx.set_output(0, DType::kBool, {}); }
  void run(RunContext& ctx) override { *ctx.output(0).data<bool>() = ctx.has_input(0); }
};

class OptionalGetElementKernel final : public Kernel {
 public:
  explicit OptionalGetElementKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    if (!ctx.has_input(0)) ctx.fail("the optional is empty: it has no element to get");
    identity_prepare(ctx);
  }
  void run(RunContext& ctx) override {
    if (!ctx.has_input(0)) ctx.fail("the optional is empty: it has no element to get");
    identity_run(ctx);
  }
};

}  // namespace

void register_sequence(KernelRegistry& r) {
  // ONNX defines each of these once: the sequence operators at opset 11, the optionals at 15
  // (opset 18's OptionalHasElement/OptionalGetElement also take a plain tensor or sequence, which
  // these kernels accept).
  r.add<SequenceEmptyKernel>("SequenceEmpty", 11, kMaxOpsetAll);
  r.add<SequenceConstructKernel>("SequenceConstruct", 11, kMaxOpsetAll);
  for (bool insert : {true, false})
    r.add(insert ? "SequenceInsert" : "SequenceErase", 11, kMaxOpsetAll,
          [insert](const KernelInfo& info) -> std::unique_ptr<Kernel> {
            return std::make_unique<SequenceEditKernel>(info, insert);
          });
  r.add<SequenceAtKernel>("SequenceAt", 11, kMaxOpsetAll);
  r.add<SequenceLengthKernel>("SequenceLength", 11, kMaxOpsetAll);
  r.add<SplitToSequenceKernel>("SplitToSequence", 11, kMaxOpsetAll);
  r.add<ConcatFromSequenceKernel>("ConcatFromSequence", 11, kMaxOpsetAll);
  r.add<OptionalKernel>("Optional", 15, kMaxOpsetAll);
  r.add<OptionalHasElementKernel>("OptionalHasElement", 15, kMaxOpsetAll);
  r.add<OptionalGetElementKernel>("OptionalGetElement", 15, kMaxOpsetAll);
}

}  // namespace onnxtrain::kernels::cpu
