#include "nn/models.h"

namespace tcn::nn {

// ---- TemporalBlock / TemporalConvNet ---------------------------------------------
TemporalBlock::TemporalBlock(int64_t in, int64_t out, int64_t kernel, int64_t dilation, double p, Generator& init,
                             Generator& drop) {
  Conv1d::Options wn{.dilation = dilation, .causal = true, .bias = true, .weight_norm = true};
  conv1 = register_module("conv1", std::make_shared<Conv1d>(in, out, kernel, init, wn));
  conv2 = register_module("conv2", std::make_shared<Conv1d>(out, out, kernel, init, wn));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(p, drop));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(p, drop));
  if (in != out) {
    downsample = register_module("downsample", std::make_shared<Conv1d>(in, out, 1, init));
    autograd::NoGrad ng;
    normal_(downsample->weight, 0.0, 0.01, init);
  }
}

Tensor TemporalBlock::forward(const Tensor& x, int64_t x_start, int64_t out_start) const {
  const int64_t T = x_start + x.size(1), s = span();
  TCN_CHECK(x_start == 0 ? out_start >= 0 : out_start >= x_start + 2 * s, "TemporalBlock: outputs from ", out_start,
            " need inputs from ", std::max<int64_t>(0, out_start - 2 * s), ", x starts at ", x_start);
  // conv1 over x: its first s outputs lack history when x is a suffix; keep from mid.
  const int64_t mid = x_start == 0 ? std::max<int64_t>(0, out_start - s) : out_start - s;
  Tensor h = dropout1->forward_relu(conv1->forward(x).narrow(1, mid - x_start, T - mid));  // dropout(relu(.)), fused
  h = dropout2->forward_relu(conv2->forward(h).narrow(1, out_start - mid, T - out_start));
  Tensor xs = x.narrow(1, out_start - x_start, T - out_start);
  Tensor res = downsample ? downsample->forward(xs) : xs;
  return relu(add(h, res));
}

TemporalConvNet::TemporalConvNet(int64_t inputs, const std::vector<int64_t>& channels, int64_t kernel, double p,
                                 Generator& init, Generator& drop) {
  network = register_module("network", std::make_shared<ModuleList<TemporalBlock>>());
  for (size_t i = 0; i < channels.size(); ++i) {
    int64_t in = i == 0 ? inputs : channels[i - 1];
    network->push_back(std::make_shared<TemporalBlock>(in, channels[i], kernel, int64_t{1} << i, p, init, drop));
  }
}

Tensor TemporalConvNet::forward(const Tensor& x, int64_t keep_last) const {
  const auto& blocks = network->items();
  const int64_t T = x.size(1);
  // Where each level's output must start, from the top down.
  std::vector<int64_t> start(blocks.size() + 1);
  start[blocks.size()] = keep_last > 0 && keep_last < T ? T - keep_last : 0;
  for (size_t i = blocks.size(); i-- > 0;) start[i] = std::max<int64_t>(0, start[i + 1] - 2 * blocks[i]->span());
  Tensor h = start[0] > 0 ? x.narrow(1, start[0], T - start[0]) : x;
  for (size_t i = 0; i < blocks.size(); ++i) h = blocks[i]->forward(h, start[i], start[i + 1]);
  return h;
}

int64_t TemporalConvNet::receptive_field() const {
  int64_t r = 1;
  for (const auto& b : network->items()) r += 2 * b->span();
  return r;
}

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
    fields(c, [&](const char* key, auto& v) { v = j.at(key).get<std::decay_t<decltype(v)>>(); });
  } catch (const nlohmann::json::exception& e) {
    TCN_FAIL(what, " config ", j.dump(), " is invalid: ", e.what());
  }
  return c;
}

}  // namespace

nlohmann::json TCNConfig::to_json() const { return fields_to_json(*this, [](auto& c, auto&& f) { tcn_fields(c, f); }); }
TCNConfig TCNConfig::from_json(const nlohmann::json& j) {
  return fields_from_json<TCNConfig>(j, [](auto& c, auto&& f) { tcn_fields(c, f); }, "TCN");
}
nlohmann::json LSTMConfig::to_json() const {
  return fields_to_json(*this, [](auto& c, auto&& f) { lstm_fields(c, f); });
}
LSTMConfig LSTMConfig::from_json(const nlohmann::json& j) {
  return fields_from_json<LSTMConfig>(j, [](auto& c, auto&& f) { lstm_fields(c, f); }, "LSTM");
}

// ---- the models ------------------------------------------------------------------------
TCNCharLM::TCNCharLM(const TCNConfig& c, uint64_t seed) : cfg(c) {
  TCN_CHECK(c.levels >= 1, "TCN: levels must be >= 1, got ", c.levels);
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
  TCN_CHECK(tokens.dim() == 2 && tokens.dtype() == DType::I64, "TCN: tokens must be int64 [batch, time], got ",
            tokens.dtype(), " ", tokens.shape());
  // Only the positions the kept outputs can see are embedded and convolved.
  const int64_t T = tokens.size(1);
  const int64_t need = keep_last > 0 ? std::min(T, keep_last + tcn->receptive_field() - 1) : T;
  Tensor emb = drop->forward(encoder->forward(tokens.narrow(1, T - need, need)));  // [B, need, emsize]
  return decoder->forward(tcn->forward(emb, keep_last));                           // [B, kept, vocab]
}

LSTMCharLM::LSTMCharLM(const LSTMConfig& c, uint64_t seed) : cfg(c) {
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
  TCN_CHECK(tokens.dim() == 2 && tokens.dtype() == DType::I64, "LSTM: tokens must be int64 [batch, time], got ",
            tokens.dtype(), " ", tokens.shape());
  Tensor emb = encoder->forward(tokens);
  if (is_training() && cfg.emb_dropout > 0) emb = dropout(emb, cfg.emb_dropout, dropout_gen_);
  Tensor out = rnn->forward(emb).first;
  const int64_t T = out.size(1);
  if (keep_last > 0 && keep_last < T) out = out.narrow(1, T - keep_last, keep_last);
  return decoder->forward(drop->forward(out));
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

LoadedCharLM load_char_lm(const std::string& path, const std::string& ignore_prefix) {
  LoadedCharLM out;
  out.file = load_safetensors(path);
  const Metadata& m = out.file.metadata;
  auto get = [&](const char* key) -> const std::string& {
    auto it = m.find(key);
    TCN_CHECK(it != m.end(), path, ": not a tcn checkpoint (no '", key, "' in its metadata)");
    return it->second;
  };
  TCN_CHECK(get("format") == "tcn-checkpoint", path, ": metadata format is '", get("format"),
            "', expected tcn-checkpoint");
  TCN_CHECK(get("version") == "1", path, ": checkpoint version ", get("version"), " is not supported (expected 1)");
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(get("config"));
    out.vocab = nlohmann::json::parse(get("vocab")).get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    TCN_FAIL(path, ": corrupt checkpoint metadata (", e.what(), ")");
  }
  out.model = make_char_lm(get("model"), config, 0);
  TCN_CHECK(static_cast<int64_t>(out.vocab.size()) == config.value("vocab_size", int64_t{-1}), path, ": vocabulary of ",
            out.vocab.size(), " characters does not match vocab_size in the config ", config.dump());
  load_module(out.file, *out.model, ignore_prefix);
  return out;
}

}  // namespace tcn::nn
