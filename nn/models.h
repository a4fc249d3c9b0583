// The models of the applications (examples/), built from the layers: the two
// character language models of the mission, and the synthetic tasks' TCN.
//
// TCN (locuslab char_cnn): embedding -> embedding dropout -> TemporalConvNet
// with channels [nhid] * (levels - 1) + [emsize] -> linear decoder whose weight
// is the embedding's. Parameter names match the PyTorch model's state_dict.
// LSTM baseline: embedding -> dropout -> LSTM -> dropout -> linear decoder.
// TaskTCN (locuslab's TCN class of the adding and copy-memory tasks): a
// TemporalConvNet and a linear layer on top.
#pragma once

#include <nlohmann/json.hpp>

#include "nn/checkpoint.h"
#include "nn/layers.h"
#include "nn/tcn.h"

namespace tcn::nn {

// The bounds every model config is checked against (from flags, JSON or a
// checkpoint) before anything is allocated; charlm's flags use the same ones.
namespace limits {
constexpr int64_t kMaxVocab = int64_t{1} << 20;         // vocab_size
constexpr int64_t kMaxWidth = 65536;                    // emsize, nhid
constexpr int64_t kMaxLevels = 32;                      // TCN levels: dilations 1 .. 2^31
constexpr int64_t kMaxLayers = 64;                      // LSTM layers
constexpr int64_t kMaxKsize = 64;                       // TCN kernel size
constexpr int64_t kMaxParameters = int64_t{1} << 31;    // 8 GiB of fp32 weights (training needs 3-4x that)
}  // namespace limits

struct TCNConfig {
  int64_t vocab_size = 50, emsize = 100, nhid = 450, levels = 3, ksize = 3;
  double dropout = 0.1, emb_dropout = 0.1;
  nlohmann::json to_json() const;
  // Every field required and validated.
  static TCNConfig from_json(const nlohmann::json& j);
  // Each field within limits:: and dropouts in [0, 1), then parameter_count()
  // within kMaxParameters; a tcn::Error naming the field otherwise.
  void validate() const;
  int64_t parameter_count() const;  // of the model this config builds (the tied weight once)
};

struct LSTMConfig {
  int64_t vocab_size = 50, emsize = 100, nhid = 700, layers = 1;
  double dropout = 0.1, emb_dropout = 0.1;
  nlohmann::json to_json() const;
  static LSTMConfig from_json(const nlohmann::json& j);
  void validate() const;
  int64_t parameter_count() const;
};

// What a trainer needs from either model.
class CharLM : public Module {
 public:
  // tokens int64 [B, T] -> logits [B, T, vocab]; with keep_last > 0, only the
  // logits of the last keep_last positions, [B, keep_last, vocab] (a trainer
  // scores only those; the TCN then skips the work nothing scored depends on).
  virtual Tensor forward(const Tensor& tokens, int64_t keep_last = 0) = 0;
  virtual std::string kind() const = 0;  // "tcn" or "lstm"
  virtual nlohmann::json config_json() const = 0;
  // The Philox stream of the dropout masks (save it to resume exactly).
  Generator& dropout_generator() { return dropout_gen_; }

 protected:
  Generator dropout_gen_{0};
};

class TCNCharLM : public CharLM {
 public:
  // Init as locuslab's char_cnn: encoder (= decoder) weight U(-0.1, 0.1), decoder
  // bias 0, downsample weights N(0, 0.01); the weight-normed convs keep PyTorch's
  // default init (locuslab's normal_(0, 0.01) on them is undone by weight_norm).
  TCNCharLM(const TCNConfig& cfg, uint64_t seed);
  Tensor forward(const Tensor& tokens, int64_t keep_last = 0) override;
  std::string kind() const override { return "tcn"; }
  nlohmann::json config_json() const override { return cfg.to_json(); }
  TCNConfig cfg;
  std::shared_ptr<Embedding> encoder;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<TemporalConvNet> tcn;
  std::shared_ptr<Linear> decoder;
};

class LSTMCharLM : public CharLM {
 public:
  LSTMCharLM(const LSTMConfig& cfg, uint64_t seed);
  Tensor forward(const Tensor& tokens, int64_t keep_last = 0) override;
  // The same from `state` (zeros when absent), also returning the LSTM's state
  // after the last position: truncated backpropagation through time carries
  // it, detached, into the stream's next window (examples/charlm/carry.h).
  std::pair<Tensor, LSTM::State> forward_with_state(const Tensor& tokens, const std::optional<LSTM::State>& state,
                                                     int64_t keep_last = 0);
  std::string kind() const override { return "lstm"; }
  nlohmann::json config_json() const override { return cfg.to_json(); }
  LSTMConfig cfg;
  std::shared_ptr<Embedding> encoder;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<LSTM> rnn;
  std::shared_ptr<Linear> decoder;
};

// The model of the synthetic tasks and the forecaster (examples/tasks): a TCN
// and a linear layer (weights N(0, 0.01)) from its output width to `outputs`
// per step. Parameter names are PyTorch's ("tcn.network.0.conv1.weight_v",
// "linear.weight").
class TaskTCN : public Module {
 public:
  // locuslab's TCN class: a TemporalConvNet of `levels` blocks of `nhid` channels.
  TaskTCN(int64_t inputs, int64_t outputs, int64_t levels, int64_t nhid, int64_t ksize, double dropout,
          Generator& init, Generator& drop);
  // Any configuration; its input_shape must be NLC (the tasks' data is [B, T, C]).
  TaskTCN(const TCNOptions& options, int64_t outputs, Generator& init, Generator& drop);
  // x [B, T, inputs] -> [B, keep_last, outputs] (keep_last <= 0: all T steps).
  Tensor forward(const Tensor& x, int64_t keep_last = 0) const;
  std::shared_ptr<TCN> tcn;
  std::shared_ptr<Linear> linear;
};

// Builds the model a checkpoint's metadata describes ("model" and "config").
std::unique_ptr<CharLM> make_char_lm(const std::string& kind, const nlohmann::json& config, uint64_t seed);

// Character-LM checkpoints: the model's parameters under PyTorch's names, and
// __metadata__ {"format": "tcn-checkpoint", "version": "1", "model": "tcn"|"lstm",
// "config": JSON, "vocab": JSON list of the characters}, plus `extra` entries.
void save_char_lm(const std::string& path, const CharLM& model, const std::vector<std::string>& vocab,
                  const Metadata& extra_metadata = {}, const NamedTensors& extra_tensors = {});

struct LoadedCharLM {
  std::unique_ptr<CharLM> model;
  std::vector<std::string> vocab;
  SafetensorsContents file;  // everything in the file (metadata, extra tensors)
};
// Rebuilds the model from the metadata and loads its weights strictly; tensors
// under one of `ignore_prefixes` (e.g. "optim.") are left for the caller. The config is
// validated, and must describe no more parameters than the file holds values,
// before the model is built (a small file cannot make a huge allocation).
LoadedCharLM load_char_lm(const std::string& path, const std::vector<std::string>& ignore_prefixes = {});
// The same over a file already read (the fuzzer's entry point).
LoadedCharLM load_char_lm(SafetensorsContents file, const std::vector<std::string>& ignore_prefixes = {});

}  // namespace tcn::nn
