#include "generate.h"

#include <chrono>
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/philox.h"
#include "examples/common/program.h"
#include "core/threads.h"
#include "data.h"
#include "flags.h"
#include "train.h"
#include "model_file.h"

namespace charlm {

using namespace tcn;

namespace {

// The TCN's streaming inference (nn::TCN::step): each causal conv keeps its
// last (k-1)*d inputs, so a character costs one column of every conv.
class TCNStepper final : public Stepper {
 public:
  explicit TCNStepper(nn::TCNCharLM& m) : m_(m), stream_(m.tcn->stream()) {}
  std::vector<float> step(int64_t token) override {
    autograd::NoGrad ng;
    const Tensor x = m_.encoder->forward(from_vector<int64_t>({token}, {1}).to(m_.encoder->weight.device()));
    return m_.decoder->forward(m_.tcn->step(stream_, x)).to(Device::cpu()).to_vector<float>();
  }

 private:
  nn::TCNCharLM& m_;
  nn::TCN::Stream stream_;
};

class LSTMStepper final : public Stepper {
 public:
  explicit LSTMStepper(nn::LSTMCharLM& m) : m_(m) {}
  std::vector<float> step(int64_t token) override {
    autograd::NoGrad ng;
    Tensor x = m_.encoder->forward(from_vector<int64_t>({token}, {1, 1}));
    auto [out, st] = m_.rnn->forward(x, state_);
    state_ = st;
    return m_.decoder->forward(out).to_vector<float>();
  }

 private:
  nn::LSTMCharLM& m_;
  std::optional<nn::LSTM::State> state_;
};

class FullStepper final : public Stepper {
 public:
  explicit FullStepper(nn::CharLM& m) : m_(m) {}
  std::vector<float> step(int64_t token) override {
    autograd::NoGrad ng;
    context_.push_back(token);
    const int64_t T = static_cast<int64_t>(context_.size());
    Tensor logits = m_.forward(from_vector(context_, {1, T}));
    return logits.narrow(1, T - 1, 1).to_vector<float>();
  }

 private:
  nn::CharLM& m_;
  std::vector<int64_t> context_;
};

}  // namespace

std::unique_ptr<Stepper> make_incremental_stepper(nn::CharLM& model) {
  model.eval();
  if (auto* t = dynamic_cast<nn::TCNCharLM*>(&model)) return std::make_unique<TCNStepper>(*t);
  if (auto* l = dynamic_cast<nn::LSTMCharLM*>(&model)) return std::make_unique<LSTMStepper>(*l);
  TCN_FAIL("generate: unsupported model ", model.kind());
}

std::unique_ptr<Stepper> make_full_stepper(nn::CharLM& model) {
  model.eval();
  return std::make_unique<FullStepper>(model);
}

int run_generate(const GenerateOptions& o) {
  limits::check_real("--temperature", o.temperature, 0, limits::kMaxTemperature, true, false);
  limits::check("-n", o.n, 0, limits::kMaxChars);
  limits::check("--threads", o.threads, 0, limits::kMaxThreads, " (0: the default)");
  TCN_CHECK(!o.prompt.empty(), "--prompt must not be empty");
  if (o.threads > 0) set_num_threads(o.threads);
  program::apply_conv_impl(o.conv_impl, Device::cpu());
  nn::LoadedCharLM m = load_model_file(o.checkpoint, "--checkpoint",
                                       ModelFileOptions{.data = o.data, .vocab_file = o.vocab_file,
                                                        .allow_extra = o.allow_extra})
                           .loaded;
  Vocab vocab = Vocab::from_tokens(m.vocab, parse_tokens(checkpoint_tokens(m.file.metadata)));
  const bool words = vocab.kind == Tokens::Words;
  std::vector<int64_t> prompt = vocab.encode(o.prompt, "--prompt");
  if (words) prompt.pop_back();  // the prompt continues: no <eos> after it
  TCN_CHECK(!prompt.empty(), "--prompt must hold at least one word");
  auto stepper = o.full_recompute ? make_full_stepper(*m.model) : make_incremental_stepper(*m.model);

  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits;
  for (int64_t tok : prompt) logits = stepper->step(tok);
  std::string out = o.prompt;
  uint64_t counter = 0;
  for (int64_t i = 0; i < o.n; ++i) {
    // Finite weights can still overflow; sampling from NaN would always pick token 0.
    TCN_CHECK(std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); }),
              "generate: the model's logits are not finite (nan or inf) after ", out.size(), " characters of text; "
              "no sample from them");
    // Sample from softmax(logits / temperature) with a Philox uniform.
    double mx = *std::max_element(logits.begin(), logits.end());
    std::vector<double> p(logits.size());
    double z = 0;
    for (size_t k = 0; k < p.size(); ++k) z += p[k] = std::exp((logits[k] - mx) / o.temperature);
    double u = uint_to_unit_double(philox_block(o.seed, counter++).v[0]) * z;
    size_t pick = 0;
    for (double acc = p[0]; acc < u && pick + 1 < p.size(); acc += p[++pick]) {
    }
    if (words) {
      // Words as text: a space between words, a line break for <eos>.
      const std::string w = vocab.decode(static_cast<int64_t>(pick));
      out += w == kEos ? "\n" : (out.empty() || out.back() == '\n' ? w : " " + w);
    } else {
      out += vocab.decode(static_cast<int64_t>(pick));
    }
    logits = stepper->step(static_cast<int64_t>(pick));
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s\n", out.c_str());
  std::fprintf(stderr, "generated %lld %s in %.2f s (%.0f %s/s, %s)\n", static_cast<long long>(o.n),
               vocab.unit(), secs,
               static_cast<double>(o.n + static_cast<int64_t>(prompt.size())) / secs, rate_unit(vocab.kind),
               o.full_recompute ? "full recompute" : "incremental");
  return 0;
}

}  // namespace charlm
