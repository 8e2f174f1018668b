// Finite-difference tests of the MatMul, Gemm and Einsum gradient rules (float64), in default and
// portable mode.
#include "grad_linalg_util.h"

using namespace ot_test;

namespace {

GradCheck spec(const std::string& op, std::vector<Tensor> inputs, std::vector<ir::Attribute> attrs = {},
               uint32_t seed = 0) {
  GradCheck s;
  s.op = op;
  s.inputs = std::move(inputs);
  s.attrs = std::move(attrs);
  s.seed = seed;
  return s;
}

Tensor rnd(const Shape& shape, std::mt19937& rng) { return random_tensor(DType::kFloat64, shape, rng); }

std::string str(const Shape& s) { return onnxtrain::shape_to_string(s); }

}  // namespace

GRAD_COVERS(GradLinalg, MatMulShapes, "MatMul");
TEST(GradLinalg, MatMulShapes) {
  // 2-D, batched with broadcast batch dims, a 2-D weight over batch dims (dB as one GEMM of the
  // flattened operands), 1-D on either side, dot product.
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 5}},    {{2, 1, 3, 4}, {5, 4, 2}}, {{3, 4}, {2, 4, 5}}, {{4}, {2, 4, 3}},
      {{2, 3, 4}, {4}},    {{4}, {4}},                {{4}, {4, 3}},       {{3, 4}, {4}},
      {{2, 3, 4}, {4, 5}}, {{2, 2, 3, 4}, {4, 5}},    {{2, 3, 4}, {3, 2, 4, 5}}};
  uint32_t seed = 1;
  for (const auto& [a, b] : cases) {
    std::mt19937 rng(seed);
    const std::string what = "MatMul " + str(a) + " x " + str(b);
    GradCheck s = spec("MatMul", {rnd(a, rng), rnd(b, rng)}, {}, seed++);
    expect_gradient(s, what);
    for (int64_t opset : {9, 13}) {  // squeeze/unsqueeze/reduce axes as attributes, then inputs
      s.opset = opset;
      EXPECT_TRUE(check_gradient(s)) << what << " opset " << opset;
    }
    s.opset = 17;
    s.symbolic_shapes = true;  // broadcast batch dims reduced at run time
    expect_gradient(s, what + " symbolic");
  }
}

// com.onnxtrain.FusedMatMul(X, W, transB = 1), train/fusion.h's linear layer: 2-D and batched X
// against central differences; other forms name what is not implemented.
GRAD_COVERS(GradLinalg, FusedMatMulLinear, "com.onnxtrain.FusedMatMul");
TEST(GradLinalg, FusedMatMulLinear) {
  uint32_t seed = 300;
  const std::vector<ir::Attribute> tb = {attr_int("transA", 0), attr_int("transB", 1)};
  for (const Shape& x : std::vector<Shape>{{3, 4}, {2, 3, 4}, {2, 1, 3, 4}}) {
    std::mt19937 rng(seed);
    GradCheck s = spec("FusedMatMul", {rnd(x, rng), rnd({5, 4}, rng)}, tb, seed++);
    s.domain = "com.onnxtrain";
    EXPECT_TRUE(check_gradient(s)) << "FusedMatMul " << str(x) << " x [5, 4]^T";
  }
  std::mt19937 rng(seed);
  GradCheck s = spec("FusedMatMul", {rnd({3, 4}, rng), rnd({4, 5}, rng)}, {}, seed);
  s.domain = "com.onnxtrain";
  const ::testing::AssertionResult r = check_gradient(s);  // transB = 0: not the fused linear layer
  EXPECT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("gradient of FusedMatMul is implemented for "
                                          "transA = 0, transB = 1"),
            std::string::npos)
      << r.message();
}

