#include "train.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/threads.h"
#include "cuda/runtime.h"
#include "data.h"
#include "nn/optim.h"

namespace charlm {

using namespace tcn;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

Device resolve_device(const std::string& name) {
  if (name == "auto") {
    if (cuda::is_available() && cuda::verified_on_gpu()) return Device::cuda(0);
    return Device::cpu();
  }
  Device d = parse_device(name);
  if (d.is_cuda()) {
    TCN_CHECK(cuda::is_available(), "--device ", name, ": no usable GPU (", cuda::unavailable_reason(), ")");
    if (cuda::emulated())
      std::fprintf(stderr, "charlm: note: --device %s is the EMULATED device (TCN_CUDA=EMU): the CUDA kernels run "
                           "on the CPU to check their logic, far slower than the CPU backend; not a GPU\n",
                   name.c_str());
    else if (!cuda::verified_on_gpu())
      std::fprintf(stderr, "charlm: warning: the CUDA kernels of this build have not been verified on a GPU yet "
                           "(tests/test_cuda_ops.cpp); results may be wrong\n");
  }
  return d;
}

double evaluate(nn::CharLM& model, const Tensor& source, int64_t seq_len, int64_t validseqlen, int64_t max_batches) {
  model.eval();
  autograd::NoGrad ng;
  const int64_t hist = seq_len - validseqlen;
  double total = 0;
  int64_t count = 0, n = 0;
  for (const Window& w : windows(source.size(1), seq_len, validseqlen)) {
    if (max_batches > 0 && n++ >= max_batches) break;
    auto [inp, tgt] = get_batch(source.to(Device::cpu()), w);
    Device dev = model.parameters()[0].device();
    const int64_t scored = w.len - hist;
    Tensor logits = model.forward(inp.to(dev), scored);  // the last `scored` positions only
    double l = cross_entropy(logits, tgt.to(dev).narrow(1, hist, scored)).item();
    total += l * static_cast<double>(scored * inp.size(0));
    count += scored * inp.size(0);
  }
  TCN_CHECK(count > 0, "evaluate: no window to score (source of ", source.size(1), " characters per stream)");
  return total / static_cast<double>(count);
}

namespace {

constexpr double kLn2 = 0.6931471805599453;

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
  MetricsLog(const std::string& path, bool append) {
    if (path.empty()) return;
    auto parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    bool fresh = !append || !std::filesystem::exists(path);
    f_.open(path, fresh ? std::ios::trunc : std::ios::app);
    TCN_CHECK(f_.good(), "--metrics ", path, ": cannot open for writing");
    if (fresh) f_ << "event,epoch,step,lr,loss,bpc,ms_per_batch,chars_per_sec,elapsed_s\n";
  }
  void row(const char* event, int64_t epoch, int64_t step, double lr, double loss, double ms, double cps,
           double elapsed) {
    if (!f_.is_open()) return;
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s,%lld,%lld,%.6g,%.6f,%.6f,%.2f,%.1f,%.1f\n", event, static_cast<long long>(epoch),
                  static_cast<long long>(step), lr, loss, loss / kLn2, ms, cps, elapsed);
    f_ << buf;
    f_.flush();
  }

 private:
  std::ofstream f_;
};

// Fails early, before any training, when the checkpoint path cannot be written.
void check_writable(const std::string& path) {
  const std::string probe = path + ".tmp";
  std::ofstream f(probe, std::ios::trunc);
  TCN_CHECK(f.good(), "--save ", path, ": cannot write there (", std::strerror(errno), ")");
  f.close();
  std::remove(probe.c_str());
}

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
                                          .dump()}};
  nn::NamedTensors extra;
  for (auto& [name, t] : opt.state()) extra.emplace_back("optim." + name, t);
  nn::save_char_lm(path, model, vocab.chars, meta, extra);
}

bool stderr_is_tty() { return ::isatty(2) == 1; }

}  // namespace

