#include "generate.h"


#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>

#include "tcn/core/philox.h"
#include "tcn/core/threads.h"
#include "data.h"
#include "flags.h"
#include "train.h"
#include "model_file.h"

namespace charlm {

using namespace tcn;

namespace {

// y = W x + b for W [rows, cols] row-major.
void matvec_add(const std::vector<float>& W, const float* x, int64_t rows, int64_t cols, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* w = W.data() + r * cols;
    float acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t c = 0; c < cols; ++c) acc += w[c] * x[c];
    y[r] += acc;
  }
}

// One causal conv, one time step at a time. Keeps the last (K-1)*d inputs.
class ConvStream {
 public:
  explicit ConvStream(const nn::Conv1d& conv) : cin_(conv.in_channels), cout_(conv.out_channels), k_(conv.kernel_size), d_(conv.opts.dilation) {
    TCN_CHECK(conv.opts.causal, "incremental generation needs causal convs");
    Tensor w = conv.effective_weight().detach().to(DType::F32);  // [Cout, Cin, K]
    // taps_[j] is W[:, :, j] as [Cout, Cin] row-major
    Tensor wt = w.permute({2, 0, 1}).contiguous();
    auto all = wt.to_vector<float>();
    for (int64_t j = 0; j < k_; ++j) taps_.emplace_back(all.begin() + j * cout_ * cin_, all.begin() + (j + 1) * cout_ * cin_);
    bias_ = conv.bias.defined() ? conv.bias.to_vector<float>() : std::vector<float>(cout_, 0.0f);
  }
  std::vector<float> step(const std::vector<float>& x) {
    std::vector<float> y = bias_;
    // Tap j reads the input (K-1-j)*d steps back; tap K-1 is the current input.
    for (int64_t j = 0; j < k_; ++j) {
      int64_t back = (k_ - 1 - j) * d_;
      if (back == 0) {
        matvec_add(taps_[j], x.data(), cout_, cin_, y.data());
      } else if (back <= static_cast<int64_t>(hist_.size())) {
        matvec_add(taps_[j], hist_[hist_.size() - back].data(), cout_, cin_, y.data());
      }
    }
    if ((k_ - 1) * d_ > 0) {
      hist_.push_back(x);
      if (static_cast<int64_t>(hist_.size()) > (k_ - 1) * d_) hist_.pop_front();
    }
    return y;
  }

 private:
  int64_t cin_, cout_, k_, d_;
  std::vector<std::vector<float>> taps_;
  std::vector<float> bias_;
  std::deque<std::vector<float>> hist_;
};

void relu_inplace(std::vector<float>& v) {
  for (float& e : v) e = e > 0 ? e : 0;
}

class TCNStepper final : public Stepper {
 public:
  explicit TCNStepper(nn::TCNCharLM& m) {
    autograd::NoGrad ng;
    emb_ = m.encoder->weight.to_vector<float>();
    emsize_ = m.cfg.emsize;
    for (const auto& b : m.tcn->network->items()) {
      Block blk{ConvStream(*b->conv1), ConvStream(*b->conv2), {}};
      if (b->downsample) blk.down.emplace_back(*b->downsample);
      blocks_.push_back(std::move(blk));
    }
    dec_w_ = m.decoder->weight.to_vector<float>();
    dec_b_ = m.decoder->bias.to_vector<float>();
  }
  std::vector<float> step(int64_t token) override {
    std::vector<float> x(emb_.begin() + token * emsize_, emb_.begin() + (token + 1) * emsize_);
    for (Block& b : blocks_) {
      std::vector<float> h = b.conv1.step(x);
      relu_inplace(h);
      h = b.conv2.step(h);
      relu_inplace(h);
      std::vector<float> res = b.down.empty() ? x : b.down[0].step(x);
      for (size_t i = 0; i < h.size(); ++i) h[i] += res[i];
      relu_inplace(h);
      x = std::move(h);
    }
    std::vector<float> logits = dec_b_;
    matvec_add(dec_w_, x.data(), static_cast<int64_t>(dec_b_.size()), emsize_, logits.data());
    return logits;
  }

 private:
  struct Block {
    ConvStream conv1, conv2;
    std::vector<ConvStream> down;  // empty or one
  };
  std::vector<float> emb_, dec_w_, dec_b_;
  int64_t emsize_;
  std::vector<Block> blocks_;
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
