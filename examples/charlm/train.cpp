#include "train.h"


#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "tcn/core/autocast.h"
#include "tcn/core/backends.h"
#include "tcn/core/step_graph.h"
#include "tcn/core/files.h"
#include "tcn/core/threads.h"
#include "tcn/cuda/cudnn.h"
#include "tcn/cuda/runtime.h"
#include "data.h"
#include "flags.h"
#include "tcn/nn/distributed.h"
#include "tcn/nn/optim.h"
#include "tcn/nn/profiler.h"
#include "tcn/ops/cpu_blas.h"
#include "model_file.h"

namespace charlm {

using namespace tcn;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string checkpoint_tokens(const nn::Metadata& meta) {
  auto it = meta.find("tokens");
  if (it == meta.end()) return "char";
  TCN_CHECK(it->second == "char" || it->second == "word", "the checkpoint's tokens '", it->second,
            "' are neither char nor word");
  return it->second;
}

Device resolve_device(const std::string& name, const char* program) {
  if (name == "auto") {
    if (cuda::is_available() && cuda::verified_on_gpu()) return Device::cuda(0);
    return Device::cpu();
  }
  Device d = parse_device(name);
  if (d.is_cuda()) {
    TCN_CHECK(cuda::is_available(), "--device ", name, ": no usable GPU (", cuda::unavailable_reason(), ")");
    if (cuda::emulated())
      std::fprintf(stderr, "%s: note: --device %s is the EMULATED device (TCN_CUDA=EMU): the CUDA kernels run "
                           "on the CPU to check their logic, far slower than the CPU backend; not a GPU\n",
                   program, name.c_str());
    else if (!cuda::verified_on_gpu())
      std::fprintf(stderr, "%s: warning: the CUDA kernels of this build have not been verified on a GPU yet "
                           "(tests/test_cuda_ops.cpp); results may be wrong\n",
                   program);
  }
  return d;
}

double evaluate(nn::CharLM& model, const Tensor& source, int64_t seq_len, int64_t validseqlen, int64_t max_batches) {
  model.eval();
  autograd::NoGrad ng;
  const int64_t hist = seq_len - validseqlen;
  dist::Comm& comm = dist::Comm::world();
  double total = 0;
  int64_t count = 0, n = 0;
  for (const Window& w : windows(source.size(1), seq_len, validseqlen)) {
    if (max_batches > 0 && n >= max_batches) break;
    if (n++ % comm.size() != comm.rank()) continue;  // another rank's window
    auto [inp, tgt] = get_batch(source.to(Device::cpu()), w);
    Device dev = model.parameters()[0].device();
    const int64_t scored = w.len - hist;
    Tensor logits = model.forward(inp.to(dev), scored);  // the last `scored` positions only
    double l = cross_entropy(logits, tgt.to(dev).narrow(1, hist, scored)).item();
    total += l * static_cast<double>(scored * inp.size(0));
    count += scored * inp.size(0);
  }
  if (comm.size() > 1) {
    total = comm.all_reduce_sum(total);
    count = static_cast<int64_t>(comm.all_reduce_sum(static_cast<double>(count)));
  }
  TCN_CHECK(count > 0, "evaluate: no window to score (source of ", source.size(1), " tokens per stream)");
  return total / static_cast<double>(count);
}

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

// Where training stands; saved in every checkpoint so --resume continues exactly.
struct TrainState {
  int64_t epoch = 1, next_batch = 0, step = 0;
  double lr = 0, best_vloss = std::numeric_limits<double>::infinity();
  std::vector<double> vlosses;
  json to_json(const Generator& g) const {
    return {{"epoch", epoch},           {"next_batch", next_batch}, {"step", step},
            {"lr", lr},                 {"best_vloss", std::isfinite(best_vloss) ? json(best_vloss) : json(nullptr)},
            {"vlosses", vlosses},       {"dropout_seed", g.seed()}, {"dropout_offset", g.offset()}};
  }
};

class MetricsLog {
 public:
  MetricsLog(const std::string& path, bool append, Tokens kind) : path_(path), kind_(kind) {
    if (path.empty()) return;
    auto parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    TCN_CHECK(!ec, "--metrics ", path, ": cannot create ", parent.string(), " (", ec.message(), ")");
    bool fresh = !append || !std::filesystem::exists(path);
    f_.open(path, fresh ? std::ios::trunc : std::ios::app);
    TCN_CHECK(f_.good(), "--metrics ", path, ": cannot open for writing (", std::strerror(errno), ")");
    if (fresh)
      f_ << "event,epoch,step,lr,loss," << score_name(kind) << ",ms_per_batch," << rate_unit(kind) << "_per_sec,elapsed_s\n";
    flush();
  }
  void row(const char* event, int64_t epoch, int64_t step, double lr, double loss, double ms, double cps,
           double elapsed) {
    if (!f_.is_open()) return;
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s,%lld,%lld,%.6g,%.6f,%.6f,%.2f,%.1f,%.1f\n", event, static_cast<long long>(epoch),
                  static_cast<long long>(step), lr, loss, score(kind_, loss), ms, cps, elapsed);
    f_ << buf;
    flush();
  }
  // Closes the file; a failed write, flush or close is an error naming the file.
  void close() {
    if (!f_.is_open()) return;
    f_.close();
    TCN_CHECK(!f_.fail(), "--metrics ", path_, ": closing failed (", std::strerror(errno), ")");
  }

