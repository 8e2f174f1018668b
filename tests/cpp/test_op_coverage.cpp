// Operator coverage, measured rather than listed: every kernel registered by an execution provider
// has a reference test, and every com.onnxtrain operator of the table a test. A
// registration is covered when an ONNX conformance case runs a node of it (expected outputs from
// ONNX's reference implementation), or when a C++ test names it as a string literal (the tests run
// kernels by name against naive double references: run_node("Op", ...), the gradient tests'
// check_gradient / GRAD_COVERS). A com.onnxtrain FooGrad or FooTrain kernel is also covered by the
// finite-difference test of Foo's gradient rule (GRAD_COVERS "Foo"): the rule runs it, and the test
// compares its output with central differences of Foo. Gradient rules themselves are measured by
// GradCoverage.EveryRuleHasItsTest.
// A missing test fails naming the provider, the domain and the operator.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <regex>
#include <set>

#include "grad_check.h"
#include "kernels/kernel.h"
#include "ops/onnxtrain_ops.h"
#include "test_provider.h"
#ifdef ONNXTRAIN_WITH_CUDA
#include "kernels/cuda/cuda_provider.h"
#endif
#include "test_util.h"

using namespace onnxtrain;

namespace {

void collect_ops(const onnx::GraphProto& g, std::set<std::pair<std::string, std::string>>* ops) {
  for (const auto& n : g.node()) {
    ops->emplace(n.domain() == "ai.onnx" ? "" : n.domain(), n.op_type());
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collect_ops(a.g(), ops);
      for (const auto& sg : a.graphs()) collect_ops(sg, ops);
    }
  }
}

// (domain, op) of every node of every conformance model.
std::set<std::pair<std::string, std::string>> conformance_ops() {
  const char* env = std::getenv("ONNXTRAIN_CONFORMANCE_DIR");
  const std::string root = env ? env : ONNXTRAIN_SOURCE_DIR "/../shared/conformance/onnx-1.12";
  std::set<std::pair<std::string, std::string>> ops;
  for (const char* sub : {"node", "simple"})
    for (const auto& name : ot_test::list_dir(root + "/" + sub)) {
      const std::string bytes = ot_test::slurp(root + "/" + sub + "/" + name + "/model.onnx");
      onnx::ModelProto m;
      if (!bytes.empty() && m.ParseFromString(bytes)) collect_ops(m.graph(), &ops);
    }
  return ops;
}

// Every string literal of the C++ tests.
std::set<std::string> test_literals() {
  const std::string dir = ONNXTRAIN_SOURCE_DIR "/tests/cpp";
  static const std::regex literal("\"([A-Za-z0-9_.]+)\"");
  std::set<std::string> lits;
  for (const auto& name : ot_test::list_dir(dir)) {
    if (!name.ends_with(".cpp") && !name.ends_with(".h")) continue;
    if (name == "test_op_coverage.cpp") continue;  // this file names no operator
    const std::string text = ot_test::slurp(dir + "/" + name);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), literal); it != std::sregex_iterator(); ++it)
      lits.insert((*it)[1].str());
  }
  return lits;
}

// Operators whose gradient rule a finite-difference test declares (GRAD_COVERS), as
// (domain, op); and the com.onnxtrain kernels those rules run (Foo -> FooGrad, FooTrain).
std::set<std::pair<std::string, std::string>> gradient_tested() {
  std::set<std::pair<std::string, std::string>> r;
  const std::string custom = std::string(ops::kDomain) + ".";
  for (const auto& [test, names] : ot_test::declared_coverage())
    for (const std::string& name : names) {
      const bool is_custom = name.rfind(custom, 0) == 0;
      const std::string op = is_custom ? name.substr(custom.size()) : name;
      if (is_custom) r.emplace(ops::kDomain, op);
      for (const char* suffix : {"Grad", "Train"}) r.emplace(ops::kDomain, op + suffix);
    }
  return r;
}

bool named_by_a_test(const std::string& domain, const std::string& op, const std::set<std::string>& literals) {
  static const auto by_gradient = gradient_tested();
  return literals.count(op) || by_gradient.count({domain, op});
}

void expect_covered(const std::string& provider, const KernelRegistry& reg,
                    const std::set<std::pair<std::string, std::string>>& conformance, const std::set<std::string>& literals) {
  size_t n = 0;
  for (const auto& [domain, op] : reg.ops()) {
    ++n;
    if (conformance.count({domain, op}) || named_by_a_test(domain, op, literals)) continue;
    ADD_FAILURE() << provider << ": " << (domain.empty() ? "ai.onnx" : domain) << "." << op
                  << " has a kernel but no reference test: no conformance case runs it and no C++ test names it";
  }
  EXPECT_GT(n, 0u) << provider << " registers no kernel";
}

}  // namespace

TEST(OpCoverage, EveryKernelRegistrationHasAReferenceTest) {
  const auto conformance = conformance_ops();
  // Without the conformance cases (as the conformance runner does) the measure cannot be taken.
  if (conformance.empty()) GTEST_SKIP() << "conformance suite not found (ONNXTRAIN_CONFORMANCE_DIR)";
  ASSERT_GT(conformance.size(), 100u) << "too few conformance models were read";
  const auto literals = test_literals();
  expect_covered(cpu_provider().name(), cpu_provider().registry(), conformance, literals);
  expect_covered(ot_test::test_provider().name(), ot_test::test_provider().registry(), conformance, literals);
#ifdef ONNXTRAIN_WITH_CUDA
  // The CUDA provider's kernels (its registry needs no device).
  expect_covered("CUDAExecutionProvider", kernels::cuda::kernel_registry(), conformance, literals);
#endif
}

// Every com.onnxtrain operator of the table is tested (that each has a CPU kernel and each kernel a
// row: Emitter.OnnxtrainTableCoversTheKernels).
TEST(OpCoverage, EveryTableOperatorHasATest) {
  const auto literals = test_literals();
  for (const ops::OpDef& d : ops::onnxtrain_ops())
    EXPECT_TRUE(named_by_a_test(ops::kDomain, d.name, literals))
        << ops::kDomain << "." << d.name << " has a table row but no test: no C++ test names it, none tests its forward's gradient";
}
