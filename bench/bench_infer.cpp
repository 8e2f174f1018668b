// Typing cost: ir::infer_types on a deep MLP (MatMul, Add, Relu per layer; 64x64 float weights;
// a ReduceSum loss)
// and on its gradient graph (the builder's output: forward, backward and com.onnxtrain nodes).
// Prints the node count and milliseconds per call (median of 7 batches) for each.
//   bench_infer [layers=170] [iterations per batch=5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "autodiff/builder.h"
#include "ir/infer.h"

using namespace onnxtrain;

namespace {

ir::Model mlp(int layers, int width) {
  ir::Model m;
  m.ir_version = 8;
  m.opsets[""] = 17;
  m.graph = std::make_shared<ir::Graph>();
  m.graph->name = "mlp";
  m.graph->inputs.push_back({"x", ir::TypeInfo::tensor(DType::kFloat32, {32, width}), ""});
  std::string h = "x";
  for (int l = 0; l < layers; ++l) {
    const std::string k = std::to_string(l);
    Tensor w = Tensor::zeros(DType::kFloat32, {width, width}), b = Tensor::zeros(DType::kFloat32, {width});
    m.graph->initializers.emplace_back("w" + k, w);
    m.graph->initializers.emplace_back("b" + k, b);
    auto node = [&](const char* op, std::vector<std::string> in, const std::string& out) {
      ir::Node n;
      n.op_type = op;
      n.name = out;
      n.inputs = std::move(in);
      n.outputs = {out};
      m.graph->nodes.push_back(std::move(n));
    };
    node("MatMul", {h, "w" + k}, "mm" + k);
    node("Add", {"mm" + k, "b" + k}, "add" + k);
    node("Relu", {"add" + k}, "h" + k);
    h = "h" + k;
  }
  ir::Node sum;
  sum.op_type = "ReduceSum";
  sum.name = "loss";
  sum.inputs = {h};
  sum.outputs = {"loss"};
  ir::Attribute keep;
  keep.name = "keepdims";
  keep.type = ir::AttrType::kInt;
  sum.attrs = {keep};
  m.graph->nodes.push_back(std::move(sum));
  m.graph->outputs.push_back({"loss", ir::TypeInfo(), ""});
  return m;
}

// Median milliseconds of one infer_types call on a fresh copy of `m` (value_info as given).
double time_infer(const ir::Model& m, int iters) {
  std::vector<double> batches;
  for (int b = 0; b < 7; ++b) {
    std::vector<ir::Model> copies(size_t(iters), m);
    for (auto& c : copies) c.graph = std::make_shared<ir::Graph>(*m.graph);
    auto t0 = std::chrono::steady_clock::now();
    for (auto& c : copies) ir::infer_types(c);
    auto t1 = std::chrono::steady_clock::now();
    batches.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count() / iters);
  }
  std::sort(batches.begin(), batches.end());
  return batches[3];
}

}  // namespace

int main(int argc, char** argv) {
  const int layers = argc > 1 ? std::atoi(argv[1]) : 170;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 5;
  ir::Model fwd = mlp(layers, 64);
  std::printf("forward: %zu nodes, %.2f ms per infer_types\n", fwd.graph->nodes.size(), time_infer(fwd, iters));
  std::vector<std::string> xs;
  for (const auto& [name, t] : fwd.graph->initializers) xs.push_back(name);
  ir::Model grad = autodiff::build_gradient_model(fwd, {"loss"}, xs, "loss");
  grad.graph->value_info.clear();  // typed from scratch
  std::printf("gradient: %zu nodes, %.2f ms per infer_types\n", grad.graph->nodes.size(), time_infer(grad, iters));
  return 0;
}