 private:
  void flush() {
    errno = 0;
    f_.flush();
    TCN_CHECK(f_.good(), "--metrics ", path_, ": write failed (", errno ? std::strerror(errno) : "I/O error", ")");
  }
  std::string path_;
  Tokens kind_;
  std::ofstream f_;
};

// Fails early, before any training, when the checkpoint path cannot be written.
std::string last_path(const std::string& save) {
  const std::string ext = ".safetensors";
  std::string stem = save.size() > ext.size() && save.compare(save.size() - ext.size(), ext.size(), ext) == 0
                         ? save.substr(0, save.size() - ext.size())
                         : save;
  return stem + ".last.safetensors";
}

void save_checkpoint(const std::string& path, const nn::CharLM& model, const Vocab& vocab, const nn::Optimizer& opt,
                     const TrainState& st, const Generator& g, const TrainOptions& o) {
  nn::Metadata meta{{"train_state", st.to_json(g).dump()},
                    {"train_options", json{{"optim", o.optim}, {"batch_size", o.batch_size}, {"seq_len", o.seq_len},
                                           {"validseqlen", o.validseqlen}, {"clip", o.clip}, {"seed", o.seed}}
                                          .dump()},
                    {"tokens", tokens_name(vocab.kind)}};
  nn::NamedTensors extra;
  for (auto& [name, t] : opt.state()) extra.emplace_back("optim." + name, t);
  nn::save_char_lm(path, model, vocab.tokens, meta, extra);
}

bool stderr_is_tty() { return ::isatty(2) == 1; }

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
}

// Checked reads of a checkpoint's train_state / train_options JSON: a missing
// key, a wrong type or a value out of range is an error naming the file, the
// key and the range, never a wild index or an exception from deep inside.
struct JsonReader {
  std::string what;  // e.g. "--resume m.last.safetensors: train_state"
  json js;
  JsonReader(const std::string& w, const nn::Metadata& meta, const std::string& key) : what(w + ": " + key) {
    auto it = meta.find(key);
    TCN_CHECK(it != meta.end(), w, ": the checkpoint has no ", key,
              " (not a checkpoint written by charlm train --save; to start from its weights only, use --init)");
    try {
      js = json::parse(it->second);
    } catch (const std::exception&) {
      TCN_FAIL(what, " is not valid JSON");
    }
    TCN_CHECK(js.is_object(), what, " is not a JSON object");
  }
  const json& at(const char* key) const {
    TCN_CHECK(js.contains(key), what, " has no \"", key, "\"");
    return js.at(key);
  }
  int64_t integer(const char* key, int64_t lo, int64_t hi) const {
    const json& v = at(key);
    TCN_CHECK(v.is_number_integer(), what, ".", key, " must be an integer, got ", v.dump());
    TCN_CHECK(!(v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) && v.get<int64_t>() >= lo &&
                  v.get<int64_t>() <= hi,
              what, ".", key, " must be in ", limits::range(lo, hi), ", got ", v.dump());
    return v.get<int64_t>();
  }
  uint64_t unsigned_integer(const char* key) const {
    const json& v = at(key);
    TCN_CHECK(v.is_number_unsigned(), what, ".", key, " must be an integer in [0, 2^64 - 1], got ", v.dump());
    return v.get<uint64_t>();
  }
  static bool finite_number(const json& v, double lo) {
    return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= lo;
  }
  double real(const char* key, double lo, double hi, bool lo_open) const {
    const json& v = at(key);
    const double x = v.is_number() ? v.get<double>() : std::nan("");
    TCN_CHECK(v.is_number() && std::isfinite(x) && (lo_open ? x > lo : x >= lo) && x <= hi, what, ".", key,
              " must be a number in ", lo_open ? "(" : "[", lo, ", ", hi, "], got ", v.dump());
    return x;
  }
  std::string string(const char* key) const {
    const json& v = at(key);
    TCN_CHECK(v.is_string(), what, ".", key, " must be a string, got ", v.dump());
    return v.get<std::string>();
  }
};

