// PyTorch state_dicts without our metadata (nn/import.h), as users save them:
// the files of tests/golden/foreign/, written by tools/reference/make_foreign.py
// with the official safetensors package from the published structures, each
// evaluated here against PyTorch's logits and loss; and every refusal.
#include <nlohmann/json.hpp>

#include <cmath>

#include "helpers.h"
#include "nn/checkpoint.h"
#include "nn/import.h"
#include "nn/models.h"
#include "nn/optim.h"

using namespace tcn;
using namespace tcn::nn;

namespace {

std::string foreign(const std::string& name) { return test::source_path("tests/golden/foreign/" + name); }

const SafetensorsContents& expected() {
  static const SafetensorsContents e = load_safetensors(foreign("expected.safetensors"));
  return e;
}

// The file imported, built, loaded and run in eval mode on the golden tokens:
// PyTorch's logits and mean cross-entropy within 1e-5 relative (float32 sums
// in another order; the bare convs' weight_g recomputed here adds one rounding).
ImportedStateDict check_against_pytorch(const std::string& file, const std::string& which) {
  INFO(file);
  ImportedStateDict imp = import_state_dict(load_safetensors(foreign(file)));
  REQUIRE(imp.model != nullptr);  // built from the config, its parameters loaded
  CharLM& model = *imp.model;
  model.eval();
  const Tensor tokens = expected().at("tokens");
  const int64_t T = tokens.size(1) - 1;
  Tensor logits = model.forward(tokens.narrow(1, 0, T));
  Tensor loss = cross_entropy(logits, tokens.narrow(1, 1, T));
  CHECK_CLOSE(logits, expected().at(which + "_logits"), 1e-6, 1e-5);
  CHECK_CLOSE(loss.reshape({1}), expected().at(which + "_loss"), 0, 1e-5);
  return imp;
}

bool has(const std::vector<std::string>& v, const std::string& part) {
  for (const auto& s : v)
    if (s.find(part) != std::string::npos) return true;
  return false;
}

// A copy of a golden file's tensors with edits, written without our metadata.
std::string write_variant(const test::TempDir& d, const std::string& from, const std::string& name,
                          const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
  auto tensors = load_safetensors(foreign(from)).tensors;
  edit(tensors);
  save_safetensors(d.file(name), tensors);
  return d.file(name);
}

}  // namespace

