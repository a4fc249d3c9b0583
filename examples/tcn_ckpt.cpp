// tcn_ckpt: small checkpoint utility, used by tools/reference/check_checkpoints.py
// to test that checkpoints move both ways between tcn and PyTorch.
//
//   tcn_ckpt roundtrip IN.safetensors OUT.safetensors
//       load a char-LM checkpoint strictly, write it back from the model
//   tcn_ckpt forward CKPT.safetensors TOKENS.safetensors OUT.safetensors
//       run the model (eval mode) on the int64 tensor "tokens" [B, T], write {"logits"}
//   tcn_ckpt info CKPT.safetensors
//       print the model kind, config, vocabulary size and parameter count
//   tcn_ckpt tcn-init KWARGS_JSON SEED OUT.safetensors
//       an nn::TCN from pytorch-tcn keyword arguments, its initial state under
//       pytorch-tcn's names, the kwargs in __metadata__ "kwargs"
//   tcn_ckpt tcn-forward CKPT.safetensors INPUT.safetensors OUT.safetensors
//       an nn::TCN checkpoint (a state_dict with "kwargs" metadata, from tcn-init
//       or PyTorch) in eval mode on INPUT's "x" (and "emb.0", "emb.1", ...), write {"y"}
//   tcn_ckpt compare A.safetensors B.safetensors RTOL
//       the same tensor names in both, and for each max|a - b| / max|b|;
//       exit 1 when any exceeds RTOL (tests/cli_mpi.sh: data-parallel vs one process)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "nn/checkpoint.h"
#include "nn/models.h"

using namespace tcn;

static int usage() {
  std::fprintf(stderr,
               "usage: tcn_ckpt roundtrip IN OUT\n"
               "       tcn_ckpt forward CKPT TOKENS OUT\n"
               "       tcn_ckpt info CKPT\n"
               "       tcn_ckpt tcn-init KWARGS_JSON SEED OUT\n"
               "       tcn_ckpt tcn-forward CKPT INPUT OUT\n"
               "       tcn_ckpt compare A B RTOL\n");
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
    } else if (cmd == "tcn-init" && argc == 5) {
      const auto opts = nn::TCNOptions::from_json(nn::TCNOptions::parse(argv[2], "tcn_ckpt: the options"));
      Generator init(std::strtoull(argv[3], nullptr, 10)), drop(0);
      nn::TCN tcn(opts, init, drop);
      nn::save_module(argv[4], tcn, {{"kwargs", opts.to_json().dump()}});
    } else if (cmd == "tcn-forward" && argc == 5) {
      const nn::SafetensorsContents ckpt = nn::load_safetensors(argv[2]);
      TCN_CHECK(ckpt.metadata.count("kwargs"), argv[2], ": no \"kwargs\" in its metadata (the TCN's options)");
      Generator init(0), drop(0);
      nn::TCN tcn(nn::TCNOptions::from_json(nn::TCNOptions::parse(ckpt.metadata.at("kwargs"), std::string(argv[2]) + ": kwargs")), init, drop);
      nn::load_module(ckpt, tcn);
      tcn.eval();
      autograd::NoGrad ng;
      const nn::SafetensorsContents in = nn::load_safetensors(argv[3]);
      TensorList embs;
      for (size_t i = 0;; ++i) {
        const std::string name = "emb." + std::to_string(i);
        if (std::none_of(in.tensors.begin(), in.tensors.end(), [&](const auto& t) { return t.first == name; })) break;
        embs.push_back(in.at(name));
      }
      nn::save_safetensors(argv[4], {{"y", tcn.forward(in.at("x"), embs).contiguous()}});
    } else if (cmd == "compare" && argc == 5) {
      const nn::SafetensorsContents a = nn::load_safetensors(argv[2]), b = nn::load_safetensors(argv[3]);
      const double rtol = std::strtod(argv[4], nullptr);
      TCN_CHECK(a.tensors.size() == b.tensors.size(), argv[2], " holds ", a.tensors.size(), " tensors, ", argv[3], " ",
                b.tensors.size());
      double worst = 0;
      std::string worst_name;
      for (const auto& [name, ta] : a.tensors) {
        const Tensor& tb = b.at(name);
        TCN_CHECK(ta.shape() == tb.shape(), name, ": shapes ", ta.shape(), " and ", tb.shape());
        const std::vector<double> va = ta.to(DType::F64).to_vector<double>(), vb = tb.to(DType::F64).to_vector<double>();
        double diff = 0, scale = 0;
        for (size_t i = 0; i < va.size(); ++i) {
          diff = std::max(diff, std::abs(va[i] - vb[i]));
          scale = std::max(scale, std::abs(vb[i]));
        }
        const double rel = scale > 0 ? diff / scale : diff;
        if (rel >= worst) worst = rel, worst_name = name;
      }
      std::printf("%zu tensors; largest relative difference %.3g (%s); tolerance %.3g: %s\n", a.tensors.size(), worst,
                  worst_name.c_str(), rtol, worst <= rtol ? "PASS" : "FAIL");
      return worst <= rtol ? 0 : 1;
    } else {
      return usage();
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "tcn_ckpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