GRAD_COVERS(GradLinalg, GemmTransposesAlphaBetaC, "Gemm");
TEST(GradLinalg, GemmTransposesAlphaBetaC) {
  uint32_t seed = 100;
  const int64_t M = 3, K = 4, N = 5;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (const Shape& cs : std::vector<Shape>{{}, {N}, {1, N}, {M, 1}, {M, N}, {1}}) {
        std::mt19937 rng(seed);
        Tensor A = rnd(ta ? Shape{K, M} : Shape{M, K}, rng), B = rnd(tb ? Shape{N, K} : Shape{K, N}, rng);
        Tensor C = rnd(cs, rng);
        std::vector<ir::Attribute> attrs = {attr_int("transA", ta), attr_int("transB", tb), attr_float("alpha", 0.7f),
                                            attr_float("beta", 1.3f)};
        const std::string what = "Gemm transA " + std::to_string(ta) + " transB " + std::to_string(tb) + " C " + str(cs);
        GradCheck s = spec("Gemm", {A, B, C}, attrs, seed++);
        expect_gradient(s, what);
        s.opset = 9;  // C required: the gradient is built from MatMul
        EXPECT_TRUE(check_gradient(s)) << what << " opset 9";
      }
  // Without C (opset 11+), alpha 1.
  std::mt19937 rng(7);
  expect_gradient(spec("Gemm", {rnd({M, K}, rng), rnd({K, N}, rng)}, {}, 7), "Gemm without C");
}

GRAD_COVERS(GradLinalg, Einsum, "Einsum");
TEST(GradLinalg, Einsum) {
  struct Case {
    std::string eq;
    std::vector<Shape> shapes;
  };
  const std::vector<Case> cases = {
      {"ij,jk->ik", {{3, 4}, {4, 5}}},
      {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 3}}},
      {"ij,jk", {{3, 4}, {4, 2}}},                      // implicit output
      {"ij->ji", {{3, 4}}},                             // transpose
      {"ij->", {{3, 4}}},                               // sum of everything
      {"ij->i", {{3, 4}}},                              // label summed out only here: Expand back
      {"ii->i", {{4, 4}}},                              // diagonal
      {"ii", {{4, 4}}},                                 // trace (implicit)
      {"iij,jk->ik", {{3, 3, 4}, {4, 2}}},              // diagonal inside a product
      {"i,i->", {{5}, {5}}},                            // dot
      {"i,j->ij", {{3}, {4}}},                          // outer
      {"ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 2}}},       // three operands
      {"ij,k->i", {{3, 4}, {2}}},                       // both operands have labels summed out
      {"ij,ij->ij", {{3, 1}, {3, 4}}},                  // size-1 broadcast: summed back
      {"...ij,...jk->...ik", {{2, 1, 3, 4}, {2, 5, 4, 2}}},  // ellipsis with a broadcast dim (ONNX 1.12 inference wants equal ranks)
      {"...ii->...i", {{2, 3, 3}}},                     // ellipsis and diagonal
      {"b...,b...->b", {{2, 3, 2}, {2, 3, 2}}},         // ellipsis at the end
      {"Ab,bC->AC", {{3, 2}, {2, 4}}},                  // upper-case labels
  };
  uint32_t seed = 300;
  for (const auto& c : cases) {
    std::mt19937 rng(seed);
    std::vector<Tensor> ins;
    for (const auto& s : c.shapes) ins.push_back(rnd(s, rng));
    GradCheck s = spec("Einsum", ins, {attr_string("equation", c.eq)}, seed++);
    expect_gradient(s, "Einsum " + c.eq);
    s.symbolic_shapes = true;  // identity matrices and unbroadcasting from run-time shapes
    EXPECT_TRUE(check_gradient(s)) << "Einsum " << c.eq << " symbolic";
  }
  // The same tensor twice: contributions accumulate.
  std::mt19937 rng(9);
  GradCheck sq = spec("Einsum", {rnd({3, 3}, rng)}, {attr_string("equation", "ij,jk->ik")}, 9);
  sq.inputs.push_back(sq.inputs[0]);
  EXPECT_TRUE(check_gradient(sq)) << "Einsum of a tensor with itself";
}

