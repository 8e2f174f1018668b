#include "kernels/shape/sequence.h"

#include "kernels/shape/common.h"

namespace onnxtrain::kernels::shape {

namespace {

const char* seq_kind_text(Value::Kind k) {
  switch (k) {
    case Value::Kind::kTensor:
      return "a tensor";
    case Value::Kind::kSequence:
      return "a sequence";
    case Value::Kind::kMap:
      return "a map";
    case Value::Kind::kMapSequence:
      return "a sequence of maps (the sequence operators take sequences of tensors)";
    default:
      return "nothing (absent, or an empty optional)";
  }
}

}  // namespace

void check_sequence_input(const PrepareContext& ctx, size_t i) {
  if (ctx.input_kind(i) != Value::Kind::kSequence)
    ctx.fail("input ", i, " must be a sequence of tensors, got ", seq_kind_text(ctx.input_kind(i)));
}

void check_tensor_input(const PrepareContext& ctx, size_t i, const char* what) {
  if (ctx.input_kind(i) != Value::Kind::kTensor)
    ctx.fail(what, " (input ", i, ") must be a tensor, got ", seq_kind_text(ctx.input_kind(i)));
}

void check_index_input(const PrepareContext& ctx, size_t i, const char* what, bool scalar) {
  if (!ctx.has_input(i)) return;
  check_tensor_input(ctx, i, what);
  const DType dt = ctx.input_dtype(i);
  if (dt != DType::kInt32 && dt != DType::kInt64)
    ctx.fail(what, " (input ", i, ") must be int32 or int64, got ", dtype_name(dt));
  if (scalar && shape_numel(ctx.input_shape(i)) != 1)
    ctx.fail(what, " (input ", i, ") must be a scalar, got shape ", shape_to_string(ctx.input_shape(i)));
  if (!scalar && ctx.input_rank(i) > 1)
    ctx.fail(what, " (input ", i, ") must be a scalar or 1-D, got shape ", shape_to_string(ctx.input_shape(i)));
}

void check_element_type(const ir::Node& node, DType elem, DType dt, const char* what) {
  if (elem != DType::kUndefined && dt != elem)
    NodeFail{node}.fail(what, " has element type ", dtype_name(dt), ", the sequence holds ", dtype_name(elem),
                        " tensors");
}

int64_t sequence_position(const ir::Node& node, const Tensor* pos, size_t length, bool insert) {
  const NodeFail f{node};
  const int64_t n = int64_t(length);
  if (!pos) {
    if (insert) return n;
    if (n == 0) f.fail("the sequence is empty: there is no tensor to remove");
    return n - 1;
  }
  if (pos->numel() != 1) f.fail("the position must be a scalar, got ", pos->describe());
  const int64_t p = read_int_list(*pos)[0];
  const int64_t hi = insert ? n : n - 1;
  if (p < -n || p > hi) {
    if (n == 0 && !insert) f.fail("position ", p, " is out of range: the sequence is empty");
    f.fail("position ", p, " is out of range for a sequence of length ", n, " (accepted: ", -n, " to ", hi, ")");
  }
  return p < 0 ? p + n : p;
}

SequenceAxisAttrs read_sequence_axis_attrs(const KernelInfo& info, bool split) {
  SequenceAxisAttrs at;
  at.axis = split ? info.attr_int("axis", 0) : info.attr_int("axis");
  const char* name = split ? "keepdims" : "new_axis";
  const int64_t flag = info.attr_int(name, split ? 1 : 0);
  if (flag != 0 && flag != 1) info.fail(name, " must be 0 or 1, got ", flag);
  at.flag = flag == 1;
  return at;
}

SplitToSequenceGeom split_to_sequence_geometry(const ir::Node& node, const SequenceAxisAttrs& at, const Shape& x,
                                               const Tensor* split) {
  const NodeFail f{node};
  if (x.empty()) f.fail("the input must have rank >= 1 to be split, got a scalar");
  SplitToSequenceGeom g;
  g.axis = normalize_axis(f, at.axis, int64_t(x.size()));
  const int64_t d = x[size_t(g.axis)];
  if (!split) {
    check_table_size(f, d, sizeof(Tensor), "the sequence");
    g.sizes.assign(size_t(d), 1);
    g.squeeze = !at.flag;
    return g;
  }
  const std::vector<int64_t> v = read_int_list(*split);
  if (split->rank() == 0) {
    const int64_t k = v[0];
    if (k <= 0) f.fail("split ", k, " must be positive (the length of each piece)");
    check_table_size(f, (d + k - 1) / k, sizeof(Tensor), "the sequence");
    for (int64_t done = 0; done < d; done += k) g.sizes.push_back(std::min(k, d - done));
    return g;
  }
  int64_t sum = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 0) f.fail("split[", i, "] = ", v[i], " is negative");
    if (__builtin_add_overflow(sum, v[i], &sum)) f.fail("the split sizes overflow int64");
  }
  if (sum != d)
    f.fail("the split sizes sum to ", sum, " but axis ", g.axis, " of the input (shape ", shape_to_string(x), ") has ",
           d, " elements");
  g.sizes = v;
  return g;
}

ConcatFromSequenceGeom concat_from_sequence_geometry(const ir::Node& node, const SequenceAxisAttrs& at,
                                                     const std::vector<Tensor>& seq) {
  const NodeFail f{node};
  const bool new_axis = at.flag;
  if (seq.empty()) f.fail("cannot concatenate an empty sequence (the output's shape would be unknown)");
  const Tensor& first = seq[0];
  const int64_t rank = int64_t(first.rank());
  if (rank == 0 && !new_axis) f.fail("the sequence holds scalars: they concatenate only with new_axis = 1");
  ConcatFromSequenceGeom g;
  g.axis = normalize_axis(f, at.axis, new_axis ? rank + 1 : rank);
  g.output = first.shape();
  if (new_axis) g.output.insert(g.output.begin() + g.axis, 0);
  else g.output[size_t(g.axis)] = 0;  // the sum of the tensors' dims, below
  for (size_t i = 0; i < seq.size(); ++i) {
    const Tensor& t = seq[i];
    if (t.dtype() != first.dtype())
      f.fail("tensor ", i, " of the sequence is ", dtype_name(t.dtype()), ", tensor 0 is ", dtype_name(first.dtype()));
    if (int64_t(t.rank()) != rank)
      f.fail("tensor ", i, " of the sequence has shape ", shape_to_string(t.shape()), ", tensor 0 has ",
             shape_to_string(first.shape()), ": the ranks differ");
    for (int64_t a = 0; a < rank; ++a)
      if (t.dim(size_t(a)) != first.dim(size_t(a)) && (new_axis || a != g.axis))
        f.fail("tensor ", i, " of the sequence has shape ", shape_to_string(t.shape()), ", tensor 0 has ",
               shape_to_string(first.shape()), ": they differ at axis ", a,
               new_axis ? " (stacking needs equal shapes)" : "");
    int64_t& out = g.output[size_t(g.axis)];
    if (__builtin_add_overflow(out, new_axis ? 1 : t.dim(size_t(g.axis)), &out))
      f.fail("the output's dimension along axis ", g.axis, " overflows int64");
  }
  check_output_size(f, g.output, first.dtype());
  return g;
}

}  // namespace onnxtrain::kernels::shape
