// charlm: character-level language models on Penn Treebank with tcn.
//
//   charlm train    --model tcn|lstm ...   train (the locuslab char_cnn recipe)
//   charlm eval     --checkpoint PATH      bits per character on a split
//   charlm generate --checkpoint PATH      sample text after a prompt
//   charlm bench                            time training steps, tcn vs PyTorch
//
// Every error is one line on stderr and a non-zero exit.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "bench.h"
#include "generate.h"
#include "train.h"

using namespace charlm;

int main(int argc, char** argv) {
  CLI::App app{"charlm: TCN and LSTM character language models on Penn Treebank (tcn framework)"};
  app.require_subcommand(1);

  TrainOptions t;
  auto* train = app.add_subcommand("train", "Train a TCN or LSTM character LM");
  train->add_option("--model", t.model, "tcn or lstm")->capture_default_str()->check(CLI::IsMember({"tcn", "lstm"}));
  train->add_option("--batch_size", t.batch_size, "streams per batch")->capture_default_str();
  train->add_option("--seq_len", t.seq_len, "window length, history included")->capture_default_str();
  train->add_option("--validseqlen", t.validseqlen, "scored positions at the end of each window")->capture_default_str();
  train->add_option("--emsize", t.emsize, "embedding size")->capture_default_str();
  train->add_option("--nhid", t.nhid, "hidden channels (default 450 for tcn, 700 for lstm)");
  train->add_option("--levels", t.levels, "TCN levels (dilations 1, 2, 4, ...)")->capture_default_str();
  train->add_option("--ksize", t.ksize, "TCN kernel size")->capture_default_str();
  train->add_option("--layers", t.layers, "LSTM layers")->capture_default_str();
  train->add_option("--dropout", t.dropout, "dropout in the layers")->capture_default_str();
  train->add_option("--emb_dropout", t.emb_dropout, "dropout on the embedding")->capture_default_str();
  train->add_option("--lr", t.lr, "initial learning rate")->capture_default_str();
  train->add_option("--optim", t.optim, "SGD or Adam")->capture_default_str()->check(CLI::IsMember({"SGD", "Adam"}));
  train->add_option("--clip", t.clip, "gradient clipping norm (<= 0: off)")->capture_default_str();
  train->add_option("--epochs", t.epochs, "epochs")->capture_default_str();
  train->add_option("--max_steps", t.max_steps, "stop after this many steps (0: no limit)")->capture_default_str();
  train->add_option("--seed", t.seed, "random seed (init and dropout)")->capture_default_str();
  train->add_option("--log-interval,--log_interval", t.log_interval, "steps between log lines")->capture_default_str();
  train->add_option("--device", t.device, "auto, cpu or cuda[:N]")->capture_default_str();
  train->add_option("--data", t.data, "folder with ptb.{train,valid,test}.txt")->capture_default_str();
  train->add_option("--save", t.save, "best model checkpoint (.safetensors); the latest state goes to *.last.safetensors");
  train->add_option("--resume", t.resume, "continue exactly from a checkpoint written by --save");
  train->add_option("--init", t.init, "start from a checkpoint's weights (e.g. exported from PyTorch)");
  train->add_option("--threads", t.threads, "CPU threads (0: default)")->capture_default_str();
  train->add_option("--metrics", t.metrics, "metrics CSV (default runs/<model>.csv)");
  train->add_option("--eval_batch_size", t.eval_batch_size, "streams when evaluating")->capture_default_str();
  train->add_option("--eval_batches", t.eval_batches, "evaluate on at most this many windows (0: all)")->capture_default_str();
  train->add_flag("--quiet", t.quiet, "no log lines on stdout (metrics still go to the CSV)");
  train->add_option("--eval_interval", t.eval_interval, "also report valid bpc every N steps (0: epoch ends only)")->capture_default_str();
  train->add_option("--save_every", t.save_every, "also write the latest state every N steps (0: epoch ends only)")->capture_default_str();

  EvalOptions e;
  auto* eval = app.add_subcommand("eval", "Bits per character of a checkpoint on a split");
  eval->add_option("--checkpoint", e.checkpoint, "model checkpoint")->required();
  eval->add_option("--data", e.data, "folder with ptb.*.txt")->capture_default_str();
  eval->add_option("--split", e.split, "train, valid or test")->capture_default_str();
  eval->add_option("--seq_len", e.seq_len)->capture_default_str();
  eval->add_option("--validseqlen", e.validseqlen)->capture_default_str();
  eval->add_option("--batch_size", e.batch_size, "streams")->capture_default_str();
  eval->add_option("--max_batches", e.max_batches, "at most this many windows (0: all)")->capture_default_str();
  eval->add_option("--device", e.device)->capture_default_str();
  eval->add_option("--threads", e.threads)->capture_default_str();

  GenerateOptions g;
  auto* gen = app.add_subcommand("generate", "Sample characters from a checkpoint after a prompt");
  gen->add_option("--checkpoint", g.checkpoint, "model checkpoint")->required();
  gen->add_option("--prompt", g.prompt, "text to start from")->capture_default_str();
  gen->add_option("-n,--chars", g.n, "characters to generate")->capture_default_str();
  gen->add_option("--temperature", g.temperature, "softmax temperature (> 0)")->capture_default_str();
  gen->add_option("--seed", g.seed, "sampling seed")->capture_default_str();
  gen->add_flag("--full", g.full_recompute, "recompute the whole context for every character (slow; for checking)");
  gen->add_option("--threads", g.threads)->capture_default_str();

  BenchOptions b;
  auto* bench = app.add_subcommand("bench", "Time training steps of both models (and PyTorch's, when installed)");
  bench->add_option("--model", b.model, "tcn, lstm or both")->capture_default_str()->check(CLI::IsMember({"tcn", "lstm", "both"}));
  bench->add_option("--steps", b.steps, "timed steps")->capture_default_str();
  bench->add_option("--warmup", b.warmup, "untimed steps first")->capture_default_str();
  bench->add_option("--threads", b.threads, "CPU threads for both frameworks")->capture_default_str();
  bench->add_option("--device", b.device, "cpu, cuda[:N] or auto: where both frameworks train")->capture_default_str();
  bench->add_option("--batch_size", b.batch_size)->capture_default_str();
  bench->add_option("--seq_len", b.seq_len)->capture_default_str();
  bench->add_option("--validseqlen", b.validseqlen)->capture_default_str();
  bench->add_option("--torch", b.torch, "auto (run PyTorch when importable), off")->capture_default_str();
  bench->add_option("--python", b.python, "Python with PyTorch")->capture_default_str();
  bench->add_option("--generate_chars", b.generate_chars, "characters for the generation benchmark (0: skip)")->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  try {
    if (*train) return run_train(t);
    if (*eval) return run_eval(e);
    if (*gen) return run_generate(g);
    if (*bench) return run_bench(b, argv[0]);
  } catch (const std::exception& ex) {
    std::fflush(stdout);
    std::fprintf(stderr, "charlm: error: %s\n", ex.what());
    return 1;
  }
  return 0;
}
