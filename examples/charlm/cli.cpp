// The command line of the language-model trainers (main.cpp: charlm, on
// characters; wordlm.cpp: wordlm, on words). Each program gives its name and
// its reference trainer's defaults; the subcommands and flags are the same.
//
//   charlm train    --model tcn|lstm ...   train (the locuslab char_cnn recipe)
//   charlm eval     --checkpoint PATH      bits per character (ppl for words) on a split
//   charlm generate --checkpoint PATH      sample text after a prompt
//   charlm bench                            time training steps, tcn vs PyTorch
//
// Every error is one line on stderr and a non-zero exit.
#include "cli.h"

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "bench.h"
#include "flags.h"
#include "generate.h"
#include "examples/common/program.h"
#include "nn/distributed.h"

namespace charlm {

// --conv_impl, --lstm_impl, --deterministic: which path conv1d and the LSTM take (core/backends.h).
void add_backend_options(CLI::App* cmd, std::string& conv_impl, std::string& lstm_impl, bool& deterministic) {
  program::add_conv_impl_option(cmd, conv_impl);
  cmd->add_option("--lstm_impl", lstm_impl, "CUDA LSTM layers: fused (ours, on cuBLAS) or cudnn")
      ->capture_default_str()
      ->check(CLI::IsMember({"fused", "cudnn"}));
  cmd->add_flag("--deterministic", deterministic,
                "with --conv_impl cudnn: deterministic cuDNN algorithms only, as auto always uses (our own CUDA "
                "paths are deterministic)");
}

// eval and generate: a PyTorch state_dict without our metadata (model_file.h).
void add_foreign_options(CLI::App* cmd, std::string& vocab_file, bool& allow_extra) {
  cmd->add_option("--vocab", vocab_file,
                  "a PyTorch state_dict's vocabulary: a JSON list of strings in index order (default: its 'vocab' "
                  "metadata, else the characters of --data, sorted)");
  cmd->add_flag("--allow_extra", allow_extra, "a PyTorch state_dict: skip tensors that are no parameter of the model");
}

// A subcommand and the options its run checks after parsing (whether given).
struct Subcommand {
  CLI::App* app = nullptr;
  CLI::Option* seq_len = nullptr;
  CLI::Option* validseqlen = nullptr;
  CLI::Option* nhid = nullptr;
};

// `train`: every flag of TrainOptions, with the program's defaults in `t`.
Subcommand add_train(CLI::App& app, const Program& program, TrainOptions& t) {
  Subcommand cmd;
  CLI::App* train = cmd.app = app.add_subcommand("train", program.train_help);
  train->add_option("--model", t.model, "tcn or lstm")->capture_default_str()->check(CLI::IsMember({"tcn", "lstm"}));
  train->add_option("--batch_size", t.batch_size, "streams per batch, in [1, 100000]")->capture_default_str();
  cmd.seq_len = train->add_option("--seq_len", t.seq_len,
                                    "window length, history included, in [1, 1000000] (an LSTM carrying its state: "
                                    "--validseqlen, no history)")
                      ->capture_default_str();
  cmd.validseqlen =
      train->add_option("--validseqlen", t.validseqlen, "scored positions at the end of each window, in [1, --seq_len]")
          ->capture_default_str();
  train->add_option("--lstm_state", t.lstm_state,
                    "the LSTM's protocol: carry (each stream's state passes, detached, to its next window: truncated "
                    "BPTT, as PyTorch users train LSTMs; windows do not overlap) or reset (every window from zeros, "
                    "the TCN's protocol)")
      ->capture_default_str()
      ->check(CLI::IsMember({"carry", "reset"}));
  train->add_option("--emsize", t.emsize, "embedding size, in [1, 65536]")->capture_default_str();
  cmd.nhid = t.nhid > 0 ? train->add_option("--nhid", t.nhid, "hidden channels, in [1, 65536]")->capture_default_str()
                          : train->add_option("--nhid", t.nhid,
                                              "hidden channels, in [1, 65536] (default 450 for tcn, 700 for lstm)");
  train->add_option("--levels", t.levels, "TCN levels (dilations 1, 2, 4, ...), in [1, 32]")->capture_default_str();
  train->add_option("--ksize", t.ksize, "TCN kernel size, in [1, 64]")->capture_default_str();
  train->add_option("--layers", t.layers, "LSTM layers, in [1, 64]")->capture_default_str();
  train->add_option("--dropout", t.dropout, "dropout in the layers, in [0, 1)")->capture_default_str();
  train->add_option("--emb_dropout", t.emb_dropout, "dropout on the embedding, in [0, 1)")->capture_default_str();
  train->add_option("--lr", t.lr, "initial learning rate, in (0, 1e30]")->capture_default_str();
  train->add_option("--optim", t.optim, "SGD or Adam")->capture_default_str()->check(CLI::IsMember({"SGD", "Adam"}));
  train->add_option("--precision", t.precision,
                    "fp32; bf16: bf16 GEMM operands with fp32 accumulation, fp32 weights and optimizer (CPU and "
                    "CUDA); tf32 (CUDA): TF32 tensor-core GEMMs")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}));
  train->add_option("--clip", t.clip, "gradient clipping norm, in [0, 1e6] (0: off)")->capture_default_str();
  train->add_option("--epochs", t.epochs, "epochs, in [1, 1000000]")->capture_default_str();
  train->add_option("--max_steps", t.max_steps, "stop after this many steps, in [0, 1e12] (0: no limit)")->capture_default_str();
  train->add_option("--seed", t.seed, "random seed (init and dropout), in [0, 2^64 - 1]")->capture_default_str()->check(program::kSeed);
  train->add_option("--log-interval,--log_interval", t.log_interval, "steps between log lines, in [1, 1e12]")->capture_default_str();
  train->add_option("--device", t.device, "auto, cpu or cuda[:N]")->capture_default_str();
  train->add_option("--data", t.data, "folder with ptb.{train,valid,test}.txt")->capture_default_str();
  train->add_option("--save", t.save, "best model checkpoint (.safetensors); the latest state goes to *.last.safetensors");
  train->add_option("--resume", t.resume, "continue exactly from a checkpoint written by --save");
  train->add_option("--init", t.init,
                    "start from a checkpoint's weights: ours, or a PyTorch state_dict in safetensors (sizes from "
                    "its shapes, checked against the flags; vocabulary: the data's)");
  train->add_flag("--allow_extra", t.allow_extra,
                  "--init from a PyTorch state_dict: skip tensors that are no parameter of the model");
  train->add_option("--threads", t.threads, "CPU threads, in [0, 1024] (0: default)")->capture_default_str();
  train->add_option("--metrics", t.metrics, "metrics CSV (default runs/<model>.csv, runs/word_<model>.csv for words)");
  train->add_option("--eval_batch_size", t.eval_batch_size, "streams when evaluating, in [1, 100000]")->capture_default_str();
  train->add_option("--eval_batches", t.eval_batches, "evaluate on at most this many windows, in [0, 1e12] (0: all)")->capture_default_str();
  train->add_flag("--quiet", t.quiet, "no log lines on stdout (metrics still go to the CSV)");
  train->add_flag("--debug_sync", t.debug_sync,
                  "wait for the device after every step, so a bad loss or index is reported at its own step "
                  "(default: at the next log line, evaluation or save)");
  train->add_option("--cuda_graph", t.cuda_graph,
                    "on CUDA, capture the training step once as a CUDA graph and replay it: auto (eager, with the "
                    "reason, when it cannot be captured), on (an error then) or off")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "on", "off"}));
  add_backend_options(train, t.conv_impl, t.lstm_impl, t.deterministic);
  train->add_option("--profile", t.profile,
                    "profile this many steps after two warm-up steps and print where the time goes: per op, "
                    "module and phase, in [0, 1e12] (0: off); profiled steps run eagerly on CUDA")
      ->capture_default_str();
  train->add_option("--trace", t.trace,
                    "write the profiled steps as a Chrome trace (Perfetto, chrome://tracing); implies --profile 3");
  train->add_option("--eval_interval", t.eval_interval, "also report valid bpc every N steps, in [0, 1e12] (0: epoch ends only)")->capture_default_str();
  train->add_option("--save_every", t.save_every, "also write the latest state every N steps, in [0, 1e12] (0: epoch ends only)")->capture_default_str();

  return cmd;
}

