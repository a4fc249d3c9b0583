// End-to-end checks against PyTorch: the golden files written by
// tools/reference/make_golden.py hold a model's weights, a batch, PyTorch's
// logits, loss, every parameter gradient, and 5 steps of three optimizers.
// Tolerances (float32 on both sides, different summation orders):
//   logits, loss, gradients: relative 1e-4 (atol 1e-6 for values near zero)
//   5 optimizer steps: losses and grad norms relative 1e-4, final parameters relative 1e-4.
#include <nlohmann/json.hpp>

#include "cuda_compare.h"
#include "helpers.h"
#include "nn/checkpoint.h"
#include "nn/models.h"
#include "nn/optim.h"

using namespace tcn;
using namespace tcn::nn;

namespace {

std::string golden_path(const std::string& name) { return test::source_path("tests/golden/" + name); }

// The file's tensors under `prefix`, with the prefix removed.
SafetensorsContents with_prefix(const SafetensorsContents& f, const std::string& prefix) {
  SafetensorsContents out;
  out.path = f.path + " [" + prefix + "*]";
  for (const auto& [name, t] : f.tensors)
    if (name.rfind(prefix, 0) == 0 && name.find('.', prefix.size()) != std::string::npos)
      out.tensors.emplace_back(name.substr(prefix.size()), t);
  return out;
}

struct Golden {
  SafetensorsContents file;
  nlohmann::json config, training;
  std::string model;
  int64_t seq_len, validseqlen;
};

Golden load_golden(const std::string& name) {
  Golden g{load_safetensors(golden_path(name)), {}, {}, {}, 0, 0};
  REQUIRE(g.file.metadata.at("format") == "tcn-golden");
  REQUIRE(g.file.metadata.at("version") == "1");
  g.model = g.file.metadata.at("model");
  g.config = nlohmann::json::parse(g.file.metadata.at("config"));
  g.training = nlohmann::json::parse(g.file.metadata.at("training"));
  g.seq_len = g.config.at("seq_len");
  g.validseqlen = g.config.at("validseqlen");
  return g;
}

Tensor scored_loss(CharLM& model, const Golden& g, Tensor* logits_out = nullptr) {
  const Device dev = model.parameters()[0].device();
  const Tensor tokens = g.file.at("tokens").to(dev);
  const Tensor targets = g.file.at("targets").to(dev);
  Tensor logits = model.forward(tokens);
  if (logits_out) *logits_out = logits;
  int64_t hist = g.seq_len - g.validseqlen;
  return cross_entropy(logits.narrow(1, hist, g.validseqlen), targets.narrow(1, hist, g.validseqlen));
}

void check_against_golden(const std::string& name, Device device = Device::cpu()) {
  Golden g = load_golden(name);
  INFO("golden file ", name, " on ", device);
  auto model = make_char_lm(g.model, g.config, 1);
  model->to(device);
  load_module(with_prefix(g.file, "param."), *model);
  model->eval();

  Tensor logits;
  Tensor loss = scored_loss(*model, g, &logits);
  CHECK_CLOSE(logits.to(Device::cpu()), g.file.at("logits"), 1e-6, 1e-4);
  CHECK_CLOSE(loss.to(Device::cpu()), g.file.at("loss"), 1e-6, 1e-4);
  loss.backward();
  for (const auto& named : model->named_parameters()) {
    const std::string& pname = named.first;  // named: INFO captures it (clang 14 cannot capture a binding)
    const Tensor& p = named.second;
    INFO("gradient of ", pname);
    REQUIRE(p.grad().defined());
    CHECK_CLOSE(p.grad().to(Device::cpu()), g.file.at("grad." + pname), 1e-6, 1e-4);
  }

  const double clip = g.training.at("clip");
  const int steps = g.training.at("steps");
  for (auto& item : g.training.at("optimizers").items()) {
    const std::string oname = item.key();  // named: INFO captures it (clang 14 cannot capture a binding)
    const auto& o = item.value();
    INFO("optimizer ", oname);
    load_module(with_prefix(g.file, "param."), *model);
    model->zero_grad();
    std::unique_ptr<Optimizer> opt;
    if (o.at("type") == "SGD")
      opt = std::make_unique<SGD>(model->parameters(), o.at("lr"), o.value("momentum", 0.0), o.value("weight_decay", 0.0));
    else
      opt = std::make_unique<Adam>(model->parameters(), o.at("lr"));
    std::vector<double> losses, norms;
    for (int s = 0; s < steps; ++s) {
      opt->zero_grad();
      Tensor l = scored_loss(*model, g);
      l.backward();
      norms.push_back(clip_grad_norm(model->parameters(), clip));
      losses.push_back(l.item());
      opt->step();
    }
    CHECK_CLOSE(from_vector(losses, {steps}), g.file.at(oname + ".losses"), 1e-6, 1e-4);
    CHECK_CLOSE(from_vector(norms, {steps}), g.file.at(oname + ".grad_norms"), 1e-6, 1e-4);
    for (const auto& named : model->named_parameters()) {
      const std::string& pname = named.first;
      const Tensor& p = named.second;
      INFO("final value of ", pname);
      CHECK_CLOSE(p.detach().to(Device::cpu()), g.file.at(oname + ".final." + pname), 1e-6, 1e-4);
    }
  }
}

}  // namespace

TEST_SUITE("golden") {

TEST_CASE("TCN char-LM matches PyTorch: logits, loss, gradients, 5 steps of SGD, SGD+momentum, Adam") {
  check_against_golden("tcn_small.safetensors");
}

TEST_CASE("LSTM char-LM (2 layers) matches PyTorch") { check_against_golden("lstm_small.safetensors"); }

TEST_CASE("TCN char-LM with every conv in the Winograd domain (--conv_impl winograd) matches PyTorch too") {
  const test::Backends on(test::conv_on(ConvImpl::Winograd));
  check_against_golden("tcn_small.safetensors");
}

TEST_CASE("both models match PyTorch on CUDA too" * doctest::skip(!cuda::is_available())) {
  check_against_golden("tcn_small.safetensors", Device::cuda(0));
  check_against_golden("lstm_small.safetensors", Device::cuda(0));
}

TEST_CASE("parameter counts of the reference configurations") {
  TCNCharLM tcn(TCNConfig{}, 1);
  CHECK(tcn.num_parameters() == 2222100);
  int64_t conv = 0;
  for (const auto& [name, p] : tcn.named_parameters())
    if (name.rfind("tcn.", 0) == 0) conv += p.numel();
  CHECK(conv == 2217050);
  CHECK(tcn.decoder->weight.shares_storage(tcn.encoder->weight));
  LSTMCharLM lstm(LSTMConfig{}, 1);
  CHECK(lstm.num_parameters() == 2285650);
}

}  // TEST_SUITE