TEST(GradLinalg, EinsumEllipsisNeedsRank) {
  // An input of unknown rank under an ellipsis: NotImplemented naming the node.
  const ir::Model m = one_node_model("Einsum", {ir::ValueInfo{"a", ir::TypeInfo::tensor(DType::kFloat32), ""}},
                                     {attr_string("equation", "...i->i")}, 1, 17);
  try {
    onnxtrain::autodiff::build_gradient_model(m, {"loss"}, {"a"}, "loss");
    ADD_FAILURE() << "expected NotImplemented";
  } catch (const onnxtrain::NotImplemented& e) {
    EXPECT_NE(std::string(e.what()).find("node_Einsum"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank"), std::string::npos) << e.what();
  }
}

// Malformed equations get an error naming the node from the rule (a stray '.' derailed the label
// arithmetic into std::out_of_range: gradient fuzz finding), as do terms whose label count
// disagrees with the input's rank.
TEST(GradLinalg, EinsumBadEquations) {
  for (const char* eq : {"...iOptio..i", "i.j->i", "ij->i->j", "......i", "ij->i", "...ijkl->i"}) {
    ir::Model m = one_node_model("Einsum", {ir::ValueInfo{"a", ir::TypeInfo::tensor(DType::kFloat32, {3, 5, 5}), ""}},
                                 {attr_string("equation", eq)}, 1, 17);
    // The loss declared float (ONNX's inference gives up on the bad equation): the rule is reached.
    m.graph->outputs[0].type = ir::TypeInfo::tensor(DType::kFloat32, {});
    try {
      onnxtrain::autodiff::build_gradient_model(m, {"loss"}, {"a"}, "loss");
      ADD_FAILURE() << "expected an error for " << eq;
    } catch (const onnxtrain::Error& e) {
      EXPECT_NE(std::string(e.what()).find("node_Einsum"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("equation"), std::string::npos) << e.what();
    }
  }
}

// Exported attention: a fused projection sliced at a computed offset, reshaped to a shape
// assembled at run time, then multiplied. ONNX 1.12 leaves the Slice and Reshape outputs without a
// rank; type inference supplies their ranks so that the MatMul rule knows them. The gradient
// equals the one built when the offset and the shape are constants (everything inferred).
TEST(GradLinalg, MatMulAfterRunTimeSliceAndReshape) {
  auto model = [](bool runtime) {
    ir::Model m;
    m.ir_version = 8;
    m.opsets[""] = 17;
    m.graph = std::make_shared<ir::Graph>();
    ir::Graph& g = *m.graph;
    ir::TypeInfo xt = ir::TypeInfo::tensor(DType::kFloat64, {2, 3, 12});
    xt.dims[0] = ir::Dim{-1, "batch"};
    xt.dims[1] = ir::Dim{-1, "seq"};
    g.inputs.push_back(ir::ValueInfo{"x", xt, ""});
    const Tensor end = Tensor::from_vector<int64_t>({1}, {8}), shape = Tensor::from_vector<int64_t>({4}, {0, 0, 2, 4});
    if (runtime) {
      g.inputs.push_back(ir::ValueInfo{"end", ir::TypeInfo::tensor(DType::kInt64, {1}), ""});
      g.inputs.push_back(ir::ValueInfo{"shape", ir::TypeInfo::tensor(DType::kInt64, {4}), ""});
    } else {
      g.initializers.emplace_back("end", end);
      g.initializers.emplace_back("shape", shape);
    }
    g.initializers.emplace_back("start", Tensor::from_vector<int64_t>({1}, {0}));
    g.initializers.emplace_back("axis", Tensor::from_vector<int64_t>({1}, {-1}));
    g.nodes = {make_node("Slice", {"x", "start", "end", "axis"}, {"q"}), make_node("Reshape", {"q", "shape"}, {"q4"}),
               make_node("Transpose", {"q4"}, {"k"}, {attr_ints("perm", {0, 1, 3, 2})}), make_node("MatMul", {"q4", "k"}, {"s"}),
               make_node("Sin", {"s"}, {"t"}), make_node("ReduceSum", {"t"}, {"loss"}, {attr_int("keepdims", 0)})};
    g.outputs.push_back(ir::ValueInfo{"loss", {}, ""});
    return m;
  };
  std::mt19937 rng(500);
  const Tensor x = random_tensor(DType::kFloat64, {2, 3, 12}, rng);
  const ir::Model dynamic = onnxtrain::autodiff::build_gradient_model(model(true), {"loss"}, {"x"}, "loss");
  const ir::Model fixed = onnxtrain::autodiff::build_gradient_model(model(false), {"loss"}, {"x"}, "loss");
  const auto a = run_model(dynamic, {x, Tensor::from_vector<int64_t>({1}, {8}), Tensor::from_vector<int64_t>({4}, {0, 0, 2, 4})});
  const auto b = run_model(fixed, {x});
  ASSERT_EQ(a.back().shape(), x.shape());
  EXPECT_TRUE(all_close(a.back(), x.shape(), to_double(b.back()), 1e-12, 1e-12));
}