// The resuming run must train as the checkpoint's did: the same streams, windows and optimizer.
void check_train_options(const TrainOptions& o, const nn::Metadata& meta) {
  JsonReader r("--resume " + o.resume, meta, "train_options");
  const std::string optim = r.string("optim");
  TCN_CHECK(optim == o.optim, "--resume ", o.resume, ": the checkpoint was trained with --optim ", optim,
            ", this run has --optim ", o.optim);
  auto same = [&](const char* key, const char* flag, int64_t mine) {
    const int64_t theirs = r.integer(key, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
    TCN_CHECK(theirs == mine, "--resume ", o.resume, ": the checkpoint was trained with ", flag, " ", theirs,
              ", this run has ", flag, " ", mine);
  };
  same("batch_size", "--batch_size", o.batch_size);
  same("seq_len", "--seq_len", o.seq_len);
  same("validseqlen", "--validseqlen", o.validseqlen);
}

TrainState read_train_state(const TrainOptions& o, const nn::Metadata& meta, size_t windows_per_epoch,
                            uint64_t& dropout_seed, uint64_t& dropout_offset) {
  JsonReader r("--resume " + o.resume, meta, "train_state");
  TrainState st;
  st.epoch = r.integer("epoch", 1, limits::kMaxEpochs + 1);
  st.next_batch = r.integer("next_batch", 0, static_cast<int64_t>(windows_per_epoch));
  st.step = r.integer("step", 0, limits::kMaxCount);
  st.lr = r.real("lr", 0, limits::kMaxLr, true);
  const json& best = r.at("best_vloss");
  TCN_CHECK(best.is_null() || JsonReader::finite_number(best, 0), r.what,
            ".best_vloss must be null or a finite number >= 0, got ", best.dump());
  if (!best.is_null()) st.best_vloss = best.get<double>();
  const json& vl = r.at("vlosses");
  TCN_CHECK(vl.is_array(), r.what, ".vlosses must be an array, got ", vl.dump());
  for (const json& v : vl) {
    TCN_CHECK(JsonReader::finite_number(v, 0), r.what, ".vlosses must hold finite numbers >= 0, got ", v.dump());
    st.vlosses.push_back(v.get<double>());
  }
  TCN_CHECK(static_cast<int64_t>(st.vlosses.size()) < st.epoch, r.what, ".vlosses holds ", st.vlosses.size(),
            " epochs' losses but the checkpoint is at epoch ", st.epoch);
  dropout_seed = r.unsigned_integer("dropout_seed");
  dropout_offset = r.unsigned_integer("dropout_offset");
  return st;
}

// SIGINT / SIGTERM while training: the first one asks the loop to stop after the
// current step (it then saves and exits 128 + signal); a second one exits at once.
volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_signal != 0) ::_exit(128 + sig);
  g_signal = sig;
}

