// `charlm train` and `charlm eval`: the training loop of the locuslab char_cnn
// reference (SGD lr 4, clip 0.15, lr / 10 when validation stops improving),
// with progress lines, a metrics CSV, atomic checkpoints and exact resume.
#pragma once

#include <string>
#include <vector>

#include "core/autocast.h"
#include "nn/models.h"

namespace charlm {

// The tensors a charlm checkpoint holds besides the model's parameters: the
// optimizer's state ("optim.") and, with --lstm_state carry, every stream's
// LSTM state ("carry."). Loaders of its checkpoints leave them aside.
inline const std::vector<std::string> kTrainingTensors{"optim.", "carry."};

struct TrainOptions {
  std::string model = "tcn";
  // The LSTM's protocol. carry (truncated backpropagation through time, as
  // PyTorch users train LSTMs): each stream's state passes, detached, from one
  // window to the next; windows do not overlap (seq_len == validseqlen) and
  // every position is scored. reset: the TCN's protocol, every window from a
  // zero state with seq_len - validseqlen positions of warm-up.
  std::string lstm_state = "carry";
  // char: the char_cnn recipe; word: word_cnn's (words with <eos>, embedding
  // init N(0, 0.01), lr halved when valid loss is no better than the last 5 epochs').
  std::string tokens = "char";
  int64_t batch_size = 32, seq_len = 400, validseqlen = 320;
  int64_t emsize = 100, nhid = -1, levels = 3, ksize = 3, layers = 1;  // nhid -1: 450 (tcn) or 700 (lstm)
  double dropout = 0.1, emb_dropout = 0.1;
  double lr = 4.0, clip = 0.15;
  std::string optim = "SGD";
  int64_t epochs = 100, max_steps = 0;  // 0: no step limit
  uint64_t seed = 1111;
  int64_t log_interval = 100;
  std::string device = "auto", data = "data/ptb", save, resume, metrics;
  std::string init;  // start from this checkpoint's weights (fresh optimizer and schedule)
  int threads = 0;  // 0: leave the default
  int64_t eval_batch_size = 1, eval_batches = 0;  // 0: the whole split
  int64_t save_every = 0;                          // also checkpoint every N steps (0: only at epoch ends)
  int64_t eval_interval = 0;                       // also evaluate on valid every N steps (0: epoch ends only)
  bool quiet = false;                              // no progress or log lines on stdout (tests); the CSV is still written
  std::string precision = "fp32";                  // fp32 or bf16 (mixed precision: core/autocast.h)
  bool debug_sync = false;                         // read the loss watch every step (errors at their step)
  std::string cuda_graph = "auto";                 // auto, on or off: the CUDA step as one graph (core/step_graph.h)
  std::string conv_impl = "auto";                  // conv1d: auto, cudnn, gemm or winograd (core/backends.h)
  std::string lstm_impl = "fused";                 // CUDA LSTM: fused or cudnn
  bool deterministic = false;                      // cuDNN: deterministic algorithms only
  bool allow_extra = false;  // --init from a PyTorch state_dict: skip tensors that are no parameter
  int64_t profile = 0;                             // profile this many steps after 2 warm-up steps (nn/profiler.h)
  std::string trace;                               // with profile: the Chrome trace of the profiled steps
};

int run_train(TrainOptions opts);

// The checks --resume makes of a checkpoint's metadata beyond its weights:
// train_options must match `o` (optimizer, batch size, window lengths) and
// every train_state value must be in range (next_batch within the resuming
// run's `windows_per_epoch`); a tcn::Error naming the key otherwise. The
// checkpoint fuzzer calls it too.
void check_resume_metadata(const TrainOptions& o, const tcn::nn::Metadata& meta, size_t windows_per_epoch);

struct EvalOptions {
  std::string checkpoint, data = "data/ptb", split = "test", device = "auto";  // tokens: the checkpoint's
  std::string vocab_file;    // a PyTorch state_dict's vocabulary (model_file.h); default: the data's
  std::string tokens = "char";  // a PyTorch state_dict's tokens ("word" for wordlm); ours say their own
  bool allow_extra = false;  // a PyTorch state_dict's tensors that are no parameter: skipped, not an error
  int64_t seq_len = 400, validseqlen = 320, batch_size = 1, max_batches = 0;
  // An LSTM's: carry (through the split) or reset (TrainOptions::lstm_state); empty: as the
  // checkpoint was trained (trained_lstm_state: carry for a PyTorch state_dict).
  std::string lstm_state;
  // Whether the lengths were chosen (carry_windows): the command line clears them for a flag not
  // given, so that a carrying LSTM's windows follow the one given.
  bool seq_len_given = true, validseqlen_given = true;
  int threads = 0;
  std::string precision = "fp32";
  std::string conv_impl = "auto";  // conv1d's path (core/backends.h)
};
int run_eval(const EvalOptions& opts);

// Mean loss (nats per token) of the model over a [B, L] source, scoring the
// last validseqlen positions of each window; at most max_batches windows (0: all).
// In a data-parallel run (nn/distributed.h) each rank scores every size()-th
// window and the sums are reduced, so every rank returns the same mean.
// With `carry` (an LSTM; seq_len == validseqlen) each stream's state passes
// from window to window through the whole split, as PyTorch's
// word_language_model evaluates; the ranks then split the streams (when the
// batch divides evenly; otherwise each scores all of them).
double evaluate(tcn::nn::CharLM& model, const tcn::Tensor& source, int64_t seq_len, int64_t validseqlen,
                int64_t max_batches = 0, bool carry = false);

// Whether a model of kind `model` ("tcn", "lstm") carries its state under
// --lstm_state `lstm_state` (carry or reset; anything else is an error).
bool carries_state(const std::string& model, const std::string& lstm_state);
// The windows of a model that carries its state do not overlap: a length
// given alone (`*_given`: the flag was on the command line) sets the other;
// neither given: seq_len = validseqlen; two different ones are an error.
void carry_windows(int64_t& seq_len, int64_t& validseqlen, bool seq_len_given, bool validseqlen_given);

// "" for fp32; for bf16 and tf32, what they mean on this device and build.
std::string precision_note(const std::string& precision, const tcn::Device& device);
// --precision parsed for a run on `device` (tf32 only on CUDA).
tcn::Precision precision_for(const std::string& name, const tcn::Device& device);
// --conv_impl, --lstm_impl and --deterministic parsed and made the process's
// setting (core/backends.h); asking for cuDNN on a CUDA device where it cannot
// run is an error here, before any work, naming the reason.
void apply_cuda_backends(const std::string& conv_impl, const std::string& lstm_impl, bool deterministic,
                         const tcn::Device& device);

// What a checkpoint's vocabulary holds: its metadata's "tokens" ("char" when
// absent: the checkpoints written before word models).
std::string checkpoint_tokens(const tcn::nn::Metadata& meta);

}  // namespace charlm
