// charlm: the TCN and LSTM character language models on Penn Treebank, with
// the defaults of the locuslab char_cnn trainer (examples/charlm/train.h).
#include "cli.h"

int main(int argc, char** argv) {
  charlm::Program p{.name = "charlm",
                    .description = "charlm: TCN and LSTM character language models on Penn Treebank (tcn framework)",
                    .train_help = "Train a TCN or LSTM character LM",
                    .train = {},
                    .eval = {}};
  return charlm::run_cli(argc, argv, p);
}
