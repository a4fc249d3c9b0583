// PyTorch state_dicts that are not our checkpoints: a char-LM saved by the
// official safetensors library (save_model, save_file) from locuslab's char_cnn
// TCN or an nn.LSTM char-LM, with none of our metadata. The names PyTorch writes
// for the same parameter vary, and each variant is read here:
//
//   tcn.network.N.net.0.* / net.4.*   locuslab's TemporalBlock registers conv1 and
//                                     conv2 twice (as themselves and inside `net`);
//                                     save_model keeps one name of each pair
//   decoder.weight / encoder.weight   the tied weight, under either name (or both)
//   X.parametrizations.weight.original0 / original1
//                                     weight norm in PyTorch >= 2.1 (g and v), for
//                                     X.weight_g / X.weight_v
//   X.weight (a conv without weight norm)
//                                     becomes weight_v = X.weight, weight_g = its
//                                     norm per output channel (the same function)
//
// Two names of one parameter must hold the same values. The model and its sizes
// are read from the shapes; a state_dict holds no dropout rates and no
// vocabulary, so those come from the caller (the data, as the trainer builds its
// vocabulary).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/models.h"
#include "nn/safetensors.h"

namespace tcn::nn {

struct ImportOptions {
  bool allow_extra = false;  // tensors that are no parameter of the model are skipped, not an error
  // What the user said (empty / 0: nothing), checked against what the shapes show.
  std::string model;
  int64_t vocab_size = 0, emsize = 0, nhid = 0, levels = 0, ksize = 0, layers = 0;
};

struct ImportedStateDict {
  std::string kind;          // "tcn" or "lstm"
  nlohmann::json config;     // from the shapes; dropouts are the reference's defaults (0.1, 0.1)
  SafetensorsContents file;  // each parameter once, under our names; the file's own metadata
  std::unique_ptr<CharLM> model;  // built from config, its parameters loaded from file
  std::vector<std::string> read_as;  // the naming variants met ("weight norm as a parametrization", ...)
  std::vector<std::string> skipped;  // tensors left out under allow_extra
};

// Whether the file is one of ours (metadata "format": "tcn-checkpoint").
bool is_tcn_checkpoint(const SafetensorsContents& file);

// The file's tensors under our names and the config its shapes describe. An
// error names the file, the tensor and the shapes: two different tensors under
// names of one parameter, a missing tensor, tensors that are no parameter
// (unless allow_extra), shapes that fit no model, sizes that differ from the
// options'.
ImportedStateDict import_state_dict(const SafetensorsContents& file, const ImportOptions& options = {});

// One line: the model, its sizes and the naming variants read.
std::string describe(const ImportedStateDict& imported);

}  // namespace tcn::nn
