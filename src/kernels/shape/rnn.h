// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// Recurrent operators: attributes, validation and output shapes of RNN, GRU and LSTM, of their
// training variants (com.onnxtrain RNNTrain, GRUTrain, LSTMTrain) and backward kernels (*Grad).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/shape/common.h"

namespace onnxtrain::kernels::shape {

enum class RnnCell { kRnn, kGru, kLstm };

/// Gates per hidden unit: RNN 1 (i), GRU 3 (zrh), LSTM 4 (iofc).
constexpr int64_t rnn_gates(RnnCell c) { return c == RnnCell::kLstm ? 4 : c == RnnCell::kGru ? 3 : 1; }
/// The *Train forward's training reserve output, after Y, Y_h[, Y_c].
constexpr size_t rnn_reserve_output(RnnCell c) { return c == RnnCell::kLstm ? 3 : 2; }

/// Inputs of the *Grad kernels after the forward's (X .. initial_h[, initial_c, P]).
struct RnnGradInputs {
  size_t reserve, dy, dyh, dyc;  ///< the training reserve, dY, dY_h, dY_c (LSTM)
};
constexpr RnnGradInputs rnn_grad_inputs(RnnCell c) {
  const size_t r = c == RnnCell::kLstm ? 8 : 6;
  return {r, r + 1, r + 2, r + 3};
}

/// One activation function of `activations`, with its alpha and beta.
struct RnnActivation {
  enum class Kind { kSigmoid, kTanh, kRelu, kAffine, kLeakyRelu, kThresholdedRelu, kScaledTanh, kHardSigmoid, kElu,
                    kSoftsign, kSoftplus };
  Kind kind = Kind::kSigmoid;
  float alpha = 0, beta = 0;
};

/// Attributes and input sizes, shared by the forward kernels (plain and training variant) and the
/// backward kernel.
struct RnnConfig {
  enum Input { kX, kW, kR, kB, kSeqLens, kInitH, kInitC, kP };
  enum Output { kY, kYh, kYc };
  enum GradOutput { kDX, kDW, kDR, kDB, kDH0, kDC0, kDP };

  /// Reads and checks direction, hidden_size (positive), clip (positive), layout (0 or 1; opset 14+,
  /// or any opset with `custom`, a com.onnxtrain variant), input_forget (LSTM), linear_before_reset
  /// (GRU) and the activations: `activations` lists the functions per direction (once for both
  /// directions, or once per direction), activation_alpha/activation_beta are consumed in order by
  /// the functions that take them; missing values use the defaults of the matching ONNX operators.
  RnnConfig(const KernelInfo& info, RnnCell cell, bool custom);

  int64_t gates() const { return rnn_gates(cell_); }

  /// Validates X, W, R, B, sequence_lens, initial_h (and for LSTM initial_c, P) at the forward
  /// operator's input positions (float or double, one element type, the shapes above); sets the
  /// sizes. Returns X's element type.
  DType read_shapes(const PrepareContext& ctx);
  Shape state_shape() const { return layout_ ? Shape{batch_, dirs_, H_} : Shape{dirs_, batch_, H_}; }
  Shape y_shape() const { return layout_ ? Shape{batch_, seq_, dirs_, H_} : Shape{seq_, dirs_, batch_, H_}; }
  /// Training reserve of one direction (written by the *Train forward, read by *Grad), rows in X's
  /// layout: pre-activations [rows, G*H] (biases and peepholes added, before clip; gate order of W),
  /// the hidden state before each step [rows, H] (zero for steps past every length), then LSTM's
  /// cell state before each step [rows, H] or GRU's H·Rh^T + Rbh under linear_before_reset.
  int64_t reserve_per_dir() const {
    const bool extra = cell_ == RnnCell::kLstm || (cell_ == RnnCell::kGru && linear_before_reset_);
    return seq_ * batch_ * (gates() * H_ + H_ + (extra ? H_ : 0));
  }

  /// After read_shapes: RNN and GRU take no initial_c or P; sets Y, Y_h (LSTM: Y_c) and with
  /// `train` the reserve [dirs * reserve_per_dir()] (those the node names); without `train` no more
  /// outputs than those.
  void set_forward_outputs(PrepareContext& ctx, DType dt, bool train) const;
  /// After read_shapes, for *Grad: the reserve is present, it and dY, dY_h (dY_c) have X's type and
  /// their expected shapes; sets dX, dW, dR, dB, dinitial_h (LSTM: dinitial_c, dP) where named.
  void set_grad_outputs(PrepareContext& ctx, DType dt) const;

  RnnCell cell_;
  int64_t dirs_ = 1;
  bool reverse_only_ = false;
  int64_t hidden_ = -1;
  float clip_ = 0.f;  ///< 0: no clipping
  int64_t layout_ = 0;
  bool input_forget_ = false;
  bool linear_before_reset_ = false;
  std::vector<RnnActivation> activations_;  ///< per direction: LSTM f g h, GRU f g, RNN f
  // From read_shapes.
  int64_t seq_ = 0, batch_ = 0, input_ = 0, H_ = 0;
};

}  // namespace onnxtrain::kernels::shape
