// Sequence and optional operators on hand-built graphs: SequenceEmpty/Construct/Insert/At/Erase/
// Length against std::vector operations, SplitToSequence and ConcatFromSequence against naive
// index-by-index references, sequences fed and returned, the ownership rule (inserting into a
// sequence leaves it unchanged for its other readers), SequenceMap against the per-element
// computation, Optional/OptionalHasElement/OptionalGetElement, and the error cases (each names the
// node and what is wrong).
#include <gtest/gtest.h>

#include "autodiff/builder.h"
#include "onnxtrain/error.h"
#include "runtime/executor.h"
#include "runtime/feeds.h"
#include "test_provider.h"
#include "test_util.h"

using namespace ot_test;
using onnxtrain::Value;

namespace {

// `text` holds `part` (error messages).
::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

ir::TypeInfo seq_type(DType dt) {
  ir::TypeInfo t;
  t.kind = ir::TypeInfo::Kind::kSequence;
  t.inner = std::make_shared<ir::TypeInfo>(ir::TypeInfo::tensor(dt));
  return t;
}

ir::TypeInfo optional_type(const ir::TypeInfo& inner) {
  ir::TypeInfo t;
  t.kind = ir::TypeInfo::Kind::kOptional;
  t.inner = std::make_shared<ir::TypeInfo>(inner);
  return t;
}

ir::ValueInfo seq_input(const std::string& name, DType dt = DType::kFloat32) {
  return ir::ValueInfo{name, seq_type(dt), ""};
}

std::shared_ptr<ir::Graph> graph(std::vector<ir::Node> nodes, std::vector<ir::ValueInfo> inputs,
                                 std::vector<std::string> outputs) {
  auto g = std::make_shared<ir::Graph>();
  g->name = "main";
  g->nodes = std::move(nodes);
  g->inputs = std::move(inputs);
  for (auto& o : outputs) g->outputs.push_back(ir::ValueInfo{o, {}, ""});
  return g;
}

Value seq_of(std::vector<Tensor> ts, DType elem = DType::kFloat32) {
  Value v;
  v.kind = Value::Kind::kSequence;
  v.elem = elem;
  v.sequence = std::move(ts);
  return v;
}

Tensor i64(int64_t v) { return Tensor::scalar<int64_t>(v); }

// Runs `g` on `feeds` (in input order) twice, and once more with the test provider first (which
// must agree bit for bit); returns the second run's outputs.
std::vector<Value> run_graph(std::shared_ptr<ir::Graph> g, const std::vector<Value>& feeds, int64_t opset = 17) {
  const onnxtrain::OpsetMap opsets{{"", opset}};
  onnxtrain::runtime::GraphExecutor ex(g, opsets, onnxtrain::ExecOptions{});
  std::vector<const Value*> ptrs;
  for (const auto& v : feeds) ptrs.push_back(&v);
  auto first = ex.run(ptrs);
  EXPECT_EQ(check_providers_agree(g, opsets, onnxtrain::ExecOptions{}, ptrs, first), "");
  auto second = ex.run(ptrs);
  EXPECT_EQ(first.size(), second.size());
  return second;
}

std::string error_of(std::shared_ptr<ir::Graph> g, const std::vector<Value>& feeds, int64_t opset = 17) {
  try {
    run_graph(std::move(g), feeds, opset);
  } catch (const onnxtrain::Error& e) {
    return e.what();
  }
  return "no error";
}

// Same dtype, shape and elements (exact: sequence operators move data, they compute nothing).
::testing::AssertionResult same(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape())
    return ::testing::AssertionFailure() << got.describe() << " != expected " << want.describe();
  if (want.dtype() == DType::kString) {
    for (int64_t i = 0; i < want.numel(); ++i)
      if (got.data<std::string>()[i] != want.data<std::string>()[i])
        return ::testing::AssertionFailure() << "string [" << i << "] differs";
    return ::testing::AssertionSuccess();
  }
  const auto a = to_double(got), b = to_double(want);
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return ::testing::AssertionFailure() << "[" << i << "] " << a[i] << " != expected " << b[i];
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult same_sequence(const Value& got, const std::vector<Tensor>& want) {
  if (got.kind != Value::Kind::kSequence) return ::testing::AssertionFailure() << "not a sequence";
  if (got.sequence.size() != want.size())
    return ::testing::AssertionFailure() << "length " << got.sequence.size() << " != expected " << want.size();
  for (size_t i = 0; i < want.size(); ++i) {
    auto r = same(got.sequence[i], want[i]);
    if (!r) return ::testing::AssertionFailure() << "tensor " << i << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

int64_t scalar_of(const Value& v) { return v.tensor.data<int64_t>()[0]; }

// Three float tensors of different shapes and values.
std::vector<Tensor> three(std::mt19937& rng) {
  return {random_tensor(DType::kFloat32, {2, 3}, rng), random_tensor(DType::kFloat32, {4}, rng),
          random_tensor(DType::kFloat32, {1, 1, 2}, rng)};
}

}  // namespace

TEST(Sequence, ConstructLengthAndAtWithNegativePositions) {
  std::mt19937 rng(11);
  const auto t = three(rng);
  // s = [a, b, c]; n = len(s); each position p in [-3, 2] read back.
  std::vector<ir::Node> nodes{make_node("SequenceConstruct", {"a", "b", "c"}, {"s"}),
                              make_node("SequenceLength", {"s"}, {"n"})};
  std::vector<std::string> outs{"s", "n"};
  std::vector<ir::ValueInfo> ins{value_info("a"), value_info("b"), value_info("c")};
  std::vector<Value> feeds{Value::of(t[0]), Value::of(t[1]), Value::of(t[2])};
  for (int64_t p = -3; p <= 2; ++p) {
    const std::string pn = numbered("p", size_t(p + 3)), on = numbered("at", size_t(p + 3));
    nodes.push_back(make_node("SequenceAt", {"s", pn}, {on}));
    ins.push_back(value_info(pn, DType::kInt64, {}));
    feeds.push_back(Value::of(i64(p)));
    outs.push_back(on);
  }
  auto r = run_graph(graph(nodes, ins, outs), feeds);
  EXPECT_TRUE(same_sequence(r[0], t));
  EXPECT_EQ(scalar_of(r[1]), 3);
  for (int64_t p = -3; p <= 2; ++p) EXPECT_TRUE(same(r[size_t(p + 5)].tensor, t[size_t(p < 0 ? p + 3 : p)])) << p;
}

TEST(Sequence, InsertAtEveryPositionMatchesVectorInsert) {
  std::mt19937 rng(12);
  const auto t = three(rng);
  const Tensor x = random_tensor(DType::kFloat32, {5}, rng);
  auto g = graph({make_node("SequenceInsert", {"s", "x", "p"}, {"y"})},
                 {seq_input("s"), value_info("x"), value_info("p", DType::kInt32, {})}, {"y"});
  for (int32_t p = -3; p <= 3; ++p) {
    std::vector<Tensor> want = t;
    want.insert(want.begin() + (p < 0 ? p + 3 : p), x);
    auto r = run_graph(g, {seq_of(t), Value::of(x), Value::of(Tensor::scalar<int32_t>(p))});
    EXPECT_TRUE(same_sequence(r[0], want)) << "position " << p;
  }
  // Without a position: appended.
  auto append = graph({make_node("SequenceInsert", {"s", "x"}, {"y"})}, {seq_input("s"), value_info("x")}, {"y"});
  std::vector<Tensor> want = t;
  want.push_back(x);
  EXPECT_TRUE(same_sequence(run_graph(append, {seq_of(t), Value::of(x)})[0], want));
}

TEST(Sequence, EraseAtEveryPositionMatchesVectorErase) {
  std::mt19937 rng(13);
  const auto t = three(rng);
  auto g = graph({make_node("SequenceErase", {"s", "p"}, {"y"})}, {seq_input("s"), value_info("p", DType::kInt64, {})},
                 {"y"});
  for (int64_t p = -3; p <= 2; ++p) {
    std::vector<Tensor> want = t;
    want.erase(want.begin() + (p < 0 ? p + 3 : p));
    EXPECT_TRUE(same_sequence(run_graph(g, {seq_of(t), Value::of(i64(p))})[0], want)) << "position " << p;
  }
  // Without a position: the last one.
  auto last = graph({make_node("SequenceErase", {"s"}, {"y"})}, {seq_input("s")}, {"y"});
  EXPECT_TRUE(same_sequence(run_graph(last, {seq_of(t)})[0], {t[0], t[1]}));
}

TEST(Sequence, EmptySequenceOfTheDeclaredType) {
  // SequenceEmpty(dtype int64) -> length 0; inserting an int64 tensor twice builds [x, x].
  const Tensor x = Tensor::from_vector<int64_t>({2}, {7, -8});
  auto g = graph({make_node("SequenceEmpty", {}, {"e"}, {attr_int("dtype", int64_t(DType::kInt64))}),
                  make_node("SequenceLength", {"e"}, {"n0"}), make_node("SequenceInsert", {"e", "x"}, {"s1"}),
                  make_node("SequenceInsert", {"s1", "x"}, {"s2"}), make_node("SequenceLength", {"s2"}, {"n2"})},
                 {value_info("x", DType::kInt64)}, {"e", "n0", "s2", "n2"});
  auto r = run_graph(g, {Value::of(x)});
  EXPECT_TRUE(same_sequence(r[0], {}));
  EXPECT_EQ(r[0].elem, DType::kInt64);
  EXPECT_EQ(scalar_of(r[1]), 0);
  EXPECT_TRUE(same_sequence(r[2], {x, x}));
  EXPECT_EQ(scalar_of(r[3]), 2);
  // A fed empty sequence: length 0, and appending to it works.
  auto fed = graph({make_node("SequenceLength", {"s"}, {"n"}), make_node("SequenceInsert", {"s", "x"}, {"y"})},
                   {seq_input("s", DType::kInt64), value_info("x", DType::kInt64)}, {"n", "y"});
  r = run_graph(fed, {seq_of({}, DType::kInt64), Value::of(x)});
  EXPECT_EQ(scalar_of(r[0]), 0);
  EXPECT_TRUE(same_sequence(r[1], {x}));
}

TEST(Sequence, InsertLeavesItsInputSequenceUnchanged) {
  // s = [a, b]; s2 = insert(s, c, 0); s3 = erase(s, 0): s keeps [a, b] for every reader.
  std::mt19937 rng(14);
  const auto t = three(rng);
  auto g =
      graph({make_node("SequenceConstruct", {"a", "b"}, {"s"}), make_node("SequenceInsert", {"s", "c", "zero"}, {"s2"}),
             make_node("SequenceErase", {"s", "zero"}, {"s3"}), make_node("SequenceAt", {"s", "zero"}, {"first"}),
             make_node("SequenceLength", {"s"}, {"n"})},
            {value_info("a"), value_info("b"), value_info("c"), value_info("zero", DType::kInt64, {})},
            {"s", "s2", "s3", "first", "n"});
  auto r = run_graph(g, {Value::of(t[0]), Value::of(t[1]), Value::of(t[2]), Value::of(i64(0))});
  EXPECT_TRUE(same_sequence(r[0], {t[0], t[1]}));
  EXPECT_TRUE(same_sequence(r[1], {t[2], t[0], t[1]}));
  EXPECT_TRUE(same_sequence(r[2], {t[1]}));
  EXPECT_TRUE(same(r[3].tensor, t[0]));
  EXPECT_EQ(scalar_of(r[4]), 2);
  // The outputs are copies: neither the fed tensors nor another output share their memory.
  EXPECT_NE(r[0].sequence[0].raw_data(), t[0].raw_data());
  EXPECT_NE(r[3].tensor.raw_data(), r[0].sequence[0].raw_data());
}

TEST(Sequence, InPlaceUpdateOfAnInsertedSequenceLeavesItsInputUnchanged) {
  // com.microsoft InplaceClipGradNorm scales the tensors of its input sequence in place: applied to
  // s2 = insert(s, b), it must not reach the tensors of s.
  const Tensor a = Tensor::from_vector<float>({2}, {3, 0}), b = Tensor::from_vector<float>({1}, {4});
  ir::Node clip = make_node("InplaceClipGradNorm", {"s2"}, {"clipped"}, {attr_float("max_norm", 1.f)}, "com.microsoft");
  auto g = graph({make_node("SequenceConstruct", {"a"}, {"s"}), make_node("SequenceInsert", {"s", "b"}, {"s2"}), clip},
                 {value_info("a"), value_info("b")}, {"s", "clipped"});
  const onnxtrain::OpsetMap opsets{{"", 17}, {"com.microsoft", 1}};
  onnxtrain::runtime::GraphExecutor ex(g, opsets, onnxtrain::ExecOptions{});
  Value av = Value::of(a), bv = Value::of(b);
  auto r = ex.run({&av, &bv});
  EXPECT_TRUE(same_sequence(r[0], {a}));
  // norm = sqrt(3^2 + 4^2) = 5: every element times 1 / (5 + 1e-6).
  const float coef = 1.0f / (5.0f + 1e-6f);
  EXPECT_TRUE(all_close(r[1].sequence[0], {2}, {3 * coef, 0}, 1e-6, 0));
  EXPECT_TRUE(all_close(r[1].sequence[1], {1}, {4 * coef}, 1e-6, 0));
  EXPECT_TRUE(same(a, Tensor::from_vector<float>({2}, {3, 0})));
}

TEST(Sequence, FedSequenceIsNotModified) {
  std::mt19937 rng(15);
  const auto t = three(rng);
  std::vector<Tensor> copies;
  for (const auto& x : t) copies.push_back(x.clone());
  Value s = seq_of(t);
  auto g = graph({make_node("SequenceInsert", {"s", "x"}, {"y"}), make_node("SequenceErase", {"s"}, {"z"})},
                 {seq_input("s"), value_info("x")}, {"y", "z"});
  auto r = run_graph(g, {s, Value::of(t[1])});
  EXPECT_TRUE(same_sequence(s, copies));
  EXPECT_TRUE(same_sequence(r[0], {t[0], t[1], t[2], t[1]}));
  EXPECT_TRUE(same_sequence(r[1], {t[0], t[1]}));
}

namespace {

// Naive SplitToSequence: piece k holds x's elements at offsets [start_k, start_k + size_k) along
// `axis`, that axis removed when `squeeze`.
std::vector<Tensor> split_reference(const Tensor& x, int64_t axis, const std::vector<int64_t>& sizes, bool squeeze) {
  std::vector<Tensor> r;
  int64_t start = 0;
  for (int64_t size : sizes) {
    Shape s = x.shape();
    s[size_t(axis)] = size;
    Tensor full = Tensor::empty(x.dtype(), s);
    std::vector<double> v(size_t(full.numel()));
    const auto xv = to_double(x);
    for (int64_t i = 0; i < full.numel(); ++i) {
      auto idx = unravel(i, s);
      idx[size_t(axis)] += start;
      v[size_t(i)] = xv[size_t(ravel(idx, x.shape()))];
    }
    if (squeeze) s.erase(s.begin() + axis);
    r.push_back(from_double(x.dtype(), s, v));
    start += size;
  }
  return r;
}

// Naive ConcatFromSequence: output element o comes from the tensor whose range along `axis` holds
// o[axis] (new_axis: tensor o[axis], that axis dropped).
Tensor concat_reference(const std::vector<Tensor>& seq, int64_t axis, bool new_axis) {
  Shape out = seq[0].shape();
  if (new_axis)
    out.insert(out.begin() + axis, int64_t(seq.size()));
  else {
    out[size_t(axis)] = 0;
    for (const auto& t : seq) out[size_t(axis)] += t.dim(size_t(axis));
  }
  std::vector<double> v(size_t(onnxtrain::shape_numel(out)));
  for (size_t o = 0; o < v.size(); ++o) {
    auto idx = unravel(int64_t(o), out);
    size_t k = 0;
    if (new_axis) {
      k = size_t(idx[size_t(axis)]);
      idx.erase(idx.begin() + axis);
    } else {
      while (idx[size_t(axis)] >= seq[k].dim(size_t(axis))) idx[size_t(axis)] -= seq[k++].dim(size_t(axis));
    }
    v[o] = to_double(seq[k])[size_t(ravel(idx, seq[k].shape()))];
  }
  return from_double(seq[0].dtype(), out, v);
}

std::shared_ptr<ir::Graph> split_graph(std::vector<ir::Attribute> attrs, bool with_split, DType dt = DType::kFloat64) {
  std::vector<std::string> in{"x"};
  std::vector<ir::ValueInfo> decl{value_info("x", dt)};
  if (with_split) {
    in.push_back("split");
    decl.push_back(value_info("split", DType::kInt64));
  }
  return graph({make_node("SplitToSequence", in, {"s"}, std::move(attrs)), make_node("SequenceLength", {"s"}, {"n"})},
               decl, {"s", "n"});
}

}  // namespace

TEST(Sequence, SplitToSequenceMatchesNaiveReference) {
  std::mt19937 rng(21);
  const Tensor x = random_tensor(DType::kFloat64, {3, 5, 4}, rng);
  struct Case {
    int64_t axis;
    int keepdims;  // -1: attribute absent
    std::vector<int64_t> split;
    bool scalar_split, has_split;
    std::vector<int64_t> sizes;
    bool squeeze;
  };
  const std::vector<Case> cases{
      {1, -1, {}, false, false, {1, 1, 1, 1, 1}, false},  // default keepdims = 1
      {1, 0, {}, false, false, {1, 1, 1, 1, 1}, true},
      {-1, 0, {}, false, false, {1, 1, 1, 1}, true},
      {0, -1, {}, false, false, {1, 1, 1}, false},
      {1, 0, {2}, true, true, {2, 2, 1}, false},  // scalar: pieces of 2, the last smaller; keepdims ignored
      {1, -1, {5}, true, true, {5}, false},
      {1, -1, {7}, true, true, {5}, false},              // longer than the axis: one piece
      {1, 0, {1, 0, 4}, false, true, {1, 0, 4}, false},  // a list, an empty piece included
      {-3, -1, {2, 1}, false, true, {2, 1}, false},
  };
  for (const Case& c : cases) {
    std::vector<ir::Attribute> attrs{attr_int("axis", c.axis)};
    if (c.keepdims >= 0) attrs.push_back(attr_int("keepdims", c.keepdims));
    std::vector<Value> feeds{Value::of(x)};
    if (c.has_split)
      feeds.push_back(Value::of(c.scalar_split ? i64(c.split[0])
                                               : Tensor::from_vector<int64_t>({int64_t(c.split.size())}, c.split)));
    auto r = run_graph(split_graph(attrs, c.has_split), feeds);
    const int64_t axis = c.axis < 0 ? c.axis + 3 : c.axis;
    EXPECT_TRUE(same_sequence(r[0], split_reference(x, axis, c.sizes, c.squeeze))) << "axis " << c.axis;
    EXPECT_EQ(scalar_of(r[1]), int64_t(c.sizes.size()));
    EXPECT_EQ(r[0].elem, DType::kFloat64);
  }
}

TEST(Sequence, SplitToSequenceOfEmptyAxisAndOtherTypes) {
  // A zero-length axis: an empty sequence of the input's element type.
  auto r = run_graph(split_graph({attr_int("axis", 1)}, false, DType::kInt32),
                     {Value::of(Tensor::empty(DType::kInt32, {2, 0}))});
  EXPECT_TRUE(same_sequence(r[0], {}));
  EXPECT_EQ(r[0].elem, DType::kInt32);
  EXPECT_EQ(scalar_of(r[1]), 0);
  // Strings and bools move as they are.
  Tensor s = Tensor::empty(DType::kString, {2, 2});
  for (int i = 0; i < 4; ++i) s.data<std::string>()[i] = std::string(size_t(i + 1), char('a' + i));
  r = run_graph(split_graph({attr_int("axis", 0), attr_int("keepdims", 0)}, false, DType::kString), {Value::of(s)});
  ASSERT_EQ(r[0].sequence.size(), 2u);
  EXPECT_EQ(r[0].sequence[1].shape(), Shape({2}));
  EXPECT_EQ(r[0].sequence[1].data<std::string>()[0], "ccc");
  EXPECT_EQ(r[0].sequence[1].data<std::string>()[1], "dddd");
  std::mt19937 rng(22);
  const Tensor b = random_tensor(DType::kBool, {3, 2}, rng);
  r = run_graph(split_graph({attr_int("axis", 1)}, false, DType::kBool), {Value::of(b)});
  EXPECT_TRUE(same_sequence(r[0], split_reference(b, 1, {1, 1}, false)));
}

TEST(Sequence, ConcatFromSequenceMatchesNaiveReference) {
  std::mt19937 rng(31);
  // Concatenation along each axis of rank-3 tensors that differ only there.
  for (int64_t axis = -3; axis < 3; ++axis) {
    const auto a = size_t(axis < 0 ? axis + 3 : axis);
    std::vector<Tensor> seq;
    for (int64_t len : {2, 1, 3}) {
      Shape s{2, 3, 2};
      s[a] = len;
      seq.push_back(random_tensor(DType::kFloat64, s, rng));
    }
    auto g = graph({make_node("ConcatFromSequence", {"s"}, {"y"}, {attr_int("axis", axis)})},
                   {seq_input("s", DType::kFloat64)}, {"y"});
    auto r = run_graph(g, {seq_of(seq, DType::kFloat64)});
    EXPECT_TRUE(same(r[0].tensor, concat_reference(seq, int64_t(a), false))) << "axis " << axis;
  }
  // Stacking on a new axis: axis in [-rank - 1, rank].
  std::vector<Tensor> seq;
  for (int k = 0; k < 4; ++k) seq.push_back(random_tensor(DType::kInt64, {2, 3}, rng, -50, 50));
  for (int64_t axis = -3; axis <= 2; ++axis) {
    auto g = graph({make_node("ConcatFromSequence", {"s"}, {"y"}, {attr_int("axis", axis), attr_int("new_axis", 1)})},
                   {seq_input("s", DType::kInt64)}, {"y"});
    auto r = run_graph(g, {seq_of(seq, DType::kInt64)});
    EXPECT_TRUE(same(r[0].tensor, concat_reference(seq, axis < 0 ? axis + 3 : axis, true))) << "new axis " << axis;
  }
  // Scalars stack into a vector.
  auto g = graph({make_node("ConcatFromSequence", {"s"}, {"y"}, {attr_int("axis", 0), attr_int("new_axis", 1)})},
                 {seq_input("s")}, {"y"});
  auto r = run_graph(g, {seq_of({Tensor::scalar<float>(1.5f), Tensor::scalar<float>(-2.f)})});
  EXPECT_TRUE(all_close(r[0].tensor, {2}, {1.5, -2.0}));
}

TEST(Sequence, SplitInsertEraseConcatRoundTrip) {
  // x [4, 3] -> split along 0 in [1, 3] -> insert z [2, 3] at 1 -> erase position -1 -> concat:
  // np.concatenate([x[:1], z]).
  std::mt19937 rng(41);
  const Tensor x = random_tensor(DType::kFloat32, {4, 3}, rng), z = random_tensor(DType::kFloat32, {2, 3}, rng);
  auto g = graph(
      {make_node("SplitToSequence", {"x", "split"}, {"s"}), make_node("SequenceInsert", {"s", "z", "one"}, {"s2"}),
       make_node("SequenceErase", {"s2", "minus1"}, {"s3"}),
       make_node("ConcatFromSequence", {"s3"}, {"y"}, {attr_int("axis", 0)})},
      {value_info("x"), value_info("z"), value_info("split", DType::kInt64), value_info("one", DType::kInt64, {}),
       value_info("minus1", DType::kInt64, {})},
      {"y"});
  auto r = run_graph(g, {Value::of(x), Value::of(z), Value::of(Tensor::from_vector<int64_t>({2}, {1, 3})),
                         Value::of(i64(1)), Value::of(i64(-1))});
  const auto xv = to_double(x), zv = to_double(z);
  std::vector<double> want(xv.begin(), xv.begin() + 3);
  want.insert(want.end(), zv.begin(), zv.end());
  EXPECT_TRUE(all_close(r[0].tensor, {3, 3}, want, 0, 0));
}

TEST(Sequence, ConstantSequencesAreFolded) {
  // Every input an initializer: the sequence nodes run once, when planning.
  const Tensor a = Tensor::from_vector<float>({2}, {1, 2}), b = Tensor::from_vector<float>({3}, {3, 4, 5});
  auto g = graph(
      {make_node("SequenceConstruct", {"a", "b"}, {"s"}),
       make_node("ConcatFromSequence", {"s"}, {"y"}, {attr_int("axis", 0)}), make_node("SequenceLength", {"s"}, {"n"})},
      {}, {"y", "n", "s"});
  g->initializers = {{"a", a}, {"b", b}};
  auto r = run_graph(g, {});
  EXPECT_TRUE(all_close(r[0].tensor, {5}, {1, 2, 3, 4, 5}, 0, 0));
  EXPECT_EQ(scalar_of(r[1]), 2);
  EXPECT_TRUE(same_sequence(r[2], {a, b}));
}

TEST(Sequence, OptionalHasAndGetElement) {
  std::mt19937 rng(51);
  const Tensor x = random_tensor(DType::kFloat32, {2, 2}, rng);
  ir::Attribute type;
  type.name = "type";
  type.type = ir::AttrType::kTypeProto;
  type.tp = ir::TypeInfo::tensor(DType::kFloat32);
  auto g = graph({make_node("Optional", {"x"}, {"o"}), make_node("OptionalHasElement", {"o"}, {"has"}),
                  make_node("OptionalGetElement", {"o"}, {"got"}), make_node("Optional", {}, {"none"}, {type}),
                  make_node("OptionalHasElement", {"none"}, {"has_none"})},
                 {value_info("x")}, {"has", "got", "has_none", "none"});
  auto r = run_graph(g, {Value::of(x)}, 15);
  EXPECT_TRUE(r[0].tensor.data<bool>()[0]);
  EXPECT_TRUE(same(r[1].tensor, x));
  EXPECT_FALSE(r[2].tensor.data<bool>()[0]);
  EXPECT_EQ(r[3].kind, Value::Kind::kNone);
  // An optional sequence, and empty optionals fed as graph inputs.
  auto seq = graph({make_node("Optional", {"s"}, {"o"}), make_node("OptionalGetElement", {"o"}, {"got"}),
                    make_node("OptionalHasElement", {"e"}, {"has_e"})},
                   {seq_input("s"), ir::ValueInfo{"e", optional_type(ir::TypeInfo::tensor(DType::kFloat32)), ""}},
                   {"got", "has_e"});
  r = run_graph(seq, {seq_of({x, x}), Value()}, 15);
  EXPECT_TRUE(same_sequence(r[0], {x, x}));
  EXPECT_FALSE(r[1].tensor.data<bool>()[0]);
  // Getting the element of an empty optional is an error naming the node.
  auto get_none = graph(
      {make_node("Optional", {}, {"none"}, {type}), make_node("OptionalGetElement", {"none"}, {"got"})}, {}, {"got"});
  EXPECT_TRUE(
      contains(error_of(get_none, {}, 15), "OptionalGetElement node 'OptionalGetElement_got': the optional is empty"));
  auto untyped = graph({make_node("Optional", {}, {"none"})}, {}, {"none"});
  EXPECT_TRUE(contains(error_of(untyped, {}, 15), "needs the 'type' attribute"));
}

TEST(Sequence, SequenceMapAppliesTheBodyPerElement) {
  std::mt19937 rng(61);
  const std::vector<Tensor> a{random_tensor(DType::kFloat32, {2}, rng), random_tensor(DType::kFloat32, {3, 1}, rng),
                              random_tensor(DType::kFloat32, {1}, rng)};
  const std::vector<Tensor> b{random_tensor(DType::kFloat32, {2}, rng), random_tensor(DType::kFloat32, {3, 1}, rng),
                              random_tensor(DType::kFloat32, {1}, rng)};
  const Tensor w = random_tensor(DType::kFloat32, {1}, rng);
  // body(x, y) = (x * y, shape(x)); mapped over (a, b) and over (a, w).
  auto body = graph({make_node("Mul", {"x", "y"}, {"p"}), make_node("Shape", {"x"}, {"sh"})},
                    {value_info("x"), value_info("y")}, {"p", "sh"});
  body->outputs = {value_info("p"), value_info("sh", DType::kInt64)};
  auto g = graph({make_node("SequenceMap", {"sa", "sb"}, {"prod", "shapes"}, {attr_graph("body", body)}),
                  make_node("SequenceMap", {"sa", "w"}, {"scaled", "shapes2"}, {attr_graph("body", body)})},
                 {seq_input("sa"), seq_input("sb"), value_info("w")}, {"prod", "shapes", "scaled"});
  auto r = run_graph(g, {seq_of(a), seq_of(b), Value::of(w)});
  ASSERT_EQ(r[0].sequence.size(), 3u);
  for (size_t j = 0; j < 3; ++j) {
    const auto av = to_double(a[j]), bv = to_double(b[j]);
    std::vector<double> p, s;
    for (size_t i = 0; i < av.size(); ++i) {
      p.push_back(double(float(av[i]) * float(bv[i])));
      s.push_back(double(float(av[i]) * float(to_double(w)[0])));
    }
    EXPECT_TRUE(all_close(r[0].sequence[j], a[j].shape(), p, 0, 0)) << j;
    EXPECT_TRUE(all_close(r[2].sequence[j], a[j].shape(), s, 0, 0)) << j;
    std::vector<double> dims(a[j].shape().begin(), a[j].shape().end());
    EXPECT_TRUE(all_close(r[1].sequence[j], {int64_t(dims.size())}, dims, 0, 0)) << j;
  }
  EXPECT_EQ(r[1].elem, DType::kInt64);
  // An empty first sequence maps to empty sequences of the body's declared types.
  r = run_graph(g, {seq_of({}), seq_of({}), Value::of(w)});
  EXPECT_TRUE(same_sequence(r[0], {}));
  EXPECT_EQ(r[1].elem, DType::kInt64);
  // Sequences of different lengths are refused.
  EXPECT_TRUE(contains(error_of(g, {seq_of(a), seq_of({b[0]}), Value::of(w)}),
                       "input 1 is a sequence of length 1, input 0 one of length 3"));
  // The body's arity must match the node's.
  auto bad =
      graph({make_node("SequenceMap", {"sa"}, {"prod"}, {attr_graph("body", body)})}, {seq_input("sa")}, {"prod"});
  EXPECT_TRUE(contains(error_of(bad, {seq_of(a)}), "the body has 2 inputs, the node 1"));
  auto first_tensor = graph({make_node("SequenceMap", {"w", "sa"}, {"prod", "shapes"}, {attr_graph("body", body)})},
                            {value_info("w"), seq_input("sa")}, {"prod"});
  EXPECT_TRUE(contains(error_of(first_tensor, {Value::of(w), seq_of(a)}), "input 0 must be a sequence of tensors"));
}

TEST(Sequence, PositionErrorsNameTheNodePositionAndLength) {
  std::mt19937 rng(71);
  const auto t = three(rng);
  auto at =
      graph({make_node("SequenceAt", {"s", "p"}, {"y"})}, {seq_input("s"), value_info("p", DType::kInt64, {})}, {"y"});
  EXPECT_TRUE(contains(error_of(at, {seq_of(t), Value::of(i64(3))}),
                       "SequenceAt node 'SequenceAt_y': position 3 is out of range for a sequence of length "
                       "3 (accepted: -3 to 2)"));
  EXPECT_TRUE(contains(error_of(at, {seq_of(t), Value::of(i64(-4))}),
                       "position -4 is out of range for a sequence of length 3"));
  EXPECT_TRUE(
      contains(error_of(at, {seq_of({}), Value::of(i64(0))}), "position 0 is out of range: the sequence is empty"));
  EXPECT_TRUE(contains(error_of(at, {seq_of(t), Value::of(Tensor::from_vector<int64_t>({2}, {0, 1}))}),
                       "position (input 1) must be a scalar"));
  EXPECT_TRUE(
      contains(error_of(at, {seq_of(t), Value::of(Tensor::scalar<float>(0))}), "must be int32 or int64, got float"));
  EXPECT_TRUE(contains(error_of(at, {Value::of(t[0]), Value::of(i64(0))}),
                       "input 0 must be a sequence of tensors, got a tensor"));
  auto ins = graph({make_node("SequenceInsert", {"s", "x", "p"}, {"y"})},
                   {seq_input("s"), value_info("x"), value_info("p", DType::kInt64, {})}, {"y"});
  EXPECT_TRUE(contains(error_of(ins, {seq_of(t), Value::of(t[0]), Value::of(i64(4))}),
                       "SequenceInsert node 'SequenceInsert_y': position 4 is out of range for a sequence of length 3 "
                       "(accepted: -3 to 3)"));
  auto erase = graph({make_node("SequenceErase", {"s"}, {"y"})}, {seq_input("s")}, {"y"});
  EXPECT_TRUE(contains(error_of(erase, {seq_of({})}), "SequenceErase node 'SequenceErase_y': the sequence is empty"));
}

TEST(Sequence, ElementTypeAndShapeErrors) {
  std::mt19937 rng(72);
  const Tensor f = random_tensor(DType::kFloat32, {2}, rng), d = random_tensor(DType::kFloat64, {2}, rng);
  auto ins = graph({make_node("SequenceInsert", {"s", "x"}, {"y"})}, {seq_input("s"), value_info("x", DType::kFloat64)},
                   {"y"});
  EXPECT_TRUE(contains(error_of(ins, {seq_of({f}), Value::of(d)}),
                       "the tensor to insert has element type double, the sequence holds float tensors"));
  auto cons = graph({make_node("SequenceConstruct", {"a", "b"}, {"s"})},
                    {value_info("a"), value_info("b", DType::kFloat64)}, {"s"});
  EXPECT_TRUE(
      contains(error_of(cons, {Value::of(f), Value::of(d)}),
               "SequenceConstruct node 'SequenceConstruct_s': input 1 has element type double, expected float"));
  // ConcatFromSequence: empty sequence, ranks, dims, axis.
  auto concat = [](int64_t axis, int64_t new_axis) {
    return graph(
        {make_node("ConcatFromSequence", {"s"}, {"y"}, {attr_int("axis", axis), attr_int("new_axis", new_axis)})},
        {seq_input("s")}, {"y"});
  };
  const Tensor m23 = random_tensor(DType::kFloat32, {2, 3}, rng), m33 = random_tensor(DType::kFloat32, {3, 3}, rng);
  EXPECT_TRUE(contains(error_of(concat(0, 0), {seq_of({})}),
                       "ConcatFromSequence node 'ConcatFromSequence_y': cannot concatenate an empty sequence"));
  EXPECT_TRUE(contains(error_of(concat(0, 0), {seq_of({m23, f})}), "the ranks differ"));
  EXPECT_TRUE(contains(error_of(concat(1, 0), {seq_of({m23, m33})}), "they differ at axis 0"));
  EXPECT_TRUE(contains(error_of(concat(0, 1), {seq_of({m23, m33})}), "stacking needs equal shapes"));
  EXPECT_TRUE(contains(error_of(concat(2, 0), {seq_of({m23})}), "axis 2 is out of range for rank 2"));
  EXPECT_TRUE(contains(error_of(concat(3, 1), {seq_of({m23})}), "axis 3 is out of range for rank 3"));
  EXPECT_TRUE(contains(error_of(concat(0, 2), {seq_of({m23})}), "new_axis must be 0 or 1, got 2"));
  EXPECT_TRUE(
      contains(error_of(concat(0, 0), {seq_of({Tensor::scalar<float>(1)})}), "concatenate only with new_axis = 1"));
  auto no_axis = graph({make_node("ConcatFromSequence", {"s"}, {"y"})}, {seq_input("s")}, {"y"});
  EXPECT_TRUE(contains(error_of(no_axis, {seq_of({m23})}), "axis"));
  // A fed sequence of the wrong element type, or of mixed ones (the sessions' feed check).
  auto feed_error = [](const ir::TypeInfo& type, const Value& v) -> std::string {
    try {
      onnxtrain::runtime::check_feed(ir::ValueInfo{"s", type, ""}, v);
    } catch (const onnxtrain::InvalidArgument& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_TRUE(
      contains(feed_error(seq_type(DType::kFloat32), seq_of({f, d}, DType::kFloat64)),
               "input 's' holds a tensor of element type double at position 1, the model expects seq(tensor(float))"));
  EXPECT_TRUE(contains(feed_error(seq_type(DType::kUndefined), seq_of({f, d})),
                       "input 's' holds tensors of element types float (position 0) and double (position 1)"));
  EXPECT_TRUE(contains(feed_error(seq_type(DType::kFloat32), Value::of(f)), "input 's' must be a sequence of tensors"));
  EXPECT_EQ(feed_error(seq_type(DType::kFloat32), seq_of({f, f})), "no error");
  EXPECT_EQ(feed_error(seq_type(DType::kFloat32), seq_of({})), "no error");
}

TEST(Sequence, SplitToSequenceErrors) {
  std::mt19937 rng(73);
  const Tensor x = random_tensor(DType::kFloat64, {4, 3}, rng);
  auto list = [](std::vector<int64_t> v) { return Value::of(Tensor::from_vector<int64_t>({int64_t(v.size())}, v)); };
  EXPECT_TRUE(contains(error_of(split_graph({}, true), {Value::of(x), list({1, 2})}),
                       "SplitToSequence node 'SplitToSequence_s': the split sizes sum to 3 but axis 0 of the input "
                       "(shape [4, 3]) has 4 elements"));
  EXPECT_TRUE(contains(error_of(split_graph({}, true), {Value::of(x), list({5, -1})}), "split[1] = -1 is negative"));
  EXPECT_TRUE(contains(error_of(split_graph({}, true), {Value::of(x), Value::of(i64(0))}), "split 0 must be positive"));
  EXPECT_TRUE(
      contains(error_of(split_graph({}, true), {Value::of(x), Value::of(Tensor::from_vector<int64_t>({1, 1}, {4}))}),
               "split (input 1) must be a scalar or 1-D"));
  EXPECT_TRUE(contains(error_of(split_graph({attr_int("axis", 2)}, false), {Value::of(x)}),
                       "axis 2 is out of range for rank 2"));
  EXPECT_TRUE(contains(error_of(split_graph({attr_int("keepdims", 3)}, false), {Value::of(x)}),
                       "keepdims must be 0 or 1, got 3"));
  EXPECT_TRUE(contains(error_of(split_graph({}, false), {Value::of(Tensor::scalar<double>(1))}),
                       "the input must have rank >= 1 to be split"));
  // A split that would create more tensors than memory allows fails before allocating them.
  EXPECT_TRUE(
      contains(error_of(split_graph({}, false), {Value::of(Tensor::empty(DType::kFloat64, {int64_t(1) << 48, 0}))}),
               "the sequence of"));
  auto empty = graph({make_node("SequenceEmpty", {}, {"e"}, {attr_int("dtype", 999)})}, {}, {"e"});
  EXPECT_TRUE(contains(error_of(empty, {}), "dtype 999 is not a supported tensor element type"));
}

TEST(Sequence, GradientThroughASequenceIsRefusedNamingTheOperator) {
  // Sequences are not differentiated: a loss reached through one fails naming the operator.
  ir::Model m;
  m.opsets = {{"", 17}};
  m.graph = graph({make_node("SequenceConstruct", {"w", "w"}, {"s"}), make_node("SequenceAt", {"s", "zero"}, {"a"}),
                   make_node("ReduceSum", {"a"}, {"loss"}, {attr_int("keepdims", 0)})},
                  {value_info("w", DType::kFloat32, {3})}, {"loss"});
  m.graph->initializers = {{"zero", i64(0)}};
  try {
    onnxtrain::autodiff::build_gradient_model(m, {"loss"}, {"w"}, "loss");
    ADD_FAILURE() << "no error";
  } catch (const onnxtrain::NotImplemented& e) {
    EXPECT_TRUE(contains(e.what(), "no gradient rule for SequenceAt"));
  }
}
