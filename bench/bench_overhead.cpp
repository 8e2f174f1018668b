// Steady-state run() overhead: a one-node model (Add of two 1-element tensors) run many times
// through InferenceSession. Prints microseconds per call (median of 7 batches).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "ir/onnx_io.h"
#include "onnxtrain/session.h"

using namespace onnxtrain;

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20000;
  ir::Model m;
  m.ir_version = 8;
  m.opsets[""] = 17;
  m.graph = std::make_shared<ir::Graph>();
  m.graph->name = "one_node";
  ir::Node n;
  n.op_type = "Add";
  n.name = "add";
  n.inputs = {"a", "b"};
  n.outputs = {"y"};
  m.graph->nodes.push_back(n);
  m.graph->inputs.push_back({"a", ir::TypeInfo::tensor(DType::kFloat32, {1}), ""});
  m.graph->inputs.push_back({"b", ir::TypeInfo::tensor(DType::kFloat32, {1}), ""});
  m.graph->outputs.push_back({"y", ir::TypeInfo::tensor(DType::kFloat32, {1}), ""});
  const std::string bytes = ir::serialize_model(m);
  SessionOptions so;
  so.intra_op_num_threads = 1;
  InferenceSession s(bytes.data(), bytes.size(), so);
  std::vector<std::pair<std::string, Tensor>> feeds{{"a", Tensor::scalar<float>(1.f).reshaped({1})},
                                                    {"b", Tensor::scalar<float>(2.f).reshaped({1})}};
  for (int i = 0; i < 1000; ++i) s.run({}, feeds);
  std::vector<double> batches;
  for (int b = 0; b < 7; ++b) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) s.run({}, feeds);
    auto t1 = std::chrono::steady_clock::now();
    batches.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / iters);
  }
  std::sort(batches.begin(), batches.end());
  std::printf("one-node model, InferenceSession::run (C++): %.2f us/call (median of 7 x %d calls)\n", batches[3], iters);
  return 0;
}
