// Every entry of the gradient rule table has its test: a finite-difference test (check_gradient
// or a file's helpers around it) for each rule, a zero-gradient test (check_zero_gradient) for each
// operator declared zero. kTests names the test of each operator. A rule added without a test
// fails here; so does a listed test that does not exist, a test whose source file never names
// the operator, and a listed operator that lost its rule.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "autodiff/rule_context.h"

namespace {

// "Suite.Test" per operator ("domain.Op" for other domains).
const std::map<std::string, std::string>& tests_by_op() {
  static const std::map<std::string, std::string> m = {
      // elementwise: arithmetic, math, activations, variadic, casts
      {"Add", "GradElementwise.Add"},
      {"Sub", "GradElementwise.Sub"},
      {"Mul", "GradElementwise.Mul"},
      {"Div", "GradElementwise.Div"},
      {"Pow", "GradElementwise.Pow"},
      {"Neg", "GradElementwise.Neg"},
      {"Mod", "GradElementwise.Mod"},
      {"Abs", "GradElementwise.UnaryMath"},
      {"Sqrt", "GradElementwise.UnaryMath"},
      {"Reciprocal", "GradElementwise.UnaryMath"},
      {"Exp", "GradElementwise.UnaryMath"},
      {"Log", "GradElementwise.UnaryMath"},
      {"Erf", "GradElementwise.UnaryMath"},
      {"Sin", "GradElementwise.UnaryMath"},
      {"Cos", "GradElementwise.UnaryMath"},
      {"Tan", "GradElementwise.UnaryMath"},
      {"Asin", "GradElementwise.UnaryMath"},
      {"Acos", "GradElementwise.UnaryMath"},
      {"Atan", "GradElementwise.UnaryMath"},
      {"Sinh", "GradElementwise.UnaryMath"},
      {"Cosh", "GradElementwise.UnaryMath"},
      {"Asinh", "GradElementwise.UnaryMath"},
      {"Acosh", "GradElementwise.UnaryMath"},
      {"Atanh", "GradElementwise.UnaryMath"},
      {"Tanh", "GradElementwise.UnaryMath"},
      {"Sigmoid", "GradElementwise.UnaryMath"},
      {"Relu", "GradElementwise.Activations"},
      {"LeakyRelu", "GradElementwise.Activations"},
      {"Elu", "GradElementwise.Activations"},
      {"Selu", "GradElementwise.Activations"},
      {"Celu", "GradElementwise.Activations"},
      {"ThresholdedRelu", "GradElementwise.Activations"},
      {"Softplus", "GradElementwise.Activations"},
      {"Softsign", "GradElementwise.Activations"},
      {"HardSigmoid", "GradElementwise.Activations"},
      {"HardSwish", "GradElementwise.Activations"},
      {"PRelu", "GradElementwise.PRelu"},
      {"Clip", "GradElementwise.Clip"},
      {"Sum", "GradElementwise.SumMean"},
      {"Mean", "GradElementwise.SumMean"},
      {"Max", "GradElementwise.MaxMin"},
      {"Min", "GradElementwise.MaxMin"},
      {"Cast", "GradElementwise.CastCastLike"},
      {"CastLike", "GradElementwise.CastCastLike"},
      {"Where", "GradIndex.Where"},
      {"Identity", "GradShape.TransposeIdentity"},
      // elementwise: declared zero-gradient
      {"Round", "GradElementwise.ZeroGradientOperators"},
      {"Floor", "GradElementwise.ZeroGradientOperators"},
      {"Ceil", "GradElementwise.ZeroGradientOperators"},
      {"Sign", "GradElementwise.ZeroGradientOperators"},
      {"IsNaN", "GradElementwise.ZeroGradientOperators"},
      {"IsInf", "GradElementwise.ZeroGradientOperators"},
      {"Equal", "GradElementwise.ZeroGradientOperators"},
      {"Less", "GradElementwise.ZeroGradientOperators"},
      {"Greater", "GradElementwise.ZeroGradientOperators"},
      {"LessOrEqual", "GradElementwise.ZeroGradientOperators"},
      {"GreaterOrEqual", "GradElementwise.ZeroGradientOperators"},
      {"Not", "GradElementwise.ZeroGradientOperators"},
      {"And", "GradElementwise.ZeroGradientOperators"},
      {"Or", "GradElementwise.ZeroGradientOperators"},
      {"Xor", "GradElementwise.ZeroGradientOperators"},
      {"BitShift", "GradElementwise.ZeroGradientOperators"},
      // linear algebra, convolution, pooling
      {"MatMul", "GradLinalg.MatMulShapes"},
      {"Gemm", "GradLinalg.GemmTransposesAlphaBetaC"},
      {"Einsum", "GradLinalg.Einsum"},
      {"Conv", "GradConv.Conv2D"},
      {"ConvTranspose", "GradConv.ConvTranspose"},
      {"MaxPool", "GradPool.MaxPool"},
      {"AveragePool", "GradPool.AveragePool"},
      {"LpPool", "GradPool.LpPool"},
      {"GlobalMaxPool", "GradPool.GlobalPools"},
      {"GlobalAveragePool", "GradPool.GlobalPools"},
      {"GlobalLpPool", "GradPool.GlobalPools"},
      // reductions, scans, softmax
      {"ReduceSum", "GradReduce.SumAndMean"},
      {"ReduceMean", "GradReduce.SumAndMean"},
      {"ReduceMax", "GradReduce.MaxMin"},
      {"ReduceMin", "GradReduce.MaxMin"},
      {"ReduceProd", "GradReduce.Prod"},
      {"ReduceL1", "GradReduce.NormsAndLogSums"},
      {"ReduceL2", "GradReduce.NormsAndLogSums"},
      {"ReduceSumSquare", "GradReduce.NormsAndLogSums"},
      {"ReduceLogSum", "GradReduce.NormsAndLogSums"},
      {"ReduceLogSumExp", "GradReduce.NormsAndLogSums"},
      {"CumSum", "GradReduce.CumSum"},
      {"TopK", "GradReduce.TopK"},
      {"Softmax", "GradReduce.SoftmaxFamily"},
      {"LogSoftmax", "GradReduce.SoftmaxFamily"},
      {"Hardmax", "GradReduce.ZeroGradientOperators"},
      {"ArgMax", "GradReduce.ZeroGradientOperators"},
      {"ArgMin", "GradReduce.ZeroGradientOperators"},
      // normalization, dropout, losses
      {"BatchNormalization", "GradNorm.BatchNormalization"},
      {"InstanceNormalization", "GradNorm.InstanceNormalization"},
      {"LayerNormalization", "GradNorm.LayerNormalization"},
      {"LRN", "GradNorm.LRN"},
      {"Dropout", "GradNorm.DropoutTrainingUsesTheForwardMask"},
      {"SoftmaxCrossEntropyLoss", "GradLoss.SoftmaxCrossEntropy"},
      {"NegativeLogLikelihoodLoss", "GradLoss.NegativeLogLikelihood"},
      // shape and data movement
      {"Reshape", "GradShape.Reshape"},
      {"Flatten", "GradShape.Flatten"},
      {"Squeeze", "GradShape.SqueezeUnsqueeze"},
      {"Unsqueeze", "GradShape.SqueezeUnsqueeze"},
      {"Transpose", "GradShape.TransposeIdentity"},
      {"Expand", "GradShape.Expand"},
      {"Tile", "GradShape.Tile"},
      {"Range", "GradShape.Range"},
      {"Concat", "GradMovement.Concat"},
      {"Split", "GradMovement.Split"},
      {"Slice", "GradMovement.Slice"},
      {"Pad", "GradMovement.PadConstant"},
      {"Trilu", "GradMovement.Trilu"},
      {"SpaceToDepth", "GradMovement.DepthSpace"},
      {"DepthToSpace", "GradMovement.DepthSpace"},
      // shape queries and generators: declared zero-gradient
      {"Shape", "GradShape.ZeroGradientOperators"},
      {"Size", "GradShape.ZeroGradientOperators"},
      {"NonZero", "GradShape.ZeroGradientOperators"},
      {"ConstantOfShape", "GradShape.ZeroGradientOperators"},
      {"Constant", "GradShape.ZeroGradientOperators"},
      {"EyeLike", "GradShape.ZeroGradientOperators"},
      {"RandomNormal", "GradShape.ZeroGradientOperators"},
      {"RandomUniform", "GradShape.ZeroGradientOperators"},
      {"RandomNormalLike", "GradShape.ZeroGradientOperators"},
      {"RandomUniformLike", "GradShape.ZeroGradientOperators"},
      {"Bernoulli", "GradShape.ZeroGradientOperators"},
      {"Multinomial", "GradShape.ZeroGradientOperators"},
      // indexing and image
      {"Gather", "GradIndex.Gather"},
      {"GatherElements", "GradIndex.GatherElements"},
      {"GatherND", "GradIndex.GatherND"},
      {"ScatterND", "GradIndex.ScatterND"},
      {"ScatterElements", "GradIndex.ScatterElements"},
      {"OneHot", "GradIndex.OneHot"},
      {"Resize", "GradIndex.Resize"},
      // recurrent and control flow
      {"LSTM", "GradRnn.LstmDirections"},
      {"GRU", "GradRnn.GruDirectionsAndLinearBeforeReset"},
      {"RNN", "GradRnn.RnnDirectionsLayoutLens"},
      {"If", "GradControlFlow.IfThenBranch"},
      {"Loop", "GradControlFlow.LoopCarriedScanAndOuterReads"},
  };
  return m;
}

std::string key(const std::string& domain, const std::string& op) { return domain.empty() ? op : domain + "." + op; }

}  // namespace

