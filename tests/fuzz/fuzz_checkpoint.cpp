// libFuzzer target: the checkpoint reader on arbitrary bytes. Any input must
// give a checkpoint or a tcn::Error; a crash, a sanitizer report, any other
// exception, a leak, a hang or a huge allocation is a finding.
//
//   tools/fuzz_checkpoint.sh 600      # build (clang-14), seed, fuzz 10 minutes
//
// Each input goes through the whole path `charlm train --resume` takes: the
// safetensors parser (header, shapes, offsets, checksums); the char-LM loader
// (metadata, config bounds, the parameter count against the file, the strict
// load into a freshly built model); the train_options / train_state checks;
// and the optimizer state (the "optim." tensors) loaded into SGD and Adam.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "examples/charlm/train.h"
#include "tcn/nn/import.h"
#include "tcn/nn/optim.h"

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
  return 0;
}
