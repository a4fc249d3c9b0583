// The command line shared by the language-model trainers: a program is its
// name and its reference trainer's defaults (main.cpp: charlm, characters,
// locuslab char_cnn; wordlm.cpp: wordlm, words, locuslab word_cnn).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "train.h"

namespace charlm {

struct Program {
  const char* name;         // in --help and in "NAME: error: ..." lines
  const char* description;
  const char* train_help;   // what `train` trains
  TrainOptions train;       // the defaults of `train`
  EvalOptions eval;         // the defaults of `eval`
  bool bench = true;        // `bench` (it times the character models)
};

// Parses the command line and runs the subcommand; returns the exit status.
// Every error is one line on stderr.
int run_cli(int argc, char** argv, const Program& program);

}  // namespace charlm
