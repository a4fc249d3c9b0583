// The model in a file given to eval, generate or train --init: one of our
// checkpoints, or a PyTorch state_dict saved without our metadata (by the
// official safetensors library; nn/import.h reads its names and shapes).
#pragma once

#include <string>

#include "nn/import.h"
#include "nn/models.h"

namespace charlm {

struct ModelFileOptions {
  // For a state_dict without our metadata, where its vocabulary comes from, in
  // this order: vocab_file (a JSON list of strings, index order), the file's
  // "vocab" metadata, else the data folder, as the trainer builds it.
  std::string data = "data/ptb", vocab_file;
  std::string tokens = "char";  // what the data's vocabulary is made of: "char" or "word" (wordlm)
  bool allow_extra = false;     // skip tensors that are no parameter of the model
};

struct ModelFile {
  tcn::nn::LoadedCharLM loaded;
  bool foreign = false;  // a PyTorch state_dict: config from its shapes, vocabulary from elsewhere
};

// Loads `path` (named `flag` in errors). A foreign file prints one line saying
// what was read and, when the vocabulary came from the data, a warning that its
// order must be the one the model was trained with. `sizes` are the sizes the
// user gave, checked against a foreign file's shapes.
ModelFile load_model_file(const std::string& path, const std::string& flag, const ModelFileOptions& o,
                          const tcn::nn::ImportOptions& sizes = {});

}  // namespace charlm
