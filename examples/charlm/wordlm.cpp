// wordlm: the TCN word-level language model on Penn Treebank (the paper's
// word-level PTB task), with the defaults of the locuslab word_cnn trainer:
// words and <eos> as tokens, embedding 600, 4 levels of 600 channels, kernel
// 3, dropout 0.45, embedding dropout 0.25, tied decoder, batch 16, windows of
// 80 words scoring the last 40, SGD lr 4 halved when valid loss stalls, clip
// 0.35, evaluation over 10 streams. Same subcommands and flags as charlm.
#include "cli.h"

int main(int argc, char** argv) {
  charlm::TrainOptions t;
  t.tokens = "word";
  t.batch_size = 16;
  t.seq_len = 80;
  t.validseqlen = 40;
  t.emsize = 600;
  t.nhid = 600;
  t.levels = 4;
  t.ksize = 3;
  t.dropout = 0.45;
  t.emb_dropout = 0.25;
  t.lr = 4.0;
  t.clip = 0.35;
  t.epochs = 100;
  t.eval_batch_size = 10;
  charlm::EvalOptions e;
  e.tokens = "word";
  e.seq_len = 80;
  e.validseqlen = 40;
  e.batch_size = 10;
  charlm::Program p{.name = "wordlm",
                    .description = "wordlm: the TCN word-level language model on Penn Treebank (tcn framework)",
                    .train_help = "Train the TCN word LM (locuslab word_cnn defaults)",
                    .train = t,
                    .eval = e,
                    .bench = false};
  return charlm::run_cli(argc, argv, p);
}
