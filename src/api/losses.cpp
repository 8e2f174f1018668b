// The loss builder's public entry points (include/onnxtrain/training.h, trainer.h) over
// train/loss_builder.h, and the weights a model would train.
#include "ir/onnx_io.h"
#include "onnxtrain/trainer.h"
#include "onnxtrain/training.h"
#include "train/loss_builder.h"
#include "train/training_graph.h"

namespace onnxtrain {

std::string add_loss_output(const std::string& model_bytes, const std::string& score_name, const std::string& loss_name,
                            const std::string& label_name, const std::string& weight_name,
                            const std::map<std::string, std::map<std::string, float>>& penalty, const std::string& output,
                            const std::map<std::string, std::string>& kwargs) {
  ir::Model m = ir::load_model_bytes(model_bytes.data(), model_bytes.size());
  train::add_loss(m, score_name, loss_name, label_name, weight_name, penalty, output, kwargs);
  return ir::serialize_model(m);
}

std::vector<std::string> loss_names() { return train::loss_names(); }

Objective loss_objective(const std::string& kind, const std::map<std::string, std::string>& kwargs,
                         const NodeArg& score, const std::string& loss_output, const std::string& label_name) {
  return train::loss_objective(kind, kwargs, score, loss_output, label_name);
}

std::vector<std::string> get_train_initializer(const std::string& model_bytes) {
  ir::Model m = ir::load_model_bytes(model_bytes.data(), model_bytes.size());
  return train::trainable_initializers(m);
}

}  // namespace onnxtrain
