// tcn_ckpt: small checkpoint utility, used by tools/reference/check_checkpoints.py
// to test that checkpoints move both ways between tcn and PyTorch.
//
//   tcn_ckpt roundtrip IN.safetensors OUT.safetensors
//       load a char-LM checkpoint strictly, write it back from the model
//   tcn_ckpt forward CKPT.safetensors TOKENS.safetensors OUT.safetensors
//       run the model (eval mode) on the int64 tensor "tokens" [B, T], write {"logits"}
//   tcn_ckpt info CKPT.safetensors
//       print the model kind, config, vocabulary size and parameter count
#include <cstdio>
#include <string>

#include "tcn/nn/models.h"

using namespace tcn;

static int usage() {
  std::fprintf(stderr,
               "usage: tcn_ckpt roundtrip IN OUT\n"
               "       tcn_ckpt forward CKPT TOKENS OUT\n"
               "       tcn_ckpt info CKPT\n");
  return 2;
}

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  const std::string cmd = argv[1];
  try {
    if (cmd == "roundtrip" && argc == 4) {
      nn::LoadedCharLM m = nn::load_char_lm(argv[2]);
      nn::save_char_lm(argv[3], *m.model, m.vocab);
    } else if (cmd == "forward" && argc == 5) {
      nn::LoadedCharLM m = nn::load_char_lm(argv[2]);
      m.model->eval();
      autograd::NoGrad ng;
      Tensor logits = m.model->forward(nn::load_safetensors(argv[3]).at("tokens"));
      nn::save_safetensors(argv[4], {{"logits", logits}});
    } else if (cmd == "info" && argc == 3) {
      nn::LoadedCharLM m = nn::load_char_lm(argv[2]);
      std::printf("model %s\nconfig %s\nvocabulary %zu characters\nparameters %lld\n", m.model->kind().c_str(),
                  m.model->config_json().dump().c_str(), m.vocab.size(),
                  static_cast<long long>(m.model->num_parameters()));
    } else {
      return usage();
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "tcn_ckpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