// `eval`: a checkpoint's loss on a split.
Subcommand add_eval(CLI::App& app, EvalOptions& e) {
  Subcommand cmd;
  CLI::App* eval = cmd.app =
      app.add_subcommand("eval", "Loss and bits per character (perplexity for words) of a checkpoint on a split");
  eval->add_option("--checkpoint", e.checkpoint, "model checkpoint")->required();
  eval->add_option("--data", e.data, "folder with ptb.*.txt")->capture_default_str();
  eval->add_option("--split", e.split, "train, valid or test")->capture_default_str();
  cmd.seq_len =
      eval->add_option("--seq_len", e.seq_len, "window length, in [1, 1000000] (an LSTM carrying its state: --validseqlen)")
          ->capture_default_str();
  cmd.validseqlen =
      eval->add_option("--validseqlen", e.validseqlen, "scored positions per window, in [1, --seq_len]")->capture_default_str();
  eval->add_option("--lstm_state", e.lstm_state,
                   "an LSTM: carry (the state passes from window to window through the whole split) or reset (every "
                   "window from zeros); default: as the checkpoint was trained (carry for a PyTorch state_dict)")
      ->check(CLI::IsMember({"carry", "reset"}));
  eval->add_option("--batch_size", e.batch_size, "streams, in [1, 100000]")->capture_default_str();
  eval->add_option("--max_batches", e.max_batches, "at most this many windows, in [0, 1e12] (0: all)")->capture_default_str();
  eval->add_option("--device", e.device)->capture_default_str();
  eval->add_option("--precision", e.precision, "fp32, tf32 (CUDA) or bf16")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}));
  eval->add_option("--threads", e.threads, "CPU threads, in [0, 1024] (0: default)")->capture_default_str();
  program::add_conv_impl_option(eval, e.conv_impl);
  add_foreign_options(eval, e.vocab_file, e.allow_extra);

  return cmd;
}