int run_train(TrainOptions o) {
  // Console output of this run (nothing with --quiet); errors still throw.
  auto say = [&o](const char* fmt, auto... args) {
    if (o.quiet) return;
    std::printf(fmt, args...);
    std::fflush(stdout);
  };
  if (o.nhid < 0) o.nhid = o.model == "lstm" ? 700 : 450;
  TCN_CHECK(o.model == "tcn" || o.model == "lstm", "--model ", o.model, ": expected tcn or lstm");
  TCN_CHECK(o.validseqlen > 0 && o.validseqlen <= o.seq_len, "--validseqlen ", o.validseqlen,
            " must be in [1, --seq_len = ", o.seq_len, "]");
  TCN_CHECK(o.log_interval > 0, "--log-interval must be positive");
  TCN_CHECK(o.resume.empty() || o.init.empty(), "--resume and --init exclude each other");
  if (o.threads > 0) set_num_threads(o.threads);
  const Device device = resolve_device(o.device);
  if (!o.save.empty()) check_writable(o.save);

  Corpus corpus = load_corpus(o.data);
  Tensor train = batchify(corpus.vocab.encode(corpus.train, o.data + "/ptb.train.txt"), o.batch_size, o.seq_len,
                          "ptb.train.txt");
  Tensor valid = batchify(corpus.vocab.encode(corpus.valid, o.data + "/ptb.valid.txt"), o.eval_batch_size,
                          o.seq_len, "ptb.valid.txt");
  Tensor test = batchify(corpus.vocab.encode(corpus.test, o.data + "/ptb.test.txt"), o.eval_batch_size, o.seq_len,
                         "ptb.test.txt");

  std::unique_ptr<nn::CharLM> model;
  TrainState st;
  st.lr = o.lr;
  nn::LoadedCharLM resumed;
  if (!o.resume.empty()) {
    resumed = nn::load_char_lm(o.resume, "optim.");
    model = std::move(resumed.model);
    TCN_CHECK(model->kind() == o.model, "--resume ", o.resume, ": checkpoint holds a ", model->kind(),
              " model but --model is ", o.model);
    TCN_CHECK(resumed.vocab == corpus.vocab.chars, "--resume ", o.resume,
              ": the checkpoint's vocabulary differs from the data's (", resumed.vocab.size(), " vs ",
              corpus.vocab.size(), " characters)");
    json want = model_config(o, corpus.vocab.size()), have = model->config_json();
    TCN_CHECK(want == have, "--resume ", o.resume, ": the checkpoint's config ", have.dump(),
              " does not match the flags ", want.dump());
  } else {
    model = nn::make_char_lm(o.model, model_config(o, corpus.vocab.size()), o.seed);
    if (!o.init.empty()) {
      // Weights only: e.g. a PyTorch model's initial state, to compare training runs step by step.
      nn::LoadedCharLM init = nn::load_char_lm(o.init, "optim.");
      TCN_CHECK(init.vocab == corpus.vocab.chars, "--init ", o.init, ": the checkpoint's vocabulary differs from the data's");
      TCN_CHECK(init.model->kind() == o.model && init.model->config_json() == model->config_json(), "--init ", o.init,
                ": the checkpoint's ", init.model->kind(), " config ", init.model->config_json().dump(),
                " does not match the flags ", model->config_json().dump());
      nn::load_module(init.file, *model, "optim.");
    }
  }
  model->to(device);
  auto opt = make_optimizer(o, model->parameters());
  if (!o.resume.empty()) {
    nn::NamedTensors ostate;
    for (auto& [name, t] : resumed.file.tensors)
      if (name.rfind("optim.", 0) == 0) ostate.emplace_back(name.substr(6), t);
    opt->load_state(ostate);
    json js = json::parse(resumed.file.metadata.at("train_state"));
    st.epoch = js.at("epoch");
    st.next_batch = js.at("next_batch");
    st.step = js.at("step");
    st.lr = js.at("lr");
    st.best_vloss = js.at("best_vloss").is_null() ? st.best_vloss : js.at("best_vloss").get<double>();
    st.vlosses = js.at("vlosses").get<std::vector<double>>();
    model->dropout_generator().set_state(js.at("dropout_seed"), js.at("dropout_offset"));
    opt->lr = st.lr;
  }

  const std::vector<Window> wins = windows(train.size(1), o.seq_len, o.validseqlen);
  const int64_t hist = o.seq_len - o.validseqlen;
  say("charlm train | model %s | %lld parameters | vocab %lld | device %s | threads %d\n", o.model.c_str(),
              static_cast<long long>(model->num_parameters()), static_cast<long long>(corpus.vocab.size()),
              device.str().c_str(), num_threads());
  say("data %s: train %zu chars -> %lld streams x %lld, %zu windows/epoch (seq_len %lld, validseqlen %lld)\n",
              o.data.c_str(), corpus.train.size(), static_cast<long long>(o.batch_size),
              static_cast<long long>(train.size(1)), wins.size(), static_cast<long long>(o.seq_len),
              static_cast<long long>(o.validseqlen));
  if (!o.resume.empty())
    say("resumed from %s at epoch %lld, batch %lld, step %lld\n", o.resume.c_str(),
                static_cast<long long>(st.epoch), static_cast<long long>(st.next_batch),
                static_cast<long long>(st.step));
  std::fflush(stdout);

  if (o.metrics.empty()) o.metrics = "runs/" + o.model + ".csv";
  MetricsLog log(o.metrics, !o.resume.empty());
  const auto t_start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t_start).count(); };
  const bool tty = !o.quiet && stderr_is_tty();
  bool stop = false;

  auto end_of_run_eval = [&](int64_t epoch, bool full_epoch) {
    double vloss = evaluate(*model, valid, o.seq_len, o.validseqlen, o.eval_batches);
    double tloss = evaluate(*model, test, o.seq_len, o.validseqlen, o.eval_batches);
    say("| end of epoch %3lld | step %lld | valid loss %.3f | valid bpc %.3f | test bpc %.3f | %.1f s%s\n",
                static_cast<long long>(epoch), static_cast<long long>(st.step), vloss, vloss / kLn2, tloss / kLn2,
                elapsed(), full_epoch ? "" : " (partial epoch)");
    std::fflush(stdout);
    log.row("valid", epoch, st.step, st.lr, vloss, 0, 0, elapsed());
    log.row("test", epoch, st.step, st.lr, tloss, 0, 0, elapsed());
    return vloss;
  };

  for (; st.epoch <= o.epochs && !stop; ++st.epoch) {
    model->train();
    double interval_loss = 0;
    int64_t interval_steps = 0, interval_chars = 0;
    auto t_interval = Clock::now();
    for (int64_t bi = st.next_batch; bi < static_cast<int64_t>(wins.size()); ++bi) {
      if (o.max_steps > 0 && st.step >= o.max_steps) {
        stop = true;
        break;
      }
      auto [inp, tgt] = get_batch(train, wins[bi]);
      inp = inp.to(device);
      tgt = tgt.to(device);
      const int64_t scored = wins[bi].len - hist;
      opt->zero_grad();
      Tensor logits = model->forward(inp, scored);  // the last `scored` positions only
      Tensor loss = cross_entropy(logits, tgt.narrow(1, hist, scored));
      loss.backward();
      if (o.clip > 0) nn::clip_grad_norm_(model->parameters(), o.clip);  // no host read of the norm
      const double l = loss.item();
      TCN_CHECK(std::isfinite(l), "step ", st.step + 1, " (epoch ", st.epoch, ", batch ", bi + 1, "): loss is ", l,
                "; stopping before the update. ",
                o.save.empty() ? std::string("") : "The last checkpoint " + last_path(o.save) + " is intact.");
      opt->step();
      st.step++;
      st.next_batch = bi + 1;
      interval_loss += l;
      interval_steps++;
      interval_chars += scored * inp.size(0);
      if (tty)
        std::fprintf(stderr, "\r  epoch %lld | %lld/%zu | step %lld | loss %.3f   ", static_cast<long long>(st.epoch),
                     static_cast<long long>(bi + 1), wins.size(), static_cast<long long>(st.step), l);
      if (interval_steps == o.log_interval || st.step == o.max_steps) {
        double secs = std::chrono::duration<double>(Clock::now() - t_interval).count();
        double ms = secs * 1000 / static_cast<double>(interval_steps);
        double cps = static_cast<double>(interval_chars) / secs;
        double avg = interval_loss / static_cast<double>(interval_steps);
        if (tty) std::fprintf(stderr, "\r%80s\r", "");
        say("| epoch %3lld | %5lld/%5zu batches | lr %.5f | ms/batch %8.1f | chars/s %7.0f | loss %.3f | bpc %.3f\n",
                    static_cast<long long>(st.epoch), static_cast<long long>(bi + 1), wins.size(), st.lr, ms, cps,
                    avg, avg / kLn2);
        std::fflush(stdout);
        log.row("train", st.epoch, st.step, st.lr, avg, ms, cps, elapsed());
        interval_loss = 0;
        interval_steps = interval_chars = 0;
        t_interval = Clock::now();
      }
      if (o.eval_interval > 0 && st.step % o.eval_interval == 0 && st.step != o.max_steps) {
        const auto t_eval = Clock::now();
        double vloss = evaluate(*model, valid, o.seq_len, o.validseqlen, o.eval_batches);
        model->train();
        say("| step %lld | valid loss %.3f | valid bpc %.3f\n", static_cast<long long>(st.step), vloss,
                    vloss / kLn2);
        std::fflush(stdout);
        log.row("valid", st.epoch, st.step, st.lr, vloss, 0, 0, elapsed());
        t_interval += Clock::now() - t_eval;  // keep evaluation out of the interval's ms/batch
      }
      if (!o.save.empty() && o.save_every > 0 && st.step % o.save_every == 0)
        save_checkpoint(last_path(o.save), *model, corpus.vocab, *opt, st, model->dropout_generator(), o);
    }
    if (tty) std::fprintf(stderr, "\r%80s\r", "");
    const bool full_epoch = !stop;
    double vloss = end_of_run_eval(st.epoch, full_epoch);
    if (full_epoch) {
      // The reference schedule: divide lr by 10 when valid loss is worse than the max of the last 3 epochs.
      if (st.epoch > 5 && st.vlosses.size() >= 3 &&
          vloss > *std::max_element(st.vlosses.end() - 3, st.vlosses.end())) {
        st.lr /= 10;
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
    if (!o.save.empty()) {
      save_checkpoint(last_path(o.save), *model, corpus.vocab, *opt, saved, model->dropout_generator(), o);
      if (improved) {
        save_checkpoint(o.save, *model, corpus.vocab, *opt, saved, model->dropout_generator(), o);
        say("saved best model (valid bpc %.3f) to %s\n", vloss / kLn2, o.save.c_str());
      }
      std::fflush(stdout);
    }
    if (stop || (o.max_steps > 0 && st.step >= o.max_steps)) break;  // no empty extra epoch at the limit
  }
  say("done: %lld steps in %.1f s; metrics in %s\n", static_cast<long long>(st.step), elapsed(),
              o.metrics.c_str());
  return 0;
}

int run_eval(const EvalOptions& o) {
  TCN_CHECK(o.validseqlen > 0 && o.validseqlen <= o.seq_len, "--validseqlen ", o.validseqlen,
            " must be in [1, --seq_len = ", o.seq_len, "]");
  if (o.threads > 0) set_num_threads(o.threads);
  nn::LoadedCharLM m = nn::load_char_lm(o.checkpoint, "optim.");
  Vocab vocab = Vocab::from_chars(m.vocab);
  TCN_CHECK(o.split == "valid" || o.split == "test" || o.split == "train", "--split ", o.split,
            ": expected train, valid or test");
  const std::string file = o.data + "/ptb." + o.split + ".txt";
  std::ifstream f(file, std::ios::binary);
  TCN_CHECK(f.good(), "cannot read ", file);
  std::string text((std::istreambuf_iterator<char>(f)), {});
  TCN_CHECK(!text.empty(), file, " is empty");
  Tensor source = batchify(vocab.encode(text, file), o.batch_size, o.seq_len, file);
  m.model->to(resolve_device(o.device));
  auto t0 = Clock::now();
  double loss = evaluate(*m.model, source, o.seq_len, o.validseqlen, o.max_batches);
  std::printf("%s %s: loss %.4f | bpc %.4f | %.1f s\n", o.checkpoint.c_str(), o.split.c_str(), loss, loss / kLn2,
              std::chrono::duration<double>(Clock::now() - t0).count());
  return 0;
}

}  // namespace charlm
