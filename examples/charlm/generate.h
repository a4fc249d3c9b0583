// `charlm generate`: sampling characters from a trained model.
//
// The TCN generates incrementally (nn::TCN::step) with the Fast WaveNet idea: each conv keeps
// the last (k-1)*d inputs it has seen, so one new character costs one column
// of every conv instead of a forward pass over the whole context. The LSTM
// carries its (h, c) state. A full-recompute stepper (the whole context through
// forward() for every character) is kept as the oracle and for the benchmark.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/models.h"

namespace charlm {

struct GenerateOptions {
  std::string checkpoint, prompt = "the ";
  std::string data = "data/ptb", vocab_file;  // a PyTorch state_dict's vocabulary (model_file.h)
  bool allow_extra = false;
  int64_t n = 200;
  double temperature = 1.0;
  uint64_t seed = 1;
  bool full_recompute = false;
  int threads = 0;
  std::string conv_impl = "auto";  // conv1d's path (core/backends.h); generation runs on the CPU
};
int run_generate(const GenerateOptions& opts);

// Feeds one character at a time; returns the logits for the next one.
class Stepper {
 public:
  virtual ~Stepper() = default;
  virtual std::vector<float> step(int64_t token) = 0;
};

// Incremental stepper for the model (TCN caches or LSTM state).
std::unique_ptr<Stepper> make_incremental_stepper(tcn::nn::CharLM& model);
// Oracle: the whole context through forward() for each character.
std::unique_ptr<Stepper> make_full_stepper(tcn::nn::CharLM& model);

}  // namespace charlm
