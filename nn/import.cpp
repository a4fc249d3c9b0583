#include "nn/import.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "core/error.h"
#include "nn/checkpoint.h"
#include "nn/layers.h"
#include "nn/models.h"
#include "ops/ops.h"

namespace tcn::nn {

namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// A conv saved without weight norm, as weight norm's (v, g) with the same function: v = weight, g = each
// output channel's norm. A channel that is all zeros (norm under 1e-30) would give 0/0 in weight norm's
// forward: there v becomes a unit vector and g = 0, so the weight is 0 there too and training can move it.
std::pair<Tensor, Tensor> weight_norm_split(const Tensor& w) {
  Tensor g = norm_except_dim0(w);
  const std::vector<double> norms = g.to(DType::F64).contiguous().to_vector<double>();
  if (std::all_of(norms.begin(), norms.end(), [](double n) { return n > 1e-30; })) return {w, g};
  const int64_t C = w.size(0), per = w.numel() / C;
  std::vector<double> v = w.to(DType::F64).contiguous().to_vector<double>(), gv = norms;
  for (int64_t c = 0; c < C; ++c) {
    if (norms[static_cast<size_t>(c)] > 1e-30) continue;
    std::fill(v.begin() + c * per, v.begin() + (c + 1) * per, 1.0 / std::sqrt(static_cast<double>(per)));
    gv[static_cast<size_t>(c)] = 0.0;
  }
  return {from_vector(v, w.shape()).to(w.dtype()), from_vector(gv, g.shape()).to(g.dtype())};
}

bool same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), static_cast<size_t>(x.numel()) * dtype_size(x.dtype())) == 0;
}

// "tcn.network.<N>.<rest>" -> N and rest; false when the name is not of that form.
bool network_level(const std::string& name, int64_t* level, std::string* rest) {
  const std::string p = "tcn.network.";
  if (!starts_with(name, p)) return false;
  size_t i = p.size(), j = i;
  while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
  if (j == i || j >= name.size() || name[j] != '.' || j - i > 6) return false;
  *level = std::stoll(name.substr(i, j - i));
  *rest = name.substr(j + 1);
  return true;
}

// Our name for one of the file's names, and the variant it was written in ("" when it is ours).
std::pair<std::string, std::string> our_name(const std::string& name, const std::string& kind) {
  std::string n = weight_norm_name(name), variant;
  if (n != name) variant = "weight norm as a parametrization (PyTorch >= 2.1)";
  int64_t level = 0;
  std::string rest;
  if (kind == "tcn" && network_level(n, &level, &rest)) {
    const std::string head = "tcn.network." + std::to_string(level) + ".";
    if (starts_with(rest, "net.0.")) {
      n = head + "conv1." + rest.substr(6);
      variant = "locuslab's aliases (net.0 = conv1, net.4 = conv2)";
    } else if (starts_with(rest, "net.4.")) {
      n = head + "conv2." + rest.substr(6);
      variant = "locuslab's aliases (net.0 = conv1, net.4 = conv2)";
    }
  }
  if (kind == "tcn" && n == "decoder.weight") {
    n = "encoder.weight";
    variant = "the tied weight under decoder.weight";
  }
  return {n, variant};
}

void check_size(const std::string& path, const char* flag, int64_t given, int64_t found, const std::string& from) {
  TCN_CHECK(given == 0 || given == found, path, ": --", flag, " ", given, " was given, but the file's tensors say ",
            found, " (", from, ")");
}

// Which char-LM the tensors are: "tcn" (tcn.network.*) or "lstm" (rnn.weight_ih_l*).
std::string model_kind(const SafetensorsContents& file, const ImportOptions& o) {
  std::string kind;
  for (const auto& [name, t] : file.tensors) {
    if (starts_with(name, "tcn.network.")) kind = "tcn";
    if (starts_with(name, "rnn.weight_ih_l") && kind.empty()) kind = "lstm";
  }
  TCN_CHECK(!kind.empty(), file.path, ": its ", file.tensors.size(),
            " tensors fit no model: a TCN char-LM has tcn.network.*, an LSTM char-LM rnn.weight_ih_l0 (e.g. '",
            file.tensors.empty() ? std::string("none") : file.tensors.front().first, "')");
  TCN_CHECK(o.model.empty() || o.model == kind, file.path, ": --model ", o.model, " was given, but the tensors are a ",
            kind, " char-LM's");
  return kind;
}

// Our name -> (tensor, the file's name for it).
using OurTensors = std::map<std::string, std::pair<Tensor, std::string>>;

