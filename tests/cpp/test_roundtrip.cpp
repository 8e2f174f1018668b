// load -> export -> load round-trips every model of the ONNX conformance suite, and the exported
// ModelProto passes ONNX's own checker.
#include <dirent.h>
#include <onnx/checker.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>

#include "ir/onnx_io.h"
#include "ir/proto.h"
#include "test_util.h"

using namespace onnxtrain;

namespace {
std::string conformance_root() {
  if (const char* e = std::getenv("ONNXTRAIN_CONFORMANCE_DIR")) return e;
  return ONNXTRAIN_SOURCE_DIR "/../shared/conformance/onnx-1.12";
}
std::vector<std::string> model_paths(const std::string& root) {
  std::vector<std::string> r;
  for (const char* sub : {"node", "simple"}) {
    std::string dir = root + "/" + sub;
    DIR* d = opendir(dir.c_str());
    if (!d) continue;
    while (dirent* e = readdir(d)) {
      std::string p = dir + "/" + e->d_name + "/model.onnx";
      struct stat st;
      if (e->d_name[0] != '.' && stat(p.c_str(), &st) == 0) r.push_back(p);
    }
    closedir(d);
  }
  std::sort(r.begin(), r.end());
  return r;
}
}  // namespace

TEST(RoundTrip, EveryConformanceModel) {
  const auto paths = model_paths(conformance_root());
  if (paths.empty()) GTEST_SKIP() << "conformance suite not found at " << conformance_root();
  int checked = 0;
  for (const auto& p : paths) {
    ir::Model m;
    try {
      m = ir::load_model_file(p);
    } catch (const Error& e) {
      ADD_FAILURE() << p << ": load failed: " << e.what();
      continue;
    }
    const std::string once = ir::serialize_model(m);
    onnx::ModelProto proto;
    ASSERT_TRUE(proto.ParseFromString(once)) << p;
    try {
      onnx::checker::check_model(proto);
    } catch (const std::exception& e) {
      ADD_FAILURE() << p << ": exported model fails onnx.checker: " << e.what();
    }
    ir::Model again = ir::load_model_bytes(once.data(), once.size());
    EXPECT_EQ(ir::serialize_model(again), once) << p << ": second round trip differs";
    ++checked;
  }
  EXPECT_GT(checked, 900);
  std::printf("round-tripped %d models\n", checked);
}
