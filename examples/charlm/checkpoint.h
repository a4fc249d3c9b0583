// What `charlm train` writes and reads back: checkpoints (the weights, the
// optimizer's state and where training stands, so --resume continues exactly)
// and the metrics CSV.
#pragma once

#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data.h"
#include "core/generator.h"
#include "nn/checkpoint.h"
#include "nn/models.h"
#include "nn/optim.h"
#include "train.h"

namespace charlm {

// Where training stands; saved in every checkpoint so --resume continues exactly.
struct TrainState {
  int64_t epoch = 1, next_batch = 0, step = 0;
  double lr = 0, best_vloss = std::numeric_limits<double>::infinity();
  std::vector<double> vlosses;
  nlohmann::json to_json(const tcn::Generator& g) const;
};

// --save m.safetensors: the latest state goes to m.last.safetensors.
std::string last_path(const std::string& save);

// `carried`: an LSTM's carried state mid-epoch (CarriedState::save), else empty.
void save_checkpoint(const std::string& path, const tcn::nn::CharLM& model, const Vocab& vocab,
                     const tcn::nn::Optimizer& opt, const TrainState& st, const tcn::Generator& g,
                     const TrainOptions& o, const tcn::nn::NamedTensors& carried = {});

// The resuming run must train as the checkpoint's did: the same streams, windows, optimizer and,
// for an LSTM, --lstm_state (a checkpoint that does not say was written with reset's protocol).
void check_train_options(const TrainOptions& o, const tcn::nn::Metadata& meta);
// How the LSTM of a checkpoint was trained (its train_options' lstm_state): "reset" for a
// charlm checkpoint that predates the flag, "carry" for a file without train_options (a
// PyTorch state_dict: PyTorch users carry the state). `what` names the file in errors.
std::string trained_lstm_state(const tcn::nn::Metadata& meta, const std::string& what);
// The checkpoint's train_state, every value checked against its range.
TrainState read_train_state(const TrainOptions& o, const tcn::nn::Metadata& meta, size_t windows_per_epoch,
                            uint64_t& dropout_seed, uint64_t& dropout_offset);

// event,epoch,step,lr,loss,<score>,ms_per_batch,<unit>_per_sec,elapsed_s; an
// empty path writes nothing (the ranks other than 0).
class MetricsLog {
 public:
  MetricsLog(const std::string& path, bool append, Tokens kind);
  void row(const char* event, int64_t epoch, int64_t step, double lr, double loss, double ms, double cps,
           double elapsed);
  // Closes the file; a failed write, flush or close is an error naming the file.
  void close();

 private:
  void flush();
  std::string path_;
  Tokens kind_;
  std::ofstream f_;
};

}  // namespace charlm