// `generate`: sampling after a prompt.
CLI::App* add_generate(CLI::App& app, GenerateOptions& g) {
  CLI::App* gen =
      app.add_subcommand("generate", "Sample characters (words, for a word model) from a checkpoint after a prompt");
  gen->add_option("--checkpoint", g.checkpoint, "model checkpoint")->required();
  gen->add_option("--prompt", g.prompt, "text to start from")->capture_default_str();
  gen->add_option("-n,--chars", g.n, "characters (words) to generate, in [0, 100000000]")->capture_default_str();
  gen->add_option("--temperature", g.temperature, "softmax temperature, in (0, 1000]")->capture_default_str();
  gen->add_option("--seed", g.seed, "sampling seed, in [0, 2^64 - 1]")->capture_default_str()->check(program::kSeed);
  gen->add_flag("--full", g.full_recompute, "recompute the whole context for every token (slow; for checking)");
  gen->add_option("--threads", g.threads, "CPU threads, in [0, 1024] (0: default)")->capture_default_str();
  program::add_conv_impl_option(gen, g.conv_impl);
  gen->add_option("--data", g.data, "folder with ptb.*.txt: the vocabulary of a PyTorch state_dict")
      ->capture_default_str();
  add_foreign_options(gen, g.vocab_file, g.allow_extra);

  return gen;
}

