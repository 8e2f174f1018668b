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

TEST(GradLinalg, MatMulShapes) {
  // 2-D, batched with broadcast batch dims, 1-D on either side, dot product.
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 5}}, {{2, 1, 3, 4}, {5, 4, 2}}, {{3, 4}, {2, 4, 5}}, {{4}, {2, 4, 3}},
      {{2, 3, 4}, {4}},  {{4}, {4}},               {{4}, {4, 3}},       {{3, 4}, {4}}};
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
