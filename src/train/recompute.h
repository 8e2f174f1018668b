// Recompute (activation checkpointing): a pass over a gradient model that stops the backward part
// from reading chosen forward activations. Each backward reader of a dropped value reads a copy
// computed again from what is kept (the inputs of the recomputed nodes), by clones of the forward
// nodes placed just before their first backward reader; the planner then frees the dropped values
// during the forward part. The clones run the same kernels on the same inputs, so gradients are
// bitwise those of the run without recompute.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "ir/ir.h"

namespace onnxtrain::train {

/// What to recompute (onnxruntime-training's TrainingParameters / ORTTrainer graph_transformer
/// options, plus onnxtrain's explicit list).
struct RecomputeConfig {
  /// Outputs of Gelu / FastGelu / BiasGelu (any domain), recomputed from their inputs.
  bool gelu = false;
  /// Outputs of Dropout nodes that follow a Softmax (attention dropout), recomputed from the
  /// Softmax output and the saved mask.
  bool attn_dropout = false;
  /// Whole transformer layers: only a layer's input (and what its nodes read from outside it) is
  /// kept; every activation inside is recomputed when the backward pass reaches the layer.
  bool transformer_layer = false;
  /// With transformer_layer: how many layers, from the first; 0 (and anything >= the number of
  /// layers) means every layer but the last (whose backward follows its forward at once).
  int64_t number_layers = 0;
  /// Forward values to recompute, from the values not listed (a listed value's node that reads
  /// another listed value reads its recomputed copy; what it reads otherwise is kept).
  std::vector<std::string> values;
  /// > 0: a budget, in bytes, for the activations the backward pass holds (the forward values it
  /// reads, as PyTorch's saved tensors). The forward graph is cut into segments at values every
  /// path of the gradient goes through; the fewest segments that bring the estimate within the
  /// budget are recomputed, each from the value that ends the segment before it. Needs the
  /// forward values' shapes (static input shapes).
  int64_t budget_bytes = 0;
  /// Standard-ONNX graph: Dropout outputs in training mode are kept (their recompute uses
  /// com.onnxtrain DropoutGrad).
  bool portable = false;

  bool any() const { return gelu || attn_dropout || transformer_layer || !values.empty() || budget_bytes > 0; }
};

/// A transformer layer found in a forward graph: its input value, its output value and the indices
/// of its nodes (forward graph order).
struct TransformerLayer {
  std::string start, end;
  std::vector<size_t> nodes;
};

/// The transformer layers of `forward`, in order. A layer ends at the output of the first
/// LayerNormalization after a Gelu or an Erf (post-norm: the layer's last node; pre-norm: the next
/// layer's first normalization), else (no LayerNormalization, e.g. one decomposed by an exporter)
/// at the first forward_cuts value after it; the first layer starts at the output of the last
/// LayerNormalization or Dropout (else the last cut) before its first Softmax, every other layer
/// at the end of the previous one.
std::vector<TransformerLayer> find_transformer_layers(const ir::Graph& forward);

/// What apply_recompute did.
struct RecomputeStats {
  size_t dropped = 0;  ///< forward values the backward part no longer reads
  size_t cloned = 0;   ///< forward nodes recomputed in the backward part
  size_t layers = 0;   ///< transformer layers (or budget segments) recomputed
  /// With a budget: the estimated bytes of activations the backward pass holds, without and with
  /// recompute.
  int64_t saved_bytes = 0, saved_bytes_recompute = 0;
};

/// Segments of `forward` for budgeted recompute: the values (in topological order) after which the
/// forward pass holds no other value that depends on an initializer, and their topological
/// positions (the position of the node producing each).
std::vector<std::pair<std::string, size_t>> forward_cuts(const ir::Graph& forward, const std::vector<size_t>& order);

/// Applies `cfg` to `gradient_model`, a gradient model of `forward` (its forward nodes are those
/// whose outputs `forward`'s nodes define). Throws InvalidArgument naming a value of cfg.values
/// that is not a recomputable activation, when transformer_layer finds no layer, and when a budget
/// cannot be met or estimated (shapes unknown).
RecomputeStats apply_recompute(ir::Model& gradient_model, const ir::Graph& forward, const RecomputeConfig& cfg);

}  // namespace onnxtrain::train