class StopSignals {
 public:
  StopSignals() {
    g_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    g_signal = 0;
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  static int received() { return g_signal; }

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

}  // namespace

// An output path must be a regular file or not exist yet, under a directory
// that exists (or can be made) and is writable; checked before any training.
void check_output_path(const char* flag, const std::string& path) {
  TCN_CHECK(!path.empty(), flag, ": empty path");
  struct stat sb {};
  if (::stat(path.c_str(), &sb) == 0) {
    TCN_CHECK(S_ISREG(sb.st_mode), flag, " ", path, ": cannot write there (", tcn::file_kind(sb.st_mode),
              ", not a regular file)");
    TCN_CHECK(::access(path.c_str(), W_OK) == 0, flag, " ", path, ": cannot write there (", std::strerror(errno), ")");
    return;
  }
  std::filesystem::path dir = std::filesystem::absolute(path).parent_path();
  while (::stat(dir.c_str(), &sb) != 0 && dir.has_parent_path() && dir != dir.parent_path()) dir = dir.parent_path();
  TCN_CHECK(S_ISDIR(sb.st_mode), flag, " ", path, ": cannot write there (", dir.string(), " is ",
            tcn::file_kind(sb.st_mode), ")");
  TCN_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, flag, " ", path, ": cannot write there (", dir.string(), ": ",
            std::strerror(errno), ")");
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

void check_resume_metadata(const TrainOptions& o, const nn::Metadata& meta, size_t windows_per_epoch) {
  uint64_t seed = 0, offset = 0;
  check_train_options(o, meta);
  read_train_state(o, meta, windows_per_epoch, seed, offset);
}

void apply_cuda_backends(const std::string& conv_impl, const std::string& lstm_impl, bool deterministic,
                         const Device& device) {
  CudaBackends b;
  b.conv = parse_conv_impl(conv_impl);
  b.lstm = parse_lstm_impl(lstm_impl);
  b.deterministic = deterministic;
  if (device.is_cuda() && (b.conv == ConvImpl::Cudnn || b.lstm == LstmImpl::Cudnn)) {
    const std::string why = cuda::cudnn_unavailable_reason();
    TCN_CHECK(why.empty(), b.conv == ConvImpl::Cudnn ? "--conv_impl cudnn" : "--lstm_impl cudnn",
              ": cuDNN cannot run here: ", why);
  }
  set_cuda_backends(b);
}

int run_train(TrainOptions o) {
  // Console output of this run (nothing with --quiet); errors still throw.
  // Data parallelism: this process is one rank of comm (nn/distributed.h); rank 0
  // prints, writes the metrics and saves checkpoints, every rank trains.
  dist::Comm& comm = dist::Comm::world();
  const int world = comm.size(), rank = comm.rank();
  const bool writer = rank == 0;
  auto say = [&o, writer](const char* fmt, auto... args) {
    if (o.quiet || !writer) return;
    std::printf(fmt, args...);
    std::fflush(stdout);
  };
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
  const Device device = resolve_device(o.device, o.tokens == "word" ? "wordlm" : "charlm");
  // Mixed precision for the whole run, training and evaluation (core/autocast.h).
  const Autocast precision(precision_for(o.precision, device));
  apply_cuda_backends(o.conv_impl, o.lstm_impl, o.deterministic, device);
  if (!o.save.empty() && writer) {
    for (const std::string& p : {o.save, last_path(o.save)}) {
      check_output_path("--save", p);
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
  check_output_path("--metrics", o.metrics);
  const std::string metrics_path = o.metrics;
  if (!writer) o.metrics.clear();  // MetricsLog writes nothing for an empty path
  if (!o.trace.empty()) check_output_path("--trace", o.trace);

  const Tokens kind = parse_tokens(o.tokens);
  Corpus corpus = load_corpus(o.data, kind);
  Tensor train = batchify(corpus.vocab.encode(corpus.train, o.data + "/ptb.train.txt"), o.batch_size, o.seq_len,
                          "ptb.train.txt");
  Tensor valid = batchify(corpus.vocab.encode(corpus.valid, o.data + "/ptb.valid.txt"), o.eval_batch_size,
                          o.seq_len, "ptb.valid.txt");
  Tensor test = batchify(corpus.vocab.encode(corpus.test, o.data + "/ptb.test.txt"), o.eval_batch_size, o.seq_len,
                         "ptb.test.txt");
  const std::vector<Window> wins = windows(train.size(1), o.seq_len, o.validseqlen);

  std::unique_ptr<nn::CharLM> model;
  TrainState st;
  st.lr = o.lr;
  nn::LoadedCharLM resumed;
  uint64_t dropout_seed = 0, dropout_offset = 0;
  if (!o.resume.empty()) {
    resumed = nn::load_char_lm(o.resume, "optim.");
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
    st = read_train_state(o, resumed.file.metadata, wins.size(), dropout_seed, dropout_offset);
  } else {
    model = nn::make_char_lm(o.model, model_config(o, corpus.vocab.size()), o.seed);
    if (kind == Tokens::Words && o.model == "tcn") {
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
      nn::load_module(init.loaded.file, *model, "optim.");
    }
  }
  model->to(device);
  auto opt = make_optimizer(o, model->parameters());
  if (!o.resume.empty()) {
    nn::NamedTensors ostate;
    for (auto& [name, t] : resumed.file.tensors)
      if (name.rfind("optim.", 0) == 0) ostate.emplace_back(name.substr(6), t);
    opt->load_state(ostate);
    model->dropout_generator().set_state(dropout_seed, dropout_offset);
    opt->lr = st.lr;
  }

  const int64_t hist = o.seq_len - o.validseqlen;
  say("train | model %s | tokens %s | %lld parameters | vocab %lld | device %s | threads %d | precision %s%s\n",
      o.model.c_str(), o.tokens.c_str(), static_cast<long long>(model->num_parameters()), static_cast<long long>(corpus.vocab.size()),
      device.str().c_str(), num_threads(), o.precision.c_str(), precision_note(o.precision, device).c_str());
  say("data %s: train %lld %s -> %lld streams x %lld, %zu windows/epoch (seq_len %lld, validseqlen %lld)\n",
              o.data.c_str(), static_cast<long long>(train.numel()), rate_unit(kind), static_cast<long long>(o.batch_size),
              static_cast<long long>(train.size(1)), wins.size(), static_cast<long long>(o.seq_len),
              static_cast<long long>(o.validseqlen));
  if (!o.resume.empty())
    say("resumed from %s at epoch %lld, batch %lld, step %lld\n", o.resume.c_str(),
                static_cast<long long>(st.epoch), static_cast<long long>(st.next_batch),
                static_cast<long long>(st.step));
  std::fflush(stdout);

  MetricsLog log(o.metrics, !o.resume.empty(), kind);
  const auto t_start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t_start).count(); };
  const bool tty = !o.quiet && stderr_is_tty();
  bool stop = false;
  StopSignals signals;
  // After a SIGINT / SIGTERM: the latest state to *.last.safetensors (as
  // --save_every writes it; save_now false: it was just written at an epoch
  // end), one line, exit 128 + signal.
  // Whether to stop for a signal. Across processes all ranks decide together
  // (a signal may reach them at different steps), so they stop at one step.
  auto signalled = [&] {
    const bool here = StopSignals::received() != 0;
    return world > 1 ? comm.all_reduce_sum(here ? 1.0 : 0.0) > 0 : here;
  };
  auto interrupted = [&](bool save_now) {
    const int sig = StopSignals::received() != 0 ? StopSignals::received() : SIGTERM;
    if (tty) std::fprintf(stderr, "\r%80s\r", "");
    std::fflush(stdout);
    log.close();
    if (!writer) return 128 + sig;
    if (!o.save.empty()) {
      if (save_now && writer) save_checkpoint(last_path(o.save), *model, corpus.vocab, *opt, st, model->dropout_generator(), o);
      std::fprintf(stderr, "charlm: interrupted at step %lld; checkpoint saved to %s\n",
                   static_cast<long long>(st.step), last_path(o.save).c_str());
    } else {
      std::fprintf(stderr, "charlm: interrupted at step %lld; no --save given\n", static_cast<long long>(st.step));
    }
    return 128 + sig;
  };

  auto end_of_run_eval = [&](int64_t epoch, bool full_epoch) {
    double vloss = evaluate(*model, valid, o.seq_len, o.validseqlen, o.eval_batches);
    double tloss = evaluate(*model, test, o.seq_len, o.validseqlen, o.eval_batches);
    say("| end of epoch %3lld | step %lld | valid loss %.3f | valid %s %.3f | test %s %.3f | %.1f s%s\n",
                static_cast<long long>(epoch), static_cast<long long>(st.step), vloss, score_name(kind),
                score(kind, vloss), score_name(kind), score(kind, tloss), elapsed(), full_epoch ? "" : " (partial epoch)");
    std::fflush(stdout);
    log.row("valid", epoch, st.step, st.lr, vloss, 0, 0, elapsed());
    log.row("test", epoch, st.step, st.lr, tloss, 0, 0, elapsed());
    return vloss;
  };

  // The training split on the training device once, so a batch is a slice
  // of it there: no upload, no host wait per step.
  // Data-parallel: this rank's equal share of the streams, rows
  // [rank * B/N, (rank + 1) * B/N) of the global batch; dropout draws its
  // slice of the whole batch's masks, so N ranks draw what one process would
  // (Generator::set_shard), and the gradients are averaged after backward.
  const int64_t local_batch = o.batch_size / world;
  const Tensor train_src = (world > 1 ? train.narrow(0, rank * local_batch, local_batch) : train).to(device);
  std::unique_ptr<dist::GradReducer> reducer;
  if (comm.launched()) {
    model->dropout_generator().set_shard(static_cast<uint64_t>(rank), static_cast<uint64_t>(world));
    reducer = std::make_unique<dist::GradReducer>(comm, model->parameters());
    say("data-parallel: %d processes (%s), %lld of the %lld streams each, gradients all-reduced in %lld buckets "
        "(%s)\n", world, comm.launcher().c_str(), static_cast<long long>(local_batch),
        static_cast<long long>(o.batch_size), static_cast<long long>(reducer->num_buckets()),
        device.is_cuda() ? (dist::built_with_nccl() ? "NCCL" : "MPI through host memory") : "MPI");
  }
  // The losses are watched on the device (nn::LossWatch): a step never waits
  // to read its loss; the first non-finite one gates off every later update,
  // so the parameters stay as they were before it. settle() reads the watch
  // (one host wait, which also raises what the device-side index checks found)
  // at each log line, before every evaluation, save and exit, and after every
  // step with --debug_sync; a bad loss then stops the run naming its step.
  nn::LossWatch watch(device);
  // On CUDA the step is captured once as a graph and replayed (core/step_graph.h).
  // The graph reads its batch from two fixed buffers, which each full-length
  // window is copied into; a shorter last window runs eagerly.
  StepGraph graph(parse_graph_mode(o.cuda_graph), device, model->parameters());
  const bool graphed = graph.enabled();
  Tensor static_inp, static_tgt;
  if (graphed) {
    static_inp = empty({train_src.size(0), o.seq_len}, train_src.options());
    static_tgt = empty({train_src.size(0), o.seq_len}, train_src.options());
  }
  bool said_graph = false;
  int64_t profile_steps = o.profile > 0 ? o.profile : o.trace.empty() ? 0 : 3;
  const int64_t profile_from = st.step + 2;  // after two warm-up steps of this run
  std::unique_ptr<nn::Profiler> prof;
  std::vector<std::pair<int64_t, int64_t>> unread;  // (epoch, batch) of each step since the last read
  double last_loss = 0;
  auto settle = [&] {
    const nn::LossWatch::Reading r = watch.read();
    if (r.bad_step >= 0) {
      const int64_t back = st.step - r.bad_step;  // steps since the bad one: it is among the unread ones
      std::string where;
      if (back >= 0 && back < static_cast<int64_t>(unread.size())) {
        const auto [epoch, batch] = unread[unread.size() - 1 - static_cast<size_t>(back)];
        where = " (epoch " + std::to_string(epoch) + ", batch " + std::to_string(batch) + ")";
      }
      TCN_FAIL("step ", r.bad_step, where, ": loss is ", r.bad_loss, "; stopping before the update. ",
               o.save.empty() ? std::string("") : "The last checkpoint " + last_path(o.save) + " is intact.");
    }
    unread.clear();
    return r;
  };
  // The table (and the trace) of the steps profiled so far. Recording stops
  // first, so `read_losses` (the watch read: a bad step's error comes first,
  // and its losses go to the interval's sum) is not part of it.
  auto report_profile = [&](const std::function<void()>& read_losses) {
    const nn::ProfileReport& r = prof->finish();
    read_losses();
    if (tty) std::fprintf(stderr, "\r%80s\r", "");
    if (r.steps < profile_steps)
      say("\n(profiled %lld of the %lld steps asked for: the %s ended first)", static_cast<long long>(r.steps),
          static_cast<long long>(profile_steps), stop ? "run" : "epoch");
    say("\n%s\n", r.table().c_str());
    if (!o.trace.empty()) {
      prof->write_trace(o.trace);
      say("trace of the profiled steps written to %s\n", o.trace.c_str());
    }
    std::fflush(stdout);
    prof.reset();
    profile_steps = 0;
  };

  for (; st.epoch <= o.epochs && !stop; ++st.epoch) {
    model->train();
    double interval_loss = 0;
    int64_t interval_steps = 0, interval_chars = 0;
    auto t_interval = Clock::now();
    auto drain = [&] {  // the losses not read yet into this interval's sum
      if (!unread.empty()) interval_loss += settle().loss_sum;
    };
    for (int64_t bi = st.next_batch; bi < static_cast<int64_t>(wins.size()); ++bi) {
      if (signalled()) {
        settle();  // a bad step pending: its error, not a save
        return interrupted(true);
      }
      if (o.max_steps > 0 && st.step >= o.max_steps) {
        stop = true;
        break;
      }
      const Window& w = wins[bi];
      const int64_t scored = w.len - hist;
      auto one_step = [&] {
        Tensor inp, tgt;
        int64_t key = -1;  // the shapes and buffers the step reads: only full windows in the static buffers replay
        {
          const profile::PhaseScope data(profile::Phase::Data);
          if (graphed && w.len == o.seq_len) {
            copy_(static_inp, train_src.narrow(1, w.start, w.len));
            copy_(static_tgt, train_src.narrow(1, w.start + 1, w.len));
            inp = static_inp;
            tgt = static_tgt;
            key = w.len;
          } else {
            std::tie(inp, tgt) = get_batch(train_src, w);
          }
        }
        graph.run(key, [&] {
          opt->zero_grad();
          Tensor logits = model->forward(inp, scored);  // the last `scored` positions only
          Tensor loss = cross_entropy(logits, tgt.narrow(1, hist, scored));
          loss.backward();
          if (reducer) {
            reducer->finish();  // every rank now holds the gradient of the whole batch
            // The whole batch's loss (the mean of the ranks' equal shares), so
            // every rank watches the same value and stops at the same bad step.
            loss = clone(loss.detach());
            comm.all_reduce_sum(loss);
            mul_(loss, 1.0 / world);
          }
          if (o.clip > 0) nn::clip_grad_norm_(model->parameters(), o.clip);  // no host read of the norm
          watch.add(loss, st.step + 1);
          opt->step(watch.ok());  // a no-op from the first non-finite loss on, decided on the device
          return loss;
        });
      };
      // --profile: steps 3 .. 2 + N of this run, eagerly (nn/profiler.h), then the table.
      if (profile_steps > 0 && st.step == profile_from) prof = std::make_unique<nn::Profiler>(*model, device);
      if (prof) {
        prof->step(one_step);
        if (st.step + 1 == profile_from + profile_steps) report_profile(drain);
      } else {
        one_step();
      }
      if (graphed && !said_graph && graph.settled()) {
        say("cuda graph: %s\n", graph.status().c_str());
        said_graph = true;
      }
      st.step++;
      st.next_batch = bi + 1;
      unread.emplace_back(st.epoch, bi + 1);
      interval_steps++;
      interval_chars += scored * train_src.size(0) * world;  // the whole batch's, over all ranks
      if (o.debug_sync) {
        last_loss = settle().loss_sum;  // this step's loss alone
        interval_loss += last_loss;
      }
      if (tty)
        std::fprintf(stderr, "\r  epoch %lld | %lld/%zu | step %lld | loss %.3f%s   ", static_cast<long long>(st.epoch),
                     static_cast<long long>(bi + 1), wins.size(), static_cast<long long>(st.step), last_loss,
                     o.debug_sync ? "" : " (last log)");
      if (interval_steps == o.log_interval || st.step == o.max_steps) {
        drain();
        double secs = std::chrono::duration<double>(Clock::now() - t_interval).count();
        double ms = secs * 1000 / static_cast<double>(interval_steps);
        double cps = static_cast<double>(interval_chars) / secs;
        double avg = interval_loss / static_cast<double>(interval_steps);
        last_loss = avg;
        if (tty) std::fprintf(stderr, "\r%80s\r", "");
        say("| epoch %3lld | %5lld/%5zu batches | lr %.5f | ms/batch %8.1f | %s/s %7.0f | loss %.3f | %s %.3f\n",
                    static_cast<long long>(st.epoch), static_cast<long long>(bi + 1), wins.size(), st.lr, ms,
                    rate_unit(kind), cps, avg, score_name(kind), score(kind, avg));
        std::fflush(stdout);
        log.row("train", st.epoch, st.step, st.lr, avg, ms, cps, elapsed());
        interval_loss = 0;
        interval_steps = interval_chars = 0;
        t_interval = Clock::now();
      }
      if (o.eval_interval > 0 && st.step % o.eval_interval == 0 && st.step != o.max_steps) {
        drain();
        const auto t_eval = Clock::now();
        double vloss = evaluate(*model, valid, o.seq_len, o.validseqlen, o.eval_batches);
        model->train();
        say("| step %lld | valid loss %.3f | valid %s %.3f\n", static_cast<long long>(st.step), vloss,
                    score_name(kind), score(kind, vloss));
        std::fflush(stdout);
        log.row("valid", st.epoch, st.step, st.lr, vloss, 0, 0, elapsed());
        t_interval += Clock::now() - t_eval;  // keep evaluation out of the interval's ms/batch
      }
      if (!o.save.empty() && o.save_every > 0 && st.step % o.save_every == 0) {
        drain();  // never save past a bad step
        if (writer) save_checkpoint(last_path(o.save), *model, corpus.vocab, *opt, st, model->dropout_generator(), o);
      }
    }
    settle();  // the epoch's (or run's) last steps: a bad one stops here, before evaluation and saves
    if (prof) report_profile([] {});  // before the evaluation and saves, which are not steps
    if (signalled()) return interrupted(true);
    if (tty) std::fprintf(stderr, "\r%80s\r", "");
    const bool full_epoch = !stop;
    double vloss = end_of_run_eval(st.epoch, full_epoch);
    if (full_epoch) {
      // The reference schedules, after epoch 5: char_cnn divides lr by 10 when valid
      // loss is worse than the max of the last 3 epochs'; word_cnn halves it when
      // valid loss is no better than the max of the last 5.
      const bool words = kind == Tokens::Words;
      const size_t window = words ? 5 : 3;
      if (st.epoch > 5 && st.vlosses.size() >= window) {
        const double worst = *std::max_element(st.vlosses.end() - static_cast<std::ptrdiff_t>(window), st.vlosses.end());
        if (words ? vloss >= worst : vloss > worst) st.lr /= words ? 2 : 10;
      }
      if (st.lr != opt->lr) {
        opt->lr = st.lr;
        say("learning rate -> %.6f\n", st.lr);
      }
      st.vlosses.push_back(vloss);
      st.next_batch = 0;
    }
    // Update the best loss before writing either file, so a resumed run compares
    // against the same best as an uninterrupted one.
    const bool improved = vloss < st.best_vloss;
    if (improved) st.best_vloss = vloss;
    TrainState saved = st;
    if (full_epoch) saved.epoch = st.epoch + 1;
    if (!o.save.empty() && writer) {
      save_checkpoint(last_path(o.save), *model, corpus.vocab, *opt, saved, model->dropout_generator(), o);
      if (improved) {
        save_checkpoint(o.save, *model, corpus.vocab, *opt, saved, model->dropout_generator(), o);
        say("saved best model (valid %s %.3f) to %s\n", score_name(kind), score(kind, vloss), o.save.c_str());
      }
      std::fflush(stdout);
    }
    if (stop || (o.max_steps > 0 && st.step >= o.max_steps)) break;  // no empty extra epoch at the limit
  }
  if (signalled()) return interrupted(false);  // during the last epoch end's evaluation or save
  if (profile_steps > 0)
    say("--profile: the run ended before the profiled steps (they follow 2 warm-up steps); nothing profiled\n");
  log.close();
  say("done: %lld steps in %.1f s; metrics in %s\n", static_cast<long long>(st.step), elapsed(),
              metrics_path.c_str());
  return 0;
}

int run_eval(const EvalOptions& o) {
  using namespace limits;
  check("--seq_len", o.seq_len, 1, kMaxSeqLen);
  TCN_CHECK(o.validseqlen > 0 && o.validseqlen <= o.seq_len, "--validseqlen ", o.validseqlen,
            " must be in [1, --seq_len = ", o.seq_len, "]");
  check("--batch_size", o.batch_size, 1, kMaxBatch);
  check("--max_batches", o.max_batches, 0, kMaxCount, " (0: all)");
  check("--threads", o.threads, 0, kMaxThreads, " (0: the default)");
  TCN_CHECK(o.split == "valid" || o.split == "test" || o.split == "train", "--split ", o.split,
            ": expected train, valid or test");
  if (o.threads > 0) set_num_threads(o.threads);
  const Device device = resolve_device(o.device);
  const Autocast precision(precision_for(o.precision, device));
  nn::LoadedCharLM m = load_model_file(o.checkpoint, "--checkpoint",
                                       ModelFileOptions{.data = o.data, .vocab_file = o.vocab_file,
                                                        .tokens = o.tokens, .allow_extra = o.allow_extra})
                           .loaded;
  Vocab vocab = Vocab::from_tokens(m.vocab, parse_tokens(checkpoint_tokens(m.file.metadata)));
  const std::string file = o.data + "/ptb." + o.split + ".txt";
  const std::string text = read_data_file(file);
  Tensor source = batchify(vocab.encode(text, file), o.batch_size, o.seq_len, file);
  m.model->to(device);
  auto t0 = Clock::now();
  double loss = evaluate(*m.model, source, o.seq_len, o.validseqlen, o.max_batches);  // sharded under mpirun
  if (dist::Comm::world().rank() == 0)
    std::printf("%s %s: loss %.4f | %s %.4f | %.1f s\n", o.checkpoint.c_str(), o.split.c_str(), loss,
                score_name(vocab.kind), score(vocab.kind, loss),
                std::chrono::duration<double>(Clock::now() - t0).count());
  return 0;
}

}  // namespace charlm