// Every tensor under our name; two names of one parameter must agree. `variants`
// collects the naming variants met (reported to the user).
OurTensors under_our_names(const SafetensorsContents& file, const std::string& kind, std::set<std::string>& variants) {
  OurTensors ours;
  for (const auto& [name, t] : file.tensors) {
    auto [n, variant] = our_name(name, kind);
    if (!variant.empty()) variants.insert(variant);
    auto it = ours.find(n);
    if (it == ours.end()) {
      ours.emplace(n, std::make_pair(t, name));
      continue;
    }
    const auto& [other, other_name] = it->second;
    TCN_CHECK(same_values(t, other), file.path, ": '", other_name, "' ", other.shape(), " and '", name, "' ", t.shape(),
              " are two names of one parameter (", n, ") but hold different values");
  }
  return ours;
}

// Convs saved without weight norm: weight_v = weight, weight_g = its norms (the same function).
void split_plain_conv_weights(OurTensors& ours, const std::string& path, std::set<std::string>& variants) {
  for (auto it = ours.begin(); it != ours.end();) {
    int64_t level = 0;
    std::string rest;
    const std::string n = it->first;
    if (!network_level(n, &level, &rest) || (rest != "conv1.weight" && rest != "conv2.weight")) {
      ++it;
      continue;
    }
    const std::string stem = n.substr(0, n.size() - std::strlen("weight"));
    TCN_CHECK(!ours.count(stem + "weight_v") && !ours.count(stem + "weight_g"), path, ": '", it->second.second,
              "' and a weight-normed '", stem, "weight_v/g' both hold ", stem.substr(0, stem.size() - 1),
              "'s weight: which one is meant is ambiguous");
    const Tensor w = it->second.first;
    TCN_CHECK(w.dim() == 3, path, ": '", it->second.second, "' has shape ", w.shape(),
              ", a conv weight is [out, in, kernel]");
    const std::string from = it->second.second;
    it = ours.erase(it);
    const auto [v, g] = weight_norm_split(w);
    ours.emplace(stem + "weight_v", std::make_pair(v, from));
    ours.emplace(stem + "weight_g", std::make_pair(g, from + " (its norms)"));
    variants.insert("convs without weight norm (weight_g set to each channel's norm)");
  }
}

// The model's configuration, read off the tensors' shapes and checked against
// the sizes the user gave (0: not given).
nlohmann::json config_from_shapes(const OurTensors& ours, const std::string& kind, const ImportOptions& o,
                                  const std::string& path) {
  auto dims = [&](const std::string& n, int64_t d) {
    auto it = ours.find(n);
    TCN_CHECK(it != ours.end(), path, ": no '", n, "' (nor any other name of it): not a complete ", kind,
              " char-LM state_dict");
    TCN_CHECK(it->second.first.dim() == d, path, ": '", it->second.second, "' has shape ", it->second.first.shape(),
              ", expected ", d, " dimensions");
    return it->second.first.shape();
  };
  const Shape emb = dims("encoder.weight", 2);
  const int64_t vocab = emb[0], emsize = emb[1];
  check_size(path, "vocab_size", o.vocab_size, vocab, "encoder.weight " + shape_str(emb));
  check_size(path, "emsize", o.emsize, emsize, "encoder.weight " + shape_str(emb));
  if (kind == "tcn") {
    int64_t levels = 0;
    for (const auto& [n, t] : ours) {
      int64_t level = 0;
      std::string rest;
      if (network_level(n, &level, &rest)) levels = std::max(levels, level + 1);
    }
    const Shape w0 = dims("tcn.network.0.conv1.weight_v", 3);
    // The char_cnn TCN: levels - 1 levels of nhid channels, the last back to emsize (the tied decoder).
    const int64_t nhid = levels > 1 ? w0[0] : (o.nhid > 0 ? o.nhid : emsize), ksize = w0[2];
    const std::string from = "tcn.network.0.conv1.weight_v " + shape_str(w0);
    check_size(path, "levels", o.levels, levels, "tcn.network.0 .. " + std::to_string(levels - 1));
    if (levels > 1) check_size(path, "nhid", o.nhid, nhid, from);
    check_size(path, "ksize", o.ksize, ksize, from);
    return TCNConfig{.vocab_size = vocab, .emsize = emsize, .nhid = nhid, .levels = levels, .ksize = ksize,
                     .dropout = 0.1, .emb_dropout = 0.1}
        .to_json();
  }
  int64_t layers = 0;
  while (ours.count("rnn.weight_ih_l" + std::to_string(layers))) ++layers;
  const Shape ih = dims("rnn.weight_ih_l0", 2);
  TCN_CHECK(ih[0] % 4 == 0, path, ": 'rnn.weight_ih_l0' has shape ", ih, ": its rows are 4 gates x hidden");
  const int64_t nhid = ih[0] / 4;
  check_size(path, "nhid", o.nhid, nhid, "rnn.weight_ih_l0 " + shape_str(ih) + " = 4 gates x hidden");
  check_size(path, "layers", o.layers, layers, "rnn.weight_ih_l0 .. l" + std::to_string(layers - 1));
  return LSTMConfig{.vocab_size = vocab, .emsize = emsize, .nhid = nhid, .layers = layers, .dropout = 0.1,
                    .emb_dropout = 0.1}
      .to_json();
}