TEST(GradCoverage, EveryRuleHasItsTest) {
  // Registered tests: "Suite.Test" -> source file.
  std::map<std::string, std::string> registered;
  const ::testing::UnitTest& ut = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < ut.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& s = *ut.GetTestSuite(i);
    for (int j = 0; j < s.total_test_count(); ++j) {
      const ::testing::TestInfo& t = *s.GetTestInfo(j);
      registered[std::string(s.name()) + "." + t.name()] = t.file();
    }
  }
  std::map<std::string, std::string> sources;
  auto source = [&](const std::string& path) -> const std::string& {
    auto it = sources.find(path);
    if (it != sources.end()) return it->second;
    std::ifstream f(path);
    std::ostringstream os;
    os << f.rdbuf();
    return sources[path] = os.str();
  };

  std::set<std::string> ruled;
  for (const auto& [domain, op] : onnxtrain::autodiff::rule_ops()) ruled.insert(key(domain, op));
  const auto& tests = tests_by_op();
  for (const auto& op : ruled) {
    auto it = tests.find(op);
    if (it == tests.end()) {
      ADD_FAILURE() << op << " has a gradient rule (or zero-gradient declaration) but no test listed in "
                    << "test_grad_coverage.cpp: write its finite-difference (or check_zero_gradient) test";
      continue;
    }
    auto reg = registered.find(it->second);
    if (reg == registered.end()) {
      ADD_FAILURE() << op << ": the listed test " << it->second << " does not exist";
      continue;
    }
    const std::string& text = source(reg->second);
    EXPECT_FALSE(text.empty()) << op << ": cannot read " << reg->second;
    EXPECT_NE(text.find("\"" + op.substr(op.rfind('.') == std::string::npos ? 0 : op.rfind('.') + 1) + "\""),
              std::string::npos)
        << op << ": " << reg->second << " (of " << it->second << ") never names the operator";
  }
  for (const auto& [op, test] : tests)
    EXPECT_TRUE(ruled.count(op)) << op << " is listed (" << test << ") but has no entry in the rule table";
}

// The list: operators whose derivative is zero almost everywhere are declared so.
TEST(GradCoverage, ZeroAlmostEverywhereOperatorsAreDeclared) {
  for (const char* op : {"Round", "Floor", "Ceil", "Sign", "ArgMax", "ArgMin", "Equal", "Less", "Greater", "LessOrEqual",
                         "GreaterOrEqual", "Shape"}) {
    const onnxtrain::autodiff::GradRule* r = onnxtrain::autodiff::find_rule("", op, 17);
    ASSERT_NE(r, nullptr) << op;
    EXPECT_FALSE(r->build) << op << " should be declared zero-gradient";
  }
}