// `bench`: training steps of both character models timed, against PyTorch's.
CLI::App* add_bench(CLI::App& app, const Program& program, BenchOptions& b) {
  CLI::App* bench =
      app.add_subcommand("bench", "Time training steps of both character models (and PyTorch's, when installed)");
  bench->group(program.bench ? "Subcommands" : "");  // hidden where the program's models are not the ones benched
  bench->add_option("--model", b.model, "tcn, lstm or both")->capture_default_str()->check(CLI::IsMember({"tcn", "lstm", "both"}));
  bench->add_option("--steps", b.steps, "timed steps, in [1, 1000000]")->capture_default_str();
  bench->add_option("--warmup", b.warmup, "untimed steps first, in [0, 1000000]")->capture_default_str();
  bench->add_option("--threads", b.threads, "CPU threads for both frameworks, in [1, 1024]")->capture_default_str();
  bench->add_option("--device", b.device, "cpu, cuda[:N] or auto: where both frameworks train")->capture_default_str();
  bench->add_option("--batch_size", b.batch_size, "streams, in [1, 100000]")->capture_default_str();
  bench->add_option("--seq_len", b.seq_len, "window length, in [1, 1000000]")->capture_default_str();
  bench->add_option("--validseqlen", b.validseqlen, "scored positions, in [1, --seq_len]")->capture_default_str();
  bench->add_option("--precision", b.precision,
                    "fp32, bf16, tf32 (CUDA) or both (fp32 and the device's reduced precisions: bf16 on a CPU, tf32 and "
                    "bf16 on CUDA): a row each")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "tf32", "bf16", "both"}));
  bench->add_option("--cuda_graph", b.cuda_graph, "on CUDA, our steps as one CUDA graph each: auto, on or off")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "on", "off"}));
  add_backend_options(bench, b.conv_impl, b.lstm_impl, b.deterministic);
  bench->add_option("--profile", b.profile,
                    "after the timed steps, profile this many more steps of each of our rows and print where the "
                    "time goes: per op, module and phase, in [0, 1000000] (0: off)")
      ->capture_default_str();
  bench->add_option("--trace", b.trace,
                    "with --profile (3 steps if not given): write a Chrome trace (Perfetto, chrome://tracing) per "
                    "row, named FILE with -<model>-<precision>-<impl> before its extension");
  bench->add_option("--cpu_gemm", b.cpu_gemm, "CPU GEMMs for our steps: both (a row each), onednn or openblas")
      ->capture_default_str()
      ->check(CLI::IsMember({"both", "onednn", "openblas"}));
  bench->add_option("--torch", b.torch, "auto (run PyTorch when importable), off")->capture_default_str();
  bench->add_option("--python", b.python, "Python with PyTorch")->capture_default_str();
  bench->add_option("--generate_chars", b.generate_chars, "characters for the generation benchmark, in [0, 100000000] (0: skip)")->capture_default_str();

  return bench;
}

int run_cli(int argc, char** argv, const Program& program) {
  CLI::App app{program.description, program.name};
  app.require_subcommand(1);
  TrainOptions t = program.train;
  EvalOptions e = program.eval;
  GenerateOptions g;
  BenchOptions b;
  const Subcommand train = add_train(app, program, t), eval = add_eval(app, e);
  CLI::App* gen = add_generate(app, g);
  CLI::App* bench = add_bench(app, program, b);

  return program::run(program.name, app, argc, argv, [&] {
    // -1 is run_train's "not given" (the model's default); a value given here is checked.
    if (train.nhid->count() > 0) limits::check("--nhid", t.nhid, 1, limits::kMaxWidth);
    if (*train.app && carries_state(t.model, t.lstm_state))
      carry_windows(t.seq_len, t.validseqlen, train.seq_len->count() > 0, train.validseqlen->count() > 0);
    e.seq_len_given = eval.seq_len->count() > 0;
    e.validseqlen_given = eval.validseqlen->count() > 0;
    if (*train.app) return run_train(t);
    if (*eval.app) return run_eval(e);
    if (*gen) return run_generate(g);
    TCN_CHECK(program.bench, "bench times the character models: use charlm bench");
    return run_bench(b, argv[0]);
  });
}

}  // namespace charlm
