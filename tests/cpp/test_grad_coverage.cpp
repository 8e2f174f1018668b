// Every entry of the gradient rule table has its test: a finite-difference test (check_gradient
// or a file's helpers around it) for each rule, a zero-gradient test (check_zero_gradient) for each
// operator declared zero. Tests declare what they cover beside themselves (GRAD_COVERS in
// grad_check.h), so adding an operator touches its test files, not a list here. A rule without a
// covering test fails; so does a declaration naming a test that does not exist, a test whose
// source file never names the operator, and a declared operator without a rule.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "autodiff/rule_context.h"
#include "grad_check.h"

namespace {

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
  std::map<std::string, std::string> tests;  // operator -> a test covering it
  for (const auto& [test, ops] : ot_test::declared_coverage())
    for (const auto& op : ops) tests.emplace(op, test);
  for (const auto& op : ruled) {
    auto it = tests.find(op);
    if (it == tests.end()) {
      ADD_FAILURE() << op << " has a gradient rule (or zero-gradient declaration) but no test declares it "
                    << "(GRAD_COVERS): write its finite-difference (or check_zero_gradient) test";
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
    EXPECT_TRUE(ruled.count(op)) << op << " is declared (" << test << ") but has no entry in the rule table";
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