TEST_SUITE("checkpoint") {

TEST_CASE("PyTorch TCN state_dicts in every naming variant give PyTorch's logits and loss") {
  const nlohmann::json cfg = {{"vocab_size", 11}, {"emsize", 8}, {"nhid", 12}, {"levels", 3}, {"ksize", 3},
                              {"dropout", 0.1}, {"emb_dropout", 0.1}};
  // save_model kept one name of each alias pair, and decoder.weight for the tied weight.
  ImportedStateDict a = check_against_pytorch("tcn_save_model.safetensors", "tcn");
  CHECK(a.kind == "tcn");
  CHECK(a.config == cfg);
  CHECK(has(a.read_as, "tied weight under decoder.weight"));
  // The whole state_dict: every alias present and equal.
  ImportedStateDict b = check_against_pytorch("tcn_all_names.safetensors", "tcn");
  CHECK(has(b.read_as, "locuslab's aliases"));
  CHECK(b.config == cfg);
  // PyTorch >= 2.1's names for weight norm.
  ImportedStateDict c = check_against_pytorch("tcn_parametrized.safetensors", "tcn");
  CHECK(has(c.read_as, "parametrization"));
  // Plain conv weights (weight norm removed): read as weight_v with weight_g its norms.
  ImportedStateDict e = check_against_pytorch("tcn_bare.safetensors", "tcn_bare");
  CHECK(has(e.read_as, "without weight norm"));
  // The parameters land under our names, once each: the same set whatever the variant.
  auto names = [](const ImportedStateDict& s) {
    std::vector<std::string> n;
    for (const auto& [k, t] : s.file.tensors) n.push_back(k);
    return n;
  };
  CHECK(names(a) == names(b));
  CHECK(names(a) == names(c));
  CHECK(names(a) == names(e));
  CHECK(describe(c).find("a PyTorch tcn state_dict (no tcn metadata): ") == 0);
}

TEST_CASE("a PyTorch nn.LSTM char-LM state_dict gives PyTorch's logits and loss") {
  ImportedStateDict l = check_against_pytorch("lstm_save_model.safetensors", "lstm");
  CHECK(l.kind == "lstm");
  CHECK(l.config.at("layers") == 2);
  CHECK(l.config.at("nhid") == 12);
}

TEST_CASE("our checkpoints and foreign files are told apart") {
  test::TempDir d;
  TCNCharLM m(TCNConfig{.vocab_size = 3, .emsize = 4, .nhid = 5, .levels = 2, .ksize = 2}, 1);
  save_char_lm(d.file("ours.safetensors"), m, {"a", "b", "c"});
  CHECK(is_tcn_checkpoint(load_safetensors(d.file("ours.safetensors"))));
  CHECK_FALSE(is_tcn_checkpoint(load_safetensors(foreign("tcn_save_model.safetensors"))));
}

TEST_CASE("foreign state_dicts: ambiguous, incomplete or mismatched files are refused naming the tensor") {
  test::TempDir d;
  // Two names of one parameter with different values.
  std::string f = write_variant(d, "tcn_all_names.safetensors", "alias.safetensors", [](auto& t) {
    for (auto& [n, x] : t)
      if (n == "tcn.network.1.net.4.bias") x = add(x, 1.0);
  });
  CHECK_ERROR(import_state_dict(load_safetensors(f)),
              "'tcn.network.1.net.4.bias' [12] are two names of one parameter (tcn.network.1.conv2.bias) but hold "
              "different values");
  // The tied weight under both names, different.
  f = write_variant(d, "tcn_all_names.safetensors", "tied.safetensors", [](auto& t) {
    for (auto& [n, x] : t)
      if (n == "decoder.weight") x = mul(x, 2.0);
  });
  CHECK_ERROR(import_state_dict(load_safetensors(f)), "two names of one parameter (encoder.weight)");
  // A missing tensor (under any of its names).
  f = write_variant(d, "tcn_save_model.safetensors", "missing.safetensors", [](auto& t) {
    std::erase_if(t, [](const auto& p) { return p.first == "tcn.network.1.conv1.bias"; });
  });
  CHECK_ERROR(import_state_dict(load_safetensors(f)), "missing 'tcn.network.1.conv1.bias' [12]");
  f = write_variant(d, "tcn_save_model.safetensors", "no_embedding.safetensors", [](auto& t) {
    std::erase_if(t, [](const auto& p) { return p.first == "decoder.weight"; });
  });
  CHECK_ERROR(import_state_dict(load_safetensors(f)), "no 'encoder.weight' (nor any other name of it)");
  // Extra tensors: refused, or skipped with allow_extra (and the model still loads).
  f = write_variant(d, "lstm_save_model.safetensors", "extra.safetensors", [](auto& t) {
    t.emplace_back("rnn.weight_hr_l0", zeros({12, 3}));
    t.emplace_back("head.scale", zeros({1}));
  });
  CHECK_ERROR(import_state_dict(load_safetensors(f)),
              "2 tensor(s) that are no parameter of the lstm char-LM");
  CHECK_ERROR(import_state_dict(load_safetensors(f)), "'head.scale' [1]");
  ImportedStateDict skipped = import_state_dict(load_safetensors(f), ImportOptions{.allow_extra = true});
  CHECK(skipped.skipped.size() == 2);
  // A conv both bare and weight-normed.
  f = write_variant(d, "tcn_save_model.safetensors", "both.safetensors", [](auto& t) {
    t.emplace_back("tcn.network.0.conv1.weight", zeros({12, 8, 3}));
  });
  CHECK_ERROR(import_state_dict(load_safetensors(f)), "which one is meant is ambiguous");
  // Shapes that fit no model.
  f = write_variant(d, "lstm_save_model.safetensors", "odd.safetensors", [](auto& t) {
    for (auto& [n, x] : t)
      if (n == "rnn.weight_ih_l0") x = zeros({46, 8});
  });
  CHECK_ERROR(import_state_dict(load_safetensors(f)), "'rnn.weight_ih_l0' has shape [46, 8]: its rows are 4 gates");
  f = write_variant(d, "tcn_save_model.safetensors", "shape.safetensors", [](auto& t) {
    for (auto& [n, x] : t)
      if (n == "tcn.network.1.conv2.weight_v") x = zeros({12, 12, 2});
  });
  CHECK_ERROR(import_state_dict(load_safetensors(f)),
              "'tcn.network.1.conv2.weight_v' has shape [12, 12, 2], the model expects [12, 12, 3]");
  f = write_variant(d, "lstm_save_model.safetensors", "none.safetensors", [](auto& t) {
    for (auto& [n, x] : t) n = "model." + n;
  });
  CHECK_ERROR(import_state_dict(load_safetensors(f)), "tensors fit no model");
  // A small file naming a deep, wide model: refused before anything is allocated.
  f = write_variant(d, "tcn_save_model.safetensors", "deep.safetensors", [](auto& t) {
    for (auto& [n, x] : t)
      if (n == "tcn.network.0.conv1.weight_v") x = zeros({600, 8, 3});
    t.emplace_back("tcn.network.31.conv1.bias", zeros({1}));
  });
  CHECK_ERROR(import_state_dict(load_safetensors(f)), "but the file holds only");
  // Sizes the user gave that the shapes contradict.
  const SafetensorsContents tcn = load_safetensors(foreign("tcn_save_model.safetensors"));
  CHECK_ERROR(import_state_dict(tcn, ImportOptions{.nhid = 450}),
              "--nhid 450 was given, but the file's tensors say 12 (tcn.network.0.conv1.weight_v [12, 8, 3])");
  CHECK_ERROR(import_state_dict(tcn, ImportOptions{.levels = 4}), "--levels 4 was given, but the file's tensors say 3");
  CHECK_ERROR(import_state_dict(tcn, ImportOptions{.model = "lstm"}), "--model lstm was given, but the tensors are a tcn");
  CHECK(import_state_dict(tcn, ImportOptions{.model = "tcn", .vocab_size = 11, .emsize = 8, .nhid = 12, .levels = 3,
                                             .ksize = 3})
            .kind == "tcn");
}

TEST_CASE("a bare conv with an all-zero output channel imports as the same function, and trains") {
  // weight_g = 0 = the channel's norm would make weight norm's forward 0/0: the import gives that
  // channel a unit v and g = 0, so its weight is exactly 0, as in the file.
  test::TempDir d;
  const std::string name = "tcn.network.0.conv1.weight";
  Tensor original;
  const std::string f = write_variant(d, "tcn_bare.safetensors", "zero_channel.safetensors", [&](auto& t) {
    for (auto& [n, x] : t)
      if (n == name) {
        std::vector<float> v = x.contiguous().template to_vector<float>();
        const int64_t per = x.numel() / x.size(0);
        std::fill(v.begin() + 2 * per, v.begin() + 3 * per, 0.0f);  // output channel 2
        x = from_vector(v, x.shape());
        original = x;
      }
  });
  REQUIRE(original.defined());
  ImportedStateDict imp = import_state_dict(load_safetensors(f));
  CharLM& model = *imp.model;
  Tensor g, v;
  for (const auto& [n, t] : model.named_parameters()) {
    if (n == "tcn.network.0.conv1.weight_g") g = t;
    if (n == "tcn.network.0.conv1.weight_v") v = t;
  }
  REQUIRE((g.defined() && v.defined()));
  // The effective weight g v / |v|, channel by channel, against the file's.
  const std::vector<float> gv = g.contiguous().to_vector<float>(), vv = v.contiguous().to_vector<float>(),
                           w = original.contiguous().to_vector<float>();
  const int64_t C = v.size(0), per = v.numel() / C;
  for (int64_t c = 0; c < C; ++c) {
    double n2 = 0;
    for (int64_t i = 0; i < per; ++i) n2 += double(vv[c * per + i]) * vv[c * per + i];
    INFO("channel ", c);
    REQUIRE(n2 > 0);
    for (int64_t i = 0; i < per; ++i)
      CHECK(std::abs(gv[c] * vv[c * per + i] / std::sqrt(n2) - w[c * per + i]) <= 1e-6 * (1 + std::abs(w[c * per + i])));
  }
  CHECK(gv[2] == 0.0f);
  // Training from it: finite losses, step after step (it failed with "loss is -nan" at step 2).
  model.train();
  SGD opt(model.parameters(), 0.5);
  const Tensor tokens = expected().at("tokens");
  const int64_t T = tokens.size(1) - 1;
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    const Tensor loss = cross_entropy(model.forward(tokens.narrow(1, 0, T)), tokens.narrow(1, 1, T));
    INFO("step ", step + 1);
    CHECK(std::isfinite(loss.item()));
    autograd::backward(loss);
    opt.step();
  }
}

}  // TEST_SUITE
