// --lstm_state carry: truncated backpropagation through time, the protocol
// PyTorch users train LSTMs with (PyTorch's word_language_model, AWD-LSTM,
// char-rnn). Each of the batch's streams keeps its LSTM state (h, c) from one
// window to the next; gradients stop at the window's start, because the state
// enters the window as a constant. Every position of a window is scored, so
// windows do not overlap and no compute goes to warm-up.
//
// The state lives in two buffers on the device that never move: a step reads
// them and writes the new state back into them, so a CUDA graph of the step
// (core/step_graph.h) replays the carry with the rest.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/distributed.h"
#include "nn/models.h"

namespace charlm {

class CarriedState {
 public:
  // For `streams` streams of `model` (an LSTM; anything else is an error), on
  // the model's device, from zeros.
  CarriedState(tcn::nn::CharLM& model, int64_t streams);

  // The logits of every position of `tokens` [streams, T], from the carried
  // state; the state after the last position then replaces it. Differentiable
  // in the model's parameters, back to the window's first position.
  tcn::Tensor forward(const tcn::Tensor& tokens);

  void reset();  // zeros: every stream starts again (an epoch's start)

  // Checkpoints hold the whole batch's state as "carry.h" and "carry.c"
  // [layers, streams, hidden]. `comm` launched: this process holds the rows
  // first_stream .. first_stream + streams - 1 of it, and save() gathers every
  // rank's rows (every rank must call it).
  void set_shard(int64_t first_stream, int64_t total_streams) { first_ = first_stream, total_ = total_streams; }
  tcn::nn::NamedTensors save(tcn::dist::Comm& comm) const;
  // Restores this process's rows from a checkpoint's "carry.h" / "carry.c";
  // their absence or a wrong shape is an error naming `what` (e.g. the file).
  void load(const tcn::nn::NamedTensors& tensors, const std::string& what);

 private:
  tcn::nn::LSTMCharLM& model_;
  tcn::Tensor h_, c_;  // [layers, streams, hidden], on the model's device
  int64_t first_ = 0, total_ = 0;
};

}  // namespace charlm