// The model the shapes describe. A corrupt or hostile file (one small tensor
// named tcn.network.31.*) must not make us allocate a model far larger than
// the file: refused beyond twice the values it holds. Below that, the model is
// built and the check of every tensor (load_module) names exactly what is
// missing or misshapen.
std::unique_ptr<CharLM> build_model(const OurTensors& ours, const std::string& kind, const nlohmann::json& config,
                                    const std::string& path) {
  int64_t needed = 0, held = 0;
  try {
    needed = kind == "tcn" ? TCNConfig::from_json(config).parameter_count()
                           : LSTMConfig::from_json(config).parameter_count();
  } catch (const Error& e) {
    TCN_FAIL(path, ": the shapes describe a ", kind, " char-LM ", config.dump(), " that cannot be built: ", e.what());
  }
  for (const auto& [n, t] : ours) held += t.first.numel();
  TCN_CHECK(needed <= 2 * held, path, ": the shapes describe a ", kind, " char-LM ", config.dump(), " of ", needed,
            " parameters, but the file holds only ", held, " values: not a complete state_dict");
  try {
    return make_char_lm(kind, config, 0);
  } catch (const Error& e) {
    TCN_FAIL(path, ": the shapes describe a ", kind, " char-LM ", config.dump(), " that cannot be built: ", e.what());
  }
}

}  // namespace

bool is_tcn_checkpoint(const SafetensorsContents& file) {
  auto it = file.metadata.find("format");
  return it != file.metadata.end() && it->second == "tcn-checkpoint";
}

ImportedStateDict import_state_dict(const SafetensorsContents& file, const ImportOptions& o) {
  const std::string& path = file.path;
  ImportedStateDict out;
  out.kind = model_kind(file, o);
  std::set<std::string> variants;
  OurTensors ours = under_our_names(file, out.kind, variants);
  if (out.kind == "tcn") split_plain_conv_weights(ours, path, variants);
  out.config = config_from_shapes(ours, out.kind, o, path);
  out.model = build_model(ours, out.kind, out.config, path);
  // The model's parameters, in its order; anything else is refused unless allowed.
  std::set<std::string> wanted;
  for (const auto& [n, p] : out.model->named_parameters()) {
    wanted.insert(n);
    if (auto it = ours.find(n); it != ours.end()) out.file.tensors.emplace_back(n, it->second.first);
  }
  std::vector<std::string> extra;
  for (const auto& [n, t] : ours)
    if (!wanted.count(n)) extra.push_back("'" + t.second + "' " + shape_str(t.first.shape()));
  if (!extra.empty() && !o.allow_extra) {
    std::string msg = path + ": " + std::to_string(extra.size()) + " tensor(s) that are no parameter of the " +
                      out.kind + " char-LM " + out.config.dump() + " (--allow_extra skips them):";
    for (const auto& e : extra) msg += "\n  " + e;
    TCN_FAIL(msg);
  }
  out.skipped = extra;
  out.read_as.assign(variants.begin(), variants.end());
  out.file.metadata = file.metadata;
  out.file.path = file.path;
  // Shapes, missing tensors: the same check and message as for our own checkpoints; the model is loaded.
  load_module(out.file, *out.model);
  return out;
}

std::string describe(const ImportedStateDict& s) {
  std::string line = "a PyTorch " + s.kind + " state_dict (no tcn metadata): ";
  const std::vector<const char*> keys = s.kind == "tcn"
                                           ? std::vector<const char*>{"vocab_size", "emsize", "nhid", "levels", "ksize"}
                                           : std::vector<const char*>{"vocab_size", "emsize", "nhid", "layers"};
  for (size_t i = 0; i < keys.size(); ++i) line += (i ? ", " : "") + std::string(keys[i]) + " " + s.config.at(keys[i]).dump();
  if (!s.read_as.empty()) {
    line += "; read";
    for (size_t i = 0; i < s.read_as.size(); ++i) line += (i ? ", " : " ") + s.read_as[i];
  }
  if (!s.skipped.empty()) line += "; skipped " + std::to_string(s.skipped.size()) + " extra tensor(s)";
  return line;
}

}  // namespace tcn::nn
