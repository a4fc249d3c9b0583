#include "nn/models.h"

#include <algorithm>
#include <type_traits>

namespace tcn::nn {

// ---- configs -------------------------------------------------------------------------
// Each config lists its fields once; the JSON conversions in both directions walk that list.
namespace {

template <class F>
void tcn_fields(TCNConfig& c, F&& f) {
  f("vocab_size", c.vocab_size), f("emsize", c.emsize), f("nhid", c.nhid), f("levels", c.levels);
  f("ksize", c.ksize), f("dropout", c.dropout), f("emb_dropout", c.emb_dropout);
}

template <class F>
void lstm_fields(LSTMConfig& c, F&& f) {
  f("vocab_size", c.vocab_size), f("emsize", c.emsize), f("nhid", c.nhid), f("layers", c.layers);
  f("dropout", c.dropout), f("emb_dropout", c.emb_dropout);
}

template <class Config, class Fields>
nlohmann::json fields_to_json(Config c, Fields fields) {
  nlohmann::json j;
  fields(c, [&](const char* key, const auto& v) { j[key] = v; });
  return j;
}

// Every field is required: a checkpoint or golden file always carries all of them.
template <class Config, class Fields>
Config fields_from_json(const nlohmann::json& j, Fields fields, const char* what) {
  Config c;
  try {
    TCN_CHECK(j.is_object(), what, " config ", j.dump(), " is not a JSON object");
    fields(c, [&](const char* key, auto& v) {
      using T = std::decay_t<decltype(v)>;
      const auto& x = j.at(key);
      // Integers must be JSON integers (no 46.5 truncated to 46, no 1e300).
      if constexpr (std::is_integral_v<T>)
        TCN_CHECK(x.is_number_integer(), what, " config: ", key, " must be an integer, got ", x.dump());
      else
        TCN_CHECK(x.is_number(), what, " config: ", key, " must be a number, got ", x.dump());
      v = x.get<T>();
    });
  } catch (const nlohmann::json::exception& e) {
    TCN_FAIL(what, " config ", j.dump(), " is invalid: ", e.what());
  }
  c.validate();
  return c;
}

void check_field(const char* what, const char* key, int64_t v, int64_t lo, int64_t hi) {
  TCN_CHECK(v >= lo && v <= hi, what, " config: ", key, " must be in [", lo, ", ", hi, "], got ", v);
}
void check_dropout(const char* what, const char* key, double p) {
  TCN_CHECK(p >= 0 && p < 1, what, " config: ", key, " must be in [0, 1), got ", p);
}
void check_parameters(const char* what, int64_t n) {
  TCN_CHECK(n <= limits::kMaxParameters, what, " config describes ", n, " parameters (", n * 4 >> 20,
            " MiB of fp32), more than the limit of ", limits::kMaxParameters);
}

}  // namespace

nlohmann::json TCNConfig::to_json() const { return fields_to_json(*this, [](auto& c, auto&& f) { tcn_fields(c, f); }); }
TCNConfig TCNConfig::from_json(const nlohmann::json& j) {
  return fields_from_json<TCNConfig>(j, [](auto& c, auto&& f) { tcn_fields(c, f); }, "TCN");
}
void TCNConfig::validate() const {
  check_field("TCN", "vocab_size", vocab_size, 1, limits::kMaxVocab);
  check_field("TCN", "emsize", emsize, 1, limits::kMaxWidth);
  check_field("TCN", "nhid", nhid, 1, limits::kMaxWidth);
  check_field("TCN", "levels", levels, 1, limits::kMaxLevels);
  check_field("TCN", "ksize", ksize, 1, limits::kMaxKsize);
  check_dropout("TCN", "dropout", dropout);
  check_dropout("TCN", "emb_dropout", emb_dropout);
  check_parameters("TCN", parameter_count());
}
int64_t TCNConfig::parameter_count() const {
  // Within the limits above no term overflows (at most 2^44 in all).
  int64_t n = vocab_size * emsize + vocab_size;  // encoder (= decoder) weight, decoder bias
  for (int64_t i = 0; i < levels; ++i) {
    const int64_t in = i == 0 ? emsize : nhid, out = i == levels - 1 ? emsize : nhid;
    n += out + out * in * ksize + out;    // conv1: weight_g, weight_v, bias
    n += out + out * out * ksize + out;   // conv2
    if (in != out) n += out * in + out;   // downsample
  }
  return n;
}
nlohmann::json LSTMConfig::to_json() const {
  return fields_to_json(*this, [](auto& c, auto&& f) { lstm_fields(c, f); });
}
LSTMConfig LSTMConfig::from_json(const nlohmann::json& j) {
  return fields_from_json<LSTMConfig>(j, [](auto& c, auto&& f) { lstm_fields(c, f); }, "LSTM");
}
void LSTMConfig::validate() const {
  check_field("LSTM", "vocab_size", vocab_size, 1, limits::kMaxVocab);
  check_field("LSTM", "emsize", emsize, 1, limits::kMaxWidth);
  check_field("LSTM", "nhid", nhid, 1, limits::kMaxWidth);
  check_field("LSTM", "layers", layers, 1, limits::kMaxLayers);
  check_dropout("LSTM", "dropout", dropout);
  check_dropout("LSTM", "emb_dropout", emb_dropout);
  check_parameters("LSTM", parameter_count());
}
int64_t LSTMConfig::parameter_count() const {
  int64_t n = vocab_size * emsize + nhid * vocab_size + vocab_size;  // encoder, decoder weight and bias
  for (int64_t l = 0; l < layers; ++l) n += 4 * nhid * ((l == 0 ? emsize : nhid) + nhid + 2);  // W_ih, W_hh, biases
  return n;
}

// ---- the models ------------------------------------------------------------------------
TCNCharLM::TCNCharLM(const TCNConfig& c, uint64_t seed) : cfg(c) {
  c.validate();
  Generator init(seed);
  dropout_gen_ = Generator(seed ^ 0x5eedd20b0u);
  encoder = register_module("encoder", std::make_shared<Embedding>(c.vocab_size, c.emsize, init));
  drop = register_module("drop", std::make_shared<Dropout>(c.emb_dropout, dropout_gen_));
  std::vector<int64_t> channels(c.levels - 1, c.nhid);
  channels.push_back(c.emsize);  // the last level returns to emsize so the decoder can share the embedding
  tcn = register_module("tcn", std::make_shared<TemporalConvNet>(c.emsize, channels, c.ksize, c.dropout, init,
                                                                 dropout_gen_));
  decoder = register_module("decoder", std::make_shared<Linear>(c.emsize, c.vocab_size, init,
                                                                Linear::Options{.tied = encoder->weight}));
  autograd::NoGrad ng;
  uniform_(encoder->weight, -0.1, 0.1, init);
  zero_(decoder->bias);
}

Tensor TCNCharLM::forward(const Tensor& tokens, int64_t keep_last) {
  const auto scope = profile_scope();
  TCN_CHECK(tokens.dim() == 2 && tokens.dtype() == DType::I64, "TCN: tokens must be int64 [batch, time], got ",
            tokens.dtype(), " ", tokens.shape());
  // Only the positions the kept outputs can see are embedded and convolved.
  const int64_t T = tokens.size(1);
  const int64_t need = keep_last > 0 ? std::min(T, keep_last + tcn->receptive_field() - 1) : T;
  Tensor emb = drop->forward(encoder->forward(tokens.narrow(1, T - need, need)));  // [B, need, emsize]
  return decoder->forward(tcn->forward(emb, keep_last));                           // [B, kept, vocab]
}

LSTMCharLM::LSTMCharLM(const LSTMConfig& c, uint64_t seed) : cfg(c) {
  c.validate();
  Generator init(seed);
  dropout_gen_ = Generator(seed ^ 0x5eedd20b0u);
  encoder = register_module("encoder", std::make_shared<Embedding>(c.vocab_size, c.emsize, init));
  drop = register_module("drop", std::make_shared<Dropout>(c.dropout, dropout_gen_));
  rnn = register_module("rnn", std::make_shared<LSTM>(c.emsize, c.nhid, c.layers, init));
  decoder = register_module("decoder", std::make_shared<Linear>(c.nhid, c.vocab_size, init));
  autograd::NoGrad ng;
  uniform_(encoder->weight, -0.1, 0.1, init);
}

Tensor LSTMCharLM::forward(const Tensor& tokens, int64_t keep_last) {
  return forward_with_state(tokens, std::nullopt, keep_last).first;
}

std::pair<Tensor, LSTM::State> LSTMCharLM::forward_with_state(const Tensor& tokens, const std::optional<LSTM::State>& state,
                                                              int64_t keep_last) {
  const auto scope = profile_scope();
  TCN_CHECK(tokens.dim() == 2 && tokens.dtype() == DType::I64, "LSTM: tokens must be int64 [batch, time], got ",
            tokens.dtype(), " ", tokens.shape());
  Tensor emb = encoder->forward(tokens);
  if (is_training() && cfg.emb_dropout > 0) emb = dropout(emb, cfg.emb_dropout, dropout_gen_);
  auto [out, last] = rnn->forward(emb, state);
  const int64_t T = out.size(1);
  if (keep_last > 0 && keep_last < T) out = out.narrow(1, T - keep_last, keep_last);
  return {decoder->forward(drop->forward(out)), std::move(last)};
}

std::unique_ptr<CharLM> make_char_lm(const std::string& kind, const nlohmann::json& config, uint64_t seed) {
  if (kind == "tcn") return std::make_unique<TCNCharLM>(TCNConfig::from_json(config), seed);
  if (kind == "lstm") return std::make_unique<LSTMCharLM>(LSTMConfig::from_json(config), seed);
  TCN_FAIL("unknown model '", kind, "': expected tcn or lstm");
}

// ---- checkpoints --------------------------------------------------------------------------
void save_char_lm(const std::string& path, const CharLM& model, const std::vector<std::string>& vocab,
                  const Metadata& extra_metadata, const NamedTensors& extra_tensors) {
  Metadata meta = extra_metadata;
  meta["format"] = "tcn-checkpoint";
  meta["version"] = "1";
  meta["model"] = model.kind();
  meta["config"] = model.config_json().dump();
  meta["vocab"] = nlohmann::json(vocab).dump();
  save_module(path, model, meta, extra_tensors);
}

LoadedCharLM load_char_lm(const std::string& path, const std::vector<std::string>& ignore_prefixes) {
  return load_char_lm(load_safetensors(path), ignore_prefixes);
}

LoadedCharLM load_char_lm(SafetensorsContents file, const std::vector<std::string>& ignore_prefixes) {
  LoadedCharLM out;
  out.file = std::move(file);
  const std::string& path = out.file.path;
  const Metadata& m = out.file.metadata;
  auto get = [&](const char* key) -> const std::string& {
    auto it = m.find(key);
    TCN_CHECK(it != m.end(), path, ": not a tcn checkpoint (no '", key, "' in its metadata)");
    return it->second;
  };
  TCN_CHECK(get("format") == "tcn-checkpoint", path, ": metadata format is '", get("format"),
            "', expected tcn-checkpoint");
  TCN_CHECK(get("version") == "1", path, ": checkpoint version ", get("version"), " is not supported (expected 1)");
  nlohmann::json config, vocab;
  try {
    config = nlohmann::json::parse(get("config"));
    vocab = nlohmann::json::parse(get("vocab"));
  } catch (const nlohmann::json::exception& e) {
    TCN_FAIL(path, ": corrupt checkpoint metadata (", e.what(), ")");
  }
  TCN_CHECK(vocab.is_array() && std::all_of(vocab.begin(), vocab.end(), [](const auto& v) { return v.is_string(); }),
            path, ": corrupt checkpoint metadata: vocab is not a list of strings");
  out.vocab = vocab.get<std::vector<std::string>>();
  // The config is validated (bounds, parameter count) and checked against what
  // the file holds before a single parameter is allocated.
  const std::string& kind = get("model");
  int64_t needed = 0;
  try {
    if (kind == "tcn") needed = TCNConfig::from_json(config).parameter_count();
    else if (kind == "lstm") needed = LSTMConfig::from_json(config).parameter_count();
    else TCN_FAIL("unknown model '", kind, "': expected tcn or lstm");
  } catch (const Error& e) {
    TCN_FAIL(path, ": ", e.what());
  }
  TCN_CHECK(static_cast<int64_t>(out.vocab.size()) == config.at("vocab_size").get<int64_t>(), path,
            ": vocabulary of ", out.vocab.size(), " characters does not match vocab_size in the config ",
            config.dump());
  int64_t held = 0;
  for (const auto& [name, t] : out.file.tensors)
    if (!has_prefix(name, ignore_prefixes)) held += t.numel();
  TCN_CHECK(held >= needed, path, ": its config describes a model of ", needed, " parameters, but the file holds ",
            held, " values: truncated, or a corrupt config ", config.dump());
  out.model = make_char_lm(kind, config, 0);
  load_module(out.file, *out.model, ignore_prefixes);
  return out;
}

TaskTCN::TaskTCN(int64_t inputs, int64_t outputs, int64_t levels, int64_t nhid, int64_t ksize, double dropout,
                 Generator& init, Generator& drop)
    : TaskTCN(TemporalConvNet::options(inputs, std::vector<int64_t>(static_cast<size_t>(levels), nhid), ksize,
                                       dropout),
              outputs, init, drop) {}

TaskTCN::TaskTCN(const TCNOptions& o, int64_t outputs, Generator& init, Generator& drop) {
  TCN_CHECK(o.input_shape == "NLC", "TaskTCN: the TCN's input_shape must be NLC ([batch, time, channels]), got ",
            o.input_shape);
  tcn = register_module("tcn", std::make_shared<TCN>(o, init, drop));
  linear = register_module("linear", std::make_shared<Linear>(tcn->output_channels(), outputs, init));
  autograd::NoGrad ng;
  normal_(linear->weight, 0.0, 0.01, init);  // locuslab's init_weights (the bias keeps PyTorch's default)
}

Tensor TaskTCN::forward(const Tensor& x, int64_t keep_last) const {
  const auto scope = profile_scope();
  return linear->forward(tcn->forward(x, {}, keep_last));
}

}  // namespace tcn::nn
