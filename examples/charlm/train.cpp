// `charlm train` and `charlm eval`. run_train reads top to bottom: the flags
// and outputs checked (train_setup.cpp), the data, the model, then the epochs
// of nn::Trainer steps (nn/trainer.h), with the log lines, evaluations and
// checkpoints of this program around them (TrainRun below).
#include "train.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <optional>

#include "carry.h"
#include "checkpoint.h"
#include "data.h"
#include "flags.h"
#include "model_file.h"
#include "examples/common/program.h"
#include "core/autocast.h"
#include "core/threads.h"
#include "nn/distributed.h"
#include "train_setup.h"
#include "nn/trainer.h"

namespace charlm {

using namespace tcn;
using Clock = std::chrono::steady_clock;

bool carries_state(const std::string& model, const std::string& lstm_state) {
  TCN_CHECK(lstm_state == "carry" || lstm_state == "reset", "--lstm_state ", lstm_state, ": expected carry or reset");
  return model == "lstm" && lstm_state == "carry";
}

void carry_windows(int64_t& seq_len, int64_t& validseqlen, bool seq_len_given, bool validseqlen_given) {
  if (seq_len_given && !validseqlen_given) validseqlen = seq_len;
  else if (!seq_len_given) seq_len = validseqlen;
  TCN_CHECK(seq_len == validseqlen, "--lstm_state carry: windows do not overlap, so --seq_len (", seq_len,
            ") must equal --validseqlen (", validseqlen, "); give one of them, or use --lstm_state reset for the "
            "TCN's protocol");
}

namespace {

// evaluate() for an LSTM carrying its state: the windows in order, each
// stream's state passed on; the ranks split the streams when they divide evenly.
double evaluate_carried(nn::CharLM& model, const Tensor& source, int64_t seq_len, int64_t max_batches) {
  dist::Comm& comm = dist::Comm::world();
  const int64_t B = source.size(0);
  const bool split = comm.size() > 1 && B % comm.size() == 0;
  const Tensor streams = split ? source.narrow(0, comm.rank() * (B / comm.size()), B / comm.size()) : source;
  const Device dev = model.parameters()[0].device();
  CarriedState state(model, streams.size(0));
  double total = 0;
  int64_t count = 0, n = 0;
  for (const Window& w : windows(source.size(1), seq_len, seq_len)) {
    if (max_batches > 0 && n++ >= max_batches) break;
    auto [inp, tgt] = get_batch(streams, w);
    const double l = cross_entropy(state.forward(inp.to(dev)), tgt.to(dev)).item();
    total += l * static_cast<double>(inp.numel());
    count += inp.numel();
  }
  if (split) {
    total = comm.all_reduce_sum(total);
    count = static_cast<int64_t>(comm.all_reduce_sum(static_cast<double>(count)));
  }
  TCN_CHECK(count > 0, "evaluate: no window to score (source of ", source.size(1), " tokens per stream)");
  return total / static_cast<double>(count);
}

}  // namespace

double evaluate(nn::CharLM& model, const Tensor& source, int64_t seq_len, int64_t validseqlen, int64_t max_batches,
                bool carry) {
  model.eval();
  autograd::NoGrad ng;
  if (carry) {
    TCN_CHECK(seq_len == validseqlen, "evaluate: an LSTM carrying its state reads windows that do not overlap; "
              "seq_len ", seq_len, " != validseqlen ", validseqlen);
    return evaluate_carried(model, source.to(Device::cpu()), seq_len, max_batches);
  }
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

// What `charlm train` prints, logs, evaluates and saves around the steps.
class TrainRun {
 public:
  TrainRun(const TrainOptions& o, nn::CharLM& model, nn::Optimizer& opt, const Vocab& vocab, TrainState& st,
           const Tensor& valid, const Tensor& test, size_t windows, bool writer, CarriedState* carry)
      : o_(o), model_(model), opt_(opt), vocab_(vocab), st_(st), valid_(valid), test_(test), windows_(windows),
        writer_(writer), carry_(carry), kind_(vocab.kind), say_{!o.quiet && writer}, tty_(!o.quiet && stderr_is_tty()),
        log_(o.metrics, !o.resume.empty(), vocab.kind), start_(Clock::now()) {}

  bool tty() const { return tty_; }
  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  // The progress line on a terminal's stderr, after every step.
  void progress(const nn::Trainer& t, int64_t batch) const {
    if (tty_)
      std::fprintf(stderr, "\r  epoch %lld | %lld/%zu | step %lld | loss %.3f%s   ", static_cast<long long>(st_.epoch),
                   static_cast<long long>(batch), windows_, static_cast<long long>(st_.step), t.last_loss(),
                   o_.debug_sync ? "" : " (last log)");
  }

  void log_line(const nn::Interval& in, int64_t batch) {
    const double ms = in.seconds * 1000 / static_cast<double>(in.steps);
    const double cps = static_cast<double>(in.items) / in.seconds;
    if (tty_) std::fprintf(stderr, "\r%80s\r", "");
    say_("| epoch %3lld | %5lld/%5zu batches | lr %.5f | ms/batch %8.1f | %s/s %7.0f | loss %.3f | %s %.3f\n",
         static_cast<long long>(st_.epoch), static_cast<long long>(batch), windows_, st_.lr, ms, rate_unit(kind_), cps,
         in.loss, score_name(kind_), score(kind_, in.loss));
    log_.row("train", st_.epoch, st_.step, st_.lr, in.loss, ms, cps, elapsed());
  }

  // --eval_interval: valid loss between epoch ends, its time left out of the interval's ms/batch.
  void eval_line(nn::Trainer& t) {
    t.read_losses();
    const auto t_eval = Clock::now();
    const double vloss = evaluate(model_, valid_, o_.seq_len, o_.validseqlen, o_.eval_batches, carry_ != nullptr);
    model_.train();
    say_("| step %lld | valid loss %.3f | valid %s %.3f\n", static_cast<long long>(st_.step), vloss, score_name(kind_),
         score(kind_, vloss));
    log_.row("valid", st_.epoch, st_.step, st_.lr, vloss, 0, 0, elapsed());
    t.exclude_time(Clock::now() - t_eval);
  }

  // The carried LSTM state a checkpoint at `st` needs: none at an epoch's
  // start (it begins from zeros). Every rank calls it: under data parallelism
  // it gathers the ranks' streams.
  nn::NamedTensors carried(const TrainState& st) const {
    return carry_ && st.next_batch > 0 ? carry_->save(dist::Comm::world()) : nn::NamedTensors{};
  }

  // The latest state to *.last.safetensors (--save_every, a signal, each epoch end); every rank calls it.
  void save_last(const TrainState& st) { write_last(st, carried(st)); }
  void write_last(const TrainState& st, const nn::NamedTensors& carried) {
    if (writer_) save_checkpoint(last_path(o_.save), model_, vocab_, opt_, st, model_.dropout_generator(), o_, carried);
  }

  // Valid and test loss, the learning-rate schedule, the checkpoints.
  void end_epoch(bool full_epoch);

  // After a SIGINT / SIGTERM: the latest state to *.last.safetensors (save_now
  // false: it was just written at an epoch end), one line, exit 128 + signal.
  int interrupted(int code, bool save_now) {
    log_.close();
    const nn::NamedTensors carry = save_now && !o_.save.empty() ? carried(st_) : nn::NamedTensors{};
    if (!writer_) return code;
    if (!o_.save.empty()) {
      if (save_now) write_last(st_, carry);
      std::fprintf(stderr, "charlm: interrupted at step %lld; checkpoint saved to %s\n",
                   static_cast<long long>(st_.step), last_path(o_.save).c_str());
    } else {
      std::fprintf(stderr, "charlm: interrupted at step %lld; no --save given\n", static_cast<long long>(st_.step));
    }
    return code;
  }

  void done(const std::string& metrics_path) {
    log_.close();
    say_("done: %lld steps in %.1f s; metrics in %s\n", static_cast<long long>(st_.step), elapsed(),
         metrics_path.c_str());
  }

 private:
  const TrainOptions& o_;
  nn::CharLM& model_;
  nn::Optimizer& opt_;
  const Vocab& vocab_;
  TrainState& st_;
  const Tensor &valid_, &test_;
  size_t windows_;
  bool writer_;
  CarriedState* carry_;  // an LSTM carrying its state (--lstm_state carry), else null
  Tokens kind_;
  Console say_;
  bool tty_;
  MetricsLog log_;
  Clock::time_point start_;
};

void TrainRun::end_epoch(bool full_epoch) {
  TrainState& st = st_;
  const double vloss = evaluate(model_, valid_, o_.seq_len, o_.validseqlen, o_.eval_batches, carry_ != nullptr);
  const double tloss = evaluate(model_, test_, o_.seq_len, o_.validseqlen, o_.eval_batches, carry_ != nullptr);
  say_("| end of epoch %3lld | step %lld | valid loss %.3f | valid %s %.3f | test %s %.3f | %.1f s%s\n",
       static_cast<long long>(st.epoch), static_cast<long long>(st.step), vloss, score_name(kind_), score(kind_, vloss),
       score_name(kind_), score(kind_, tloss), elapsed(), full_epoch ? "" : " (partial epoch)");
  log_.row("valid", st.epoch, st.step, st.lr, vloss, 0, 0, elapsed());
  log_.row("test", st.epoch, st.step, st.lr, tloss, 0, 0, elapsed());
  if (full_epoch) {
    // The reference schedules, after epoch 5: char_cnn divides lr by 10 when valid
    // loss is worse than the max of the last 3 epochs'; word_cnn halves it when
    // valid loss is no better than the max of the last 5.
    const bool words = kind_ == Tokens::Words;
    const size_t window = words ? 5 : 3;
    if (st.epoch > 5 && st.vlosses.size() >= window) {
      const double worst = *std::max_element(st.vlosses.end() - static_cast<std::ptrdiff_t>(window), st.vlosses.end());
      if (words ? vloss >= worst : vloss > worst) st.lr /= words ? 2 : 10;
    }
    if (st.lr != opt_.lr) {
      opt_.lr = st.lr;
      say_("learning rate -> %.6f\n", st.lr);
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
  const nn::NamedTensors carry = o_.save.empty() ? nn::NamedTensors{} : carried(saved);
  if (!o_.save.empty() && writer_) {
    write_last(saved, carry);
    if (improved) {
      save_checkpoint(o_.save, model_, vocab_, opt_, saved, model_.dropout_generator(), o_, carry);
      say_("saved best model (valid %s %.3f) to %s\n", score_name(kind_), score(kind_, vloss), o_.save.c_str());
    }
    std::fflush(stdout);
  }
}

// The three splits as streams: train in --batch_size streams, valid and test in
// --eval_batch_size (rows: streams, columns: tokens).
struct Splits {
  Tensor train, valid, test;
};
Splits batchify_splits(const TrainOptions& o, const Corpus& corpus) {
  return {batchify(corpus.vocab.encode(corpus.train, o.data + "/ptb.train.txt"), o.batch_size, o.seq_len,
                   "ptb.train.txt"),
          batchify(corpus.vocab.encode(corpus.valid, o.data + "/ptb.valid.txt"), o.eval_batch_size, o.seq_len,
                   "ptb.valid.txt"),
          batchify(corpus.vocab.encode(corpus.test, o.data + "/ptb.test.txt"), o.eval_batch_size, o.seq_len,
                   "ptb.test.txt")};
}

// The run's first lines: the model, the data and its windows, where a resumed run starts.
void say_run(const Console& say, const TrainOptions& o, const nn::CharLM& model, const Corpus& corpus, Tokens kind,
             const Device& device, const Tensor& train, size_t windows_per_epoch, const TrainState& st) {
  say("train | model %s | tokens %s | %lld parameters | vocab %lld | device %s | threads %d | precision %s%s\n",
      o.model.c_str(), o.tokens.c_str(), static_cast<long long>(model.num_parameters()),
      static_cast<long long>(corpus.vocab.size()), device.str().c_str(), num_threads(), o.precision.c_str(),
      precision_note(o.precision, device).c_str());
  say("data %s: train %lld %s -> %lld streams x %lld, %zu windows/epoch (seq_len %lld, validseqlen %lld)%s\n",
      o.data.c_str(), static_cast<long long>(train.numel()), rate_unit(kind), static_cast<long long>(o.batch_size),
      static_cast<long long>(train.size(1)), windows_per_epoch, static_cast<long long>(o.seq_len),
      static_cast<long long>(o.validseqlen),
      o.model != "lstm"                      ? ""
      : carries_state(o.model, o.lstm_state) ? "; the LSTM's state carried from window to window (--lstm_state carry)"
                                             : "; every window from a zero state (--lstm_state reset)");
  if (!o.resume.empty())
    say("resumed from %s at epoch %lld, batch %lld, step %lld\n", o.resume.c_str(), static_cast<long long>(st.epoch),
        static_cast<long long>(st.next_batch), static_cast<long long>(st.step));
}

// The training step's policies from the flags (nn/trainer.h).
nn::TrainerOptions trainer_options(const TrainOptions& o, const Tensor& train_src, dist::Comm& comm, bool say, bool tty) {
  return {.clip = o.clip, .graph = parse_graph_mode(o.cuda_graph), .graph_batch = {train_src.size(0), o.seq_len},
          .graph_batch_options = train_src.options(), .comm = &comm, .profile_steps = o.profile, .trace = o.trace,
          .debug_sync = o.debug_sync, .stop_on_signals = true, .say = say, .tty = tty,
          .bad_loss_note = "stopping before the update. " +
                           (o.save.empty() ? std::string("") : "The last checkpoint " + last_path(o.save) + " is intact.")};
}

// How an epoch's batch loop ended.
enum class EpochEnd { done, max_steps, interrupted };

// The epoch's batches from st.next_batch on: each one step, then its progress, log,
// evaluation and save lines as their intervals fall. `hist` is the history each window
// reads before the positions it scores.
EpochEnd train_epoch(nn::Trainer& trainer, TrainRun& run, TrainState& st, const TrainOptions& o,
                     const std::vector<Window>& wins, const Tensor& train_src, int64_t hist, int world) {
  for (int64_t bi = st.next_batch; bi < static_cast<int64_t>(wins.size()); ++bi) {
    if (trainer.stop_requested()) return EpochEnd::interrupted;
    if (o.max_steps > 0 && st.step >= o.max_steps) return EpochEnd::max_steps;
    const Window& w = wins[bi];
    trainer.step(nn::Batch{.input = train_src.narrow(1, w.start, w.len),
                           .target = train_src.narrow(1, w.start + 1, w.len),
                           .items = (w.len - hist) * train_src.size(0) * world,  // the whole batch's, over all ranks
                           .epoch = st.epoch, .number = bi + 1});
    st.step = trainer.steps();
    st.next_batch = bi + 1;
    run.progress(trainer, bi + 1);
    if (trainer.interval_steps() == o.log_interval || st.step == o.max_steps)
      run.log_line(trainer.end_interval(), bi + 1);
    if (o.eval_interval > 0 && st.step % o.eval_interval == 0 && st.step != o.max_steps) run.eval_line(trainer);
    if (!o.save.empty() && o.save_every > 0 && st.step % o.save_every == 0) {
      trainer.read_losses();  // never save past a bad step
      run.save_last(st);
    }
  }
  return EpochEnd::done;
}

}  // namespace

int run_train(TrainOptions o) {
  // Data parallelism: this process is one rank of comm (nn/distributed.h); rank 0
  // prints, writes the metrics and saves checkpoints, every rank trains.
  dist::Comm& comm = dist::Comm::world();
  const int world = comm.size(), rank = comm.rank();
  const bool writer = rank == 0;
  prepare_options(o, comm);
  const Device device = program::resolve_device(o.device, o.tokens == "word" ? "wordlm" : "charlm");
  const Autocast precision(precision_for(o.precision, device));  // the whole run, training and evaluation
  apply_cuda_backends(o.conv_impl, o.lstm_impl, o.deterministic, device);
  const Console say{!o.quiet && writer};
  const std::string metrics_path = prepare_outputs(o, writer, say);

  const Tokens kind = parse_tokens(o.tokens);
  Corpus corpus = load_corpus(o.data, kind);
  const Splits data = batchify_splits(o, corpus);
  const Tensor& train = data.train;
  const std::vector<Window> wins = windows(train.size(1), o.seq_len, o.validseqlen);
  TrainStart start = start_training(o, corpus, wins.size(), device);
  nn::CharLM& model = *start.model;
  TrainState& st = start.state;
  say_run(say, o, model, corpus, kind, device, train, wins.size(), st);
  // The training split on the device once, so a batch is a slice of it there.
  // Data-parallel: this rank's equal share of the streams; dropout draws its
  // slice of the whole batch's masks (Generator::set_shard), so N ranks draw
  // what one process would.
  const int64_t local_batch = o.batch_size / world;
  const Tensor train_src = (world > 1 ? train.narrow(0, rank * local_batch, local_batch) : train).to(device);
  if (comm.launched()) model.dropout_generator().set_shard(static_cast<uint64_t>(rank), static_cast<uint64_t>(world));
  // --lstm_state carry: each of this rank's streams carries its LSTM state
  // from window to window (carry.h); resumed mid-epoch, from the checkpoint's.
  std::optional<CarriedState> carry;
  if (carries_state(o.model, o.lstm_state)) {
    carry.emplace(model, train_src.size(0));
    carry->set_shard(rank * local_batch, o.batch_size);
    if (st.next_batch > 0) carry->load(start.carried, "--resume " + o.resume);
  }
  TrainRun run(o, model, *start.opt, corpus.vocab, st, data.valid, data.test, wins.size(), writer,
               carry ? &*carry : nullptr);
  const int64_t hist = o.seq_len - o.validseqlen;  // the history each window reads before the positions it scores
  nn::Trainer trainer;
  trainer.setup(model, *start.opt, device,
                [&](const nn::Batch& b) {
                  if (carry) return cross_entropy(carry->forward(b.input), b.target);  // every position
                  const int64_t scored = b.input.size(1) - hist;  // the last `scored` positions only
                  return cross_entropy(model.forward(b.input, scored), b.target.narrow(1, hist, scored));
                },
                trainer_options(o, train_src, comm, say.on, run.tty()), st.step);
  if (comm.launched())
    say("data-parallel: %d processes (%s), %lld of the %lld streams each, gradients all-reduced in %lld buckets (%s)\n",
        world, comm.launcher().c_str(), static_cast<long long>(local_batch), static_cast<long long>(o.batch_size),
        static_cast<long long>(trainer.grad_buckets()),
        device.is_cuda() ? (dist::built_with_nccl() ? "NCCL" : "MPI through host memory") : "MPI");

  for (; st.epoch <= o.epochs; ++st.epoch) {
    model.train();
    if (carry && st.next_batch == 0) carry->reset();  // every stream starts from zeros
    const EpochEnd end = train_epoch(trainer, run, st, o, wins, train_src, hist, world);
    if (end == EpochEnd::interrupted) return run.interrupted(trainer.interrupt(), true);
    const bool stop = end == EpochEnd::max_steps;
    trainer.end_epoch(stop);  // before the evaluation and saves, which are no steps
    if (trainer.stop_requested()) return run.interrupted(trainer.interrupt(), true);
    run.end_epoch(!stop);
    if (stop || (o.max_steps > 0 && st.step >= o.max_steps)) break;  // no empty extra epoch at the limit
  }
  if (trainer.stop_requested()) return run.interrupted(trainer.interrupt(), false);  // during the last epoch end
  trainer.finish();
  run.done(metrics_path);
  return 0;
}

int run_eval(const EvalOptions& o) {
  using namespace limits;
  check("--seq_len", o.seq_len, 1, kMaxSeqLen);
  check("--validseqlen", o.validseqlen, 1, kMaxSeqLen);
  check("--batch_size", o.batch_size, 1, kMaxBatch);
  check("--max_batches", o.max_batches, 0, kMaxCount, " (0: all)");
  check("--threads", o.threads, 0, kMaxThreads, " (0: the default)");
  TCN_CHECK(o.split == "valid" || o.split == "test" || o.split == "train", "--split ", o.split,
            ": expected train, valid or test");
  if (o.threads > 0) set_num_threads(o.threads);
  const Device device = program::resolve_device(o.device, "charlm");
  const Autocast precision(precision_for(o.precision, device));
  program::apply_conv_impl(o.conv_impl, device);
  nn::LoadedCharLM m = load_model_file(o.checkpoint, "--checkpoint",
                                       ModelFileOptions{.data = o.data, .vocab_file = o.vocab_file,
                                                        .tokens = o.tokens, .allow_extra = o.allow_extra})
                           .loaded;
  Vocab vocab = Vocab::from_tokens(m.vocab, parse_tokens(checkpoint_tokens(m.file.metadata)));
  // An LSTM trained carrying its state is evaluated so (unless --lstm_state says otherwise), through
  // the whole split; its windows do not overlap.
  const std::string protocol =
      o.lstm_state.empty() ? trained_lstm_state(m.file.metadata, "--checkpoint " + o.checkpoint) : o.lstm_state;
  const bool carry = carries_state(m.model->kind(), protocol);
  int64_t seq_len = o.seq_len, validseqlen = o.validseqlen;
  if (carry) carry_windows(seq_len, validseqlen, o.seq_len_given, o.validseqlen_given);
  TCN_CHECK(validseqlen <= seq_len, "--validseqlen ", validseqlen, " must be in [1, --seq_len = ", seq_len, "]");
  const std::string file = o.data + "/ptb." + o.split + ".txt";
  const std::string text = read_data_file(file);
  Tensor source = batchify(vocab.encode(text, file), o.batch_size, seq_len, file);
  m.model->to(device);
  auto t0 = Clock::now();
  double loss = evaluate(*m.model, source, seq_len, validseqlen, o.max_batches, carry);  // sharded under mpirun
  // Finite weights can still overflow: a non-finite loss is an error, never a score.
  TCN_CHECK(std::isfinite(loss), o.checkpoint, " ", o.split, ": the loss is ", loss,
            " (the model's outputs overflow on this data); no score");
  if (dist::Comm::world().rank() == 0)
    std::printf("%s %s: loss %.4f | %s %.4f | %.1f s%s\n", o.checkpoint.c_str(), o.split.c_str(), loss,
                score_name(vocab.kind), score(vocab.kind, loss),
                std::chrono::duration<double>(Clock::now() - t0).count(),
                m.model->kind() != "lstm" ? "" : carry ? " | state carried (--lstm_state carry)"
                                                       : " | every window from zeros (--lstm_state reset)");
  return 0;
}

}  // namespace charlm
