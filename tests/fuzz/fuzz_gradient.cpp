// Fuzz target: bytes -> model -> gradient graph (GradientGraphBuilder on the first float output as
// the loss, every trainable initializer as x) -> the gradient model loaded and run once.
#include <set>

#include "fuzz_common.h"
#include "onnxtrain/gradient.h"
#include "onnxtrain/inspect.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  std::string grad_model;
  fuzz::guarded([&] {
    const onnxtrain::ModelSummary m = onnxtrain::summarize_model_bytes(bytes);
    std::string loss;
    for (const auto& o : m.outputs)
      if (o.elem == onnxtrain::DType::kFloat32 || o.elem == onnxtrain::DType::kFloat64) {
        loss = o.name;
        break;
      }
    std::set<std::string> xs;
    for (const auto& i : m.initializers)
      if (i.trainable) xs.insert(i.name);
    if (loss.empty() || xs.empty()) return;
    onnxtrain::GradientGraphBuilder b(bytes, {loss}, xs, loss);
    b.build();
    grad_model = b.get_model();
  });
  if (!grad_model.empty()) {
    fuzz::ByteSource feed_bytes(data, size);
    fuzz::load_and_run(grad_model.data(), grad_model.size(), feed_bytes);
  }
  return 0;
}
