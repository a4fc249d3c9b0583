// libFuzzer target: the checkpoint reader on arbitrary bytes. Any input must
// give a checkpoint or a tcn::Error; a crash, a sanitizer report, any other
// exception, a leak, a hang or a huge allocation is a finding.
//
//   tools/fuzz_checkpoint.sh 600      # build (clang-14), seed, fuzz 10 minutes
//
// Each input goes through the whole path `charlm train --resume` takes: the
// safetensors parser (header, shapes, offsets, checksums); the char-LM loader
// (metadata, config bounds, the parameter count against the file, the strict
// load into a freshly built model); the train_options / train_state checks,
// made with the flags the file's own train_options name (so that they get past
// the first comparison); the optimizer state (the "optim." tensors) loaded into
// SGD and Adam; and an LSTM's carried state ("carry.h", "carry.c").
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "examples/charlm/carry.h"
#include "examples/charlm/train.h"
#include "nn/import.h"
#include "nn/optim.h"

namespace {

void load_optimizer_state(const tcn::nn::SafetensorsContents& file, tcn::nn::Optimizer& opt) {
  tcn::nn::NamedTensors state;
  for (const auto& [name, t] : file.tensors)
    if (name.rfind("optim.", 0) == 0) state.emplace_back(name.substr(6), t);
  try {
    opt.load_state(state);
  } catch (const tcn::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tcn::nn::LoadedCharLM loaded;
  try {
    tcn::nn::SafetensorsContents file =
        tcn::nn::parse_safetensors(std::string_view(reinterpret_cast<const char*>(data), size), "input");
    if (!tcn::nn::is_tcn_checkpoint(file)) {
      // A PyTorch state_dict without our metadata (nn/import.h), read as charlm eval reads it.
      for (bool extra : {false, true}) {
        try {
          (void)tcn::nn::import_state_dict(file, tcn::nn::ImportOptions{.allow_extra = extra});
        } catch (const tcn::Error&) {
        }
      }
      return 0;
    }
    loaded = tcn::nn::load_char_lm(std::move(file), charlm::kTrainingTensors);
  } catch (const tcn::Error&) {
    return 0;  // rejected with a message: the expected outcome for most inputs
  }
  charlm::TrainOptions o;
  o.resume = "input";
  o.model = loaded.model->kind();
  // The run that would resume it: the streams, windows and protocol its train_options name, where readable.
  try {
    const nlohmann::json j = nlohmann::json::parse(loaded.file.metadata.at("train_options"));
    o.batch_size = j.at("batch_size").get<int64_t>();
    o.seq_len = j.at("seq_len").get<int64_t>();
    o.validseqlen = j.at("validseqlen").get<int64_t>();
    if (j.contains("lstm_state")) o.lstm_state = j.at("lstm_state").get<std::string>();
  } catch (const std::exception&) {
  }
  for (const char* optim : {"SGD", "Adam"}) {
    o.optim = optim;
    try {
      charlm::check_resume_metadata(o, loaded.file.metadata, 100);
    } catch (const tcn::Error&) {
    }
  }
  tcn::nn::SGD sgd(loaded.model->parameters(), 1.0);
  load_optimizer_state(loaded.file, sgd);
  tcn::nn::Adam adam(loaded.model->parameters(), 1.0);
  load_optimizer_state(loaded.file, adam);
  if (o.model == "lstm" && o.batch_size >= 1 && o.batch_size <= 64) {
    try {
      charlm::CarriedState carry(*loaded.model, o.batch_size);
      carry.load(loaded.file.tensors, "input");
    } catch (const tcn::Error&) {
    }
  }
  return 0;
}
