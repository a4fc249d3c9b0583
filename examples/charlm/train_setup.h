// What `charlm train` settles before its first step: the flags checked and
// completed, the output paths checked, the model and optimizer made (fresh,
// from --init's weights, or from --resume's checkpoint).
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "checkpoint.h"
#include "data.h"
#include "nn/distributed.h"
#include "nn/models.h"
#include "nn/optim.h"
#include "train.h"

namespace charlm {

// A run's console output: nothing with --quiet, and only rank 0 prints.
struct Console {
  bool on = true;
  template <class... Args>
  void operator()(const char* fmt, Args... args) const {
    if (!on) return;
    std::printf(fmt, args...);
    std::fflush(stdout);
  }
};

// The defaults that depend on other flags filled in, every flag checked, the
// thread count set; under a launcher, the device and graph mode of this rank.
void prepare_options(TrainOptions& o, const tcn::dist::Comm& comm);

// --save (both files), --metrics (default runs/<model>.csv) and --trace
// checked before any training; stale temp files of a killed run removed.
// Returns the metrics path; o.metrics is cleared on the ranks that write none.
std::string prepare_outputs(TrainOptions& o, bool writer, const Console& say);

// The model on `device`, its optimizer, and where training stands: resumed
// (weights, optimizer state, dropout stream, schedule), or fresh (seeded, or
// --init's weights).
struct TrainStart {
  std::unique_ptr<tcn::nn::CharLM> model;
  std::unique_ptr<tcn::nn::Optimizer> opt;
  TrainState state;
  tcn::nn::NamedTensors carried;  // resumed mid-epoch: the checkpoint's carried LSTM state ("carry.*")
};
TrainStart start_training(const TrainOptions& o, const Corpus& corpus, size_t windows_per_epoch,
                          const tcn::Device& device);

bool stderr_is_tty();

}  // namespace charlm
