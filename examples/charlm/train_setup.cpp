#include "train_setup.h"

#include <unistd.h>

#include "flags.h"
#include "model_file.h"
#include "examples/common/program.h"
#include "core/autocast.h"
#include "core/backends.h"
#include "core/files.h"
#include "core/threads.h"
#include "cuda/cudnn.h"
#include "core/devices.h"
#include "nn/safetensors.h"
#include "ops/cpu_blas.h"

namespace charlm {

using namespace tcn;
using nlohmann::json;

std::string checkpoint_tokens(const nn::Metadata& meta) {
  auto it = meta.find("tokens");
  if (it == meta.end()) return "char";
  TCN_CHECK(it->second == "char" || it->second == "word", "the checkpoint's tokens '", it->second,
            "' are neither char nor word");
  return it->second;
}

Precision precision_for(const std::string& name, const Device& device) {
  const Precision p = parse_precision(name);
  TCN_CHECK(p != Precision::TF32 || device.is_cuda(), "--precision tf32 is a GPU precision (tensor cores) and ",
            device.str(), " has none; use fp32, or bf16 for mixed precision on the CPU");
  return p;
}

std::string precision_note(const std::string& precision, const Device& device) {
  if (precision == "tf32") return " (TF32 tensor-core GEMMs: inputs rounded to 10 mantissa bits, fp32 accumulation)";
  if (precision != "bf16") return "";
  if (device.is_cuda())
    return " (bf16 GEMM operands on tensor cores, fp32 accumulation and master weights)";
  if (!cpu::onednn_available()) return " (no oneDNN in this build: bf16 GEMMs are widened to fp32, no speedup)";
  if (!cpu::onednn_bf16_available())
    return " (this CPU has no AVX-512, so oneDNN has no bf16 GEMM: widened to fp32, same numerics, no speedup)";
  return " (bf16 GEMM operands, fp32 accumulation and master weights)";
}

void apply_cuda_backends(const std::string& conv_impl, const std::string& lstm_impl, bool deterministic,
                         const Device& device) {
  program::apply_conv_impl(conv_impl, device);
  CudaBackends b = cuda_backends();
  b.lstm = parse_lstm_impl(lstm_impl);
  b.deterministic = deterministic;
  if (device.is_cuda() && (b.conv == ConvImpl::Cudnn || b.lstm == LstmImpl::Cudnn)) {
    const std::string why = cuda::cudnn_unavailable_reason();
    TCN_CHECK(why.empty(), b.conv == ConvImpl::Cudnn ? "--conv_impl cudnn" : "--lstm_impl cudnn",
              ": cuDNN cannot run here: ", why);
  }
  set_cuda_backends(b);
}

bool stderr_is_tty() { return ::isatty(2) == 1; }

namespace {

json model_config(const TrainOptions& o, int64_t vocab) {
  if (o.model == "tcn")
    return nn::TCNConfig{vocab, o.emsize, o.nhid, o.levels, o.ksize, o.dropout, o.emb_dropout}.to_json();
  return nn::LSTMConfig{vocab, o.emsize, o.nhid, o.layers, o.dropout, o.emb_dropout}.to_json();
}

std::unique_ptr<nn::Optimizer> make_optimizer(const TrainOptions& o, const std::vector<Tensor>& params) {
  if (o.optim == "SGD") return std::make_unique<nn::SGD>(params, o.lr);
  if (o.optim == "Adam") return std::make_unique<nn::Adam>(params, o.lr);
  TCN_FAIL("--optim ", o.optim, ": expected SGD or Adam");
}

// Every numeric flag of `charlm train` in its documented range (flags.h).
void validate(const TrainOptions& o) {
  using namespace limits;
  check("--batch_size", o.batch_size, 1, kMaxBatch);
  check("--seq_len", o.seq_len, 1, kMaxSeqLen);
  TCN_CHECK(o.validseqlen > 0 && o.validseqlen <= o.seq_len, "--validseqlen ", o.validseqlen,
            " must be in [1, --seq_len = ", o.seq_len, "]");
  check("--emsize", o.emsize, 1, kMaxWidth);
  check("--nhid", o.nhid, 1, kMaxWidth);
  check("--levels", o.levels, 1, kMaxLevels);
  check("--ksize", o.ksize, 1, kMaxKsize);
  check("--layers", o.layers, 1, kMaxLayers);
  check_real("--dropout", o.dropout, 0, 1, false, true);
  check_real("--emb_dropout", o.emb_dropout, 0, 1, false, true);
  check_real("--lr", o.lr, 0, kMaxLr, true, false);
  check_real("--clip", o.clip, 0, kMaxClip, false, false, " (0: off)");
  check("--epochs", o.epochs, 1, kMaxEpochs);
  check("--max_steps", o.max_steps, 0, kMaxCount, " (0: no limit)");
  check("--log-interval", o.log_interval, 1, kMaxCount);
  check("--profile", o.profile, 0, kMaxCount, " (0: off)");
  check("--threads", o.threads, 0, kMaxThreads, " (0: the default)");
  check("--eval_batch_size", o.eval_batch_size, 1, kMaxBatch);
  check("--eval_batches", o.eval_batches, 0, kMaxCount, " (0: all)");
  check("--eval_interval", o.eval_interval, 0, kMaxCount, " (0: epoch ends only)");
  check("--save_every", o.save_every, 0, kMaxCount, " (0: epoch ends only)");
  if (carries_state(o.model, o.lstm_state)) {
    int64_t seq_len = o.seq_len, validseqlen = o.validseqlen;  // both chosen: only the check applies
    carry_windows(seq_len, validseqlen, true, true);
  }
}

}  // namespace

void prepare_options(TrainOptions& o, const dist::Comm& comm) {
  const int world = comm.size();
  if (o.nhid == -1) o.nhid = o.model == "lstm" ? 700 : 450;
  TCN_CHECK(o.model == "tcn" || o.model == "lstm", "--model ", o.model, ": expected tcn or lstm");
  TCN_CHECK(o.tokens == "char" || o.tokens == "word", "--tokens ", o.tokens, ": expected char or word");
  validate(o);
  TCN_CHECK(o.resume.empty() || o.init.empty(), "--resume and --init exclude each other");
  if (!o.resume.empty()) check_regular_input(o.resume, "--resume");
  if (!o.init.empty()) check_regular_input(o.init, "--init");
  if (o.threads > 0) set_num_threads(o.threads);
  if (world > 1) {
    TCN_CHECK(o.batch_size % world == 0, "--batch_size ", o.batch_size, " must be a multiple of the ", world,
              " processes (each trains on an equal share of the streams)");
    // One GPU per rank: plain "cuda" means this rank's local GPU.
    if (o.device == "cuda") o.device = "cuda:" + std::to_string(comm.local_rank());
    if (o.device.starts_with("cuda") && o.cuda_graph == "auto") o.cuda_graph = "off";
    TCN_CHECK(!(o.device.starts_with("cuda") && o.cuda_graph == "on"), "--cuda_graph on: a data-parallel step "
              "is not captured yet (its all-reduce runs between backward and the optimizer); use auto or off");
  }
}

std::string prepare_outputs(TrainOptions& o, bool writer, const Console& say) {
  if (!o.save.empty() && writer) {
    for (const std::string& p : {o.save, last_path(o.save)}) {
      program::check_output_path("--save", p);
      try {
        nn::check_save_target(p);
      } catch (const tcn::Error& e) {
        TCN_FAIL("--save ", p, ": cannot write there (", e.what(), ")");
      }
      // Temp files a killed run left next to its checkpoints (a save is atomic:
      // the checkpoint itself is whole, the temp file is garbage).
      for (const std::string& stale : nn::remove_stale_temp_files(p)) say("removed stale temp file %s\n", stale.c_str());
    }
  }
  if (o.metrics.empty()) o.metrics = "runs/" + std::string(o.tokens == "word" ? "word_" : "") + o.model + ".csv";
  program::check_output_path("--metrics", o.metrics);
  const std::string metrics_path = o.metrics;
  if (!writer) o.metrics.clear();  // MetricsLog writes nothing for an empty path
  if (!o.trace.empty()) program::check_output_path("--trace", o.trace);
  return metrics_path;
}

TrainStart start_training(const TrainOptions& o, const Corpus& corpus, size_t windows_per_epoch, const Device& device) {
  std::unique_ptr<nn::CharLM> model;
  TrainState st;
  st.lr = o.lr;
  nn::LoadedCharLM resumed;
  nn::NamedTensors carried;
  uint64_t dropout_seed = 0, dropout_offset = 0;
  if (!o.resume.empty()) {
    resumed = nn::load_char_lm(o.resume, kTrainingTensors);
    model = std::move(resumed.model);
    TCN_CHECK(model->kind() == o.model, "--resume ", o.resume, ": checkpoint holds a ", model->kind(),
              " model but --model is ", o.model);
    TCN_CHECK(checkpoint_tokens(resumed.file.metadata) == o.tokens, "--resume ", o.resume, ": the checkpoint's model reads ",
              checkpoint_tokens(resumed.file.metadata), " tokens, this run ", o.tokens, " tokens");
    TCN_CHECK(resumed.vocab == corpus.vocab.tokens, "--resume ", o.resume,
              ": the checkpoint's vocabulary differs from the data's (", resumed.vocab.size(), " vs ",
              corpus.vocab.size(), " ", corpus.vocab.unit(), ")");
    json want = model_config(o, corpus.vocab.size()), have = model->config_json();
    TCN_CHECK(want == have, "--resume ", o.resume, ": the checkpoint's config ", have.dump(),
              " does not match the flags ", want.dump());
    check_train_options(o, resumed.file.metadata);
    st = read_train_state(o, resumed.file.metadata, windows_per_epoch, dropout_seed, dropout_offset);
  } else {
    model = nn::make_char_lm(o.model, model_config(o, corpus.vocab.size()), o.seed);
    if (parse_tokens(o.tokens) == Tokens::Words && o.model == "tcn") {
      // word_cnn's init_weights: the (tied) embedding N(0, 0.01) where char_cnn's is U(-0.1, 0.1).
      autograd::NoGrad ng;
      Generator init(o.seed);
      normal_(dynamic_cast<nn::TCNCharLM&>(*model).encoder->weight, 0.0, 0.01, init);
    }
    if (!o.init.empty()) {
      // Weights only: e.g. a PyTorch model's initial state, to compare training runs step by step.
      // Ours, or a PyTorch state_dict (its sizes checked against the flags; its vocabulary is the data's).
      const nlohmann::json flags = model->config_json();
      nn::ImportOptions sizes{.model = o.model, .vocab_size = corpus.vocab.size(), .emsize = flags.at("emsize"),
                              .nhid = flags.at("nhid")};
      if (o.model == "tcn") sizes.levels = o.levels, sizes.ksize = o.ksize;
      else sizes.layers = o.layers;
      ModelFile init = load_model_file(o.init, "--init",
                                       ModelFileOptions{.data = o.data, .tokens = o.tokens, .allow_extra = o.allow_extra},
                                       sizes);
      TCN_CHECK(init.loaded.vocab == corpus.vocab.tokens, "--init ", o.init,
                ": the checkpoint's vocabulary differs from the data's");
      // A state_dict holds no dropout rates: the flags' apply. Our checkpoints must match the flags in full.
      TCN_CHECK(init.foreign || (init.loaded.model->kind() == o.model && init.loaded.model->config_json() == flags),
                "--init ", o.init, ": the checkpoint's ", init.loaded.model->kind(), " config ",
                init.loaded.model->config_json().dump(), " does not match the flags ", flags.dump());
      nn::load_module(init.loaded.file, *model, kTrainingTensors);
    }
  }
  model->to(device);
  auto opt = make_optimizer(o, model->parameters());
  if (!o.resume.empty()) {
    nn::NamedTensors ostate;
    for (auto& [name, t] : resumed.file.tensors)
      if (name.rfind("optim.", 0) == 0) ostate.emplace_back(name.substr(6), t);
    opt->load_state(ostate);
    for (auto& [name, t] : resumed.file.tensors)
      if (name.starts_with("carry.")) carried.emplace_back(name, t);
    model->dropout_generator().set_state(dropout_seed, dropout_offset);
    opt->lr = st.lr;
  }
  return {std::move(model), std::move(opt), st, std::move(carried)};
}

}  // namespace charlm
