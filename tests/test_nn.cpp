// Layers: finite-difference checks of each layer in float64 (parameters and
// inputs), forward semantics, module naming and modes.
#include "core/philox.h"
#include "helpers.h"
#include "nn/models.h"
#include "nn/optim.h"

using namespace tcn;
using namespace tcn::nn;
using tcn::test::check_gradients;
using tcn::test::leaf;
using tcn::test::rand_tensor;

namespace {
// The module's parameters first, then `extra` inputs, as the checker's input list.
TensorList with_params(Module& m, TensorList extra) {
  TensorList all = m.parameters();
  all.insert(all.end(), extra.begin(), extra.end());
  return all;
}
}  // namespace

TEST_SUITE("nn") {

TEST_CASE("gradcheck: Embedding, Linear (plain, weight-normed, tied)") {
  Generator gen(1);
  Embedding emb(6, 4, gen);
  emb.to(DType::F64);
  Tensor idx = from_vector<int64_t>({5, 1, 5, 0, 2, 2}, {2, 3});
  check_gradients([&](const TensorList&) { return emb.forward(idx); }, emb.parameters());

  Linear lin(4, 3, gen);
  lin.to(DType::F64);
  Tensor x = leaf(rand_tensor({2, 5, 4}, 2, true));
  check_gradients([&](const TensorList& v) { return lin.forward(v.back()); }, with_params(lin, {x}));

  Linear wn(4, 3, gen, Linear::Options{.weight_norm = true});
  wn.to(DType::F64);
  CHECK(wn.named_parameters()[0].first == "weight_g");
  check_gradients([&](const TensorList& v) { return wn.forward(v.back()); }, with_params(wn, {x}));

  Linear tied(4, 6, gen, Linear::Options{.tied = emb.weight});  // decoder sharing the embedding
  tied.to(DType::F64);
  check_gradients([&](const TensorList& v) { return add(tied.forward(v[2]), sum(emb.forward(idx))); },
                  {emb.weight, tied.bias, x});
}

TEST_CASE("gradcheck: Conv1d causal + weight norm, 'same', 1x1") {
  Generator gen(3);
  Tensor x = leaf(rand_tensor({2, 11, 3}, 4, true));
  Conv1d causal(3, 4, 3, gen, Conv1d::Options{.dilation = 2, .causal = true, .weight_norm = true});
  causal.to(DType::F64);
  check_gradients([&](const TensorList& v) { return causal.forward(v.back()); }, with_params(causal, {x}));
  Conv1d same(3, 2, 5, gen, Conv1d::Options{.dilation = 1, .causal = false});
  same.to(DType::F64);
  check_gradients([&](const TensorList& v) { return same.forward(v.back()); }, with_params(same, {x}));
  Conv1d one(3, 5, 1, gen);
  one.to(DType::F64);
  check_gradients([&](const TensorList& v) { return one.forward(v.back()); }, with_params(one, {x}));
}

TEST_CASE("gradcheck: LSTM with and without an initial state, 2 layers") {
  Generator gen(5);
  LSTM lstm(3, 4, 2, gen);
  lstm.to(DType::F64);
  Tensor x = leaf(rand_tensor({2, 5, 3}, 6));
  check_gradients([&](const TensorList& v) { return lstm.forward(v.back()).first; }, with_params(lstm, {x}));
  Tensor h0 = leaf(rand_tensor({2, 2, 4}, 7)), c0 = leaf(rand_tensor({2, 2, 4}, 8));
  check_gradients(
      [&](const TensorList& v) {
        auto [out, st] = lstm.forward(v[v.size() - 3], LSTM::State{v[v.size() - 2], v.back()});
        return add(sum(out), add(sum(mul(st.h, st.h)), sum(st.c)));
      },
      with_params(lstm, {x, h0, c0}));
}

TEST_CASE("gradcheck: TemporalBlock with downsample, dropout on") {
  Generator init(9), drop(10);
  TemporalBlock block(3, 4, 3, 2, 0.2, init, drop);
  block.to(DType::F64);
  Tensor x = leaf(rand_tensor({2, 9, 3}, 11));
  check_gradients(
      [&](const TensorList& v) {
        drop.set_state(10, 0);  // the same masks at every evaluation
        return block.forward(v.back());
      },
      with_params(block, {x}));
}

TEST_CASE("conv1d matches the definition of PyTorch's padded conv + chomp") {
  // y[b, t, o] = bias[o] + sum_{i, j} w[o, i, j] * x[b, t - (K-1-j)*d, i]
  const int64_t B = 2, T = 7, Cin = 3, Cout = 2, K = 3, d = 2;
  Tensor x = rand_tensor({B, T, Cin}, 12), w = rand_tensor({Cout, Cin, K}, 13), b = rand_tensor({Cout}, 14);
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> ref(B * T * Cout);
  for (int64_t bb = 0; bb < B; ++bb)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t o = 0; o < Cout; ++o) {
        double acc = bv[o];
        for (int64_t j = 0; j < K; ++j) {
          int64_t src = t - (K - 1 - j) * d;
          if (src < 0) continue;
          for (int64_t i = 0; i < Cin; ++i) acc += wv[(o * Cin + i) * K + j] * xv[(bb * T + src) * Cin + i];
        }
        ref[(bb * T + t) * Cout + o] = acc;
      }
  CHECK_CLOSE(conv1d(x, w, b, d, (K - 1) * d), from_vector(ref, {B, T, Cout}), 1e-12, 1e-12);
  // Causality: changing the last input step changes only the last output step.
  Tensor x2 = clone(x);
  fill_(x2.narrow(1, T - 1, 1), 5.0);
  Tensor y1 = conv1d(x, w, b, d, (K - 1) * d), y2 = conv1d(x2, w, b, d, (K - 1) * d);
  CHECK(y1.narrow(1, 0, T - 1).to_vector<double>() == y2.narrow(1, 0, T - 1).to_vector<double>());
}

TEST_CASE("weight norm: g = ||v|| reproduces v; names and shapes as PyTorch") {
  Generator gen(15);
  Conv1d c(3, 4, 3, gen, Conv1d::Options{.weight_norm = true});
  CHECK(c.weight_g.shape() == Shape{4, 1, 1});
  CHECK(c.weight_v.shape() == Shape{4, 3, 3});
  CHECK_CLOSE(c.effective_weight(), c.weight_v, 1e-6, 1e-5);
  auto names = c.named_parameters();
  REQUIRE(names.size() == 3);
  CHECK(names[0].first == "weight_g");
  CHECK(names[1].first == "weight_v");
  CHECK(names[2].first == "bias");
}

TEST_CASE("dropout: train vs eval, rate, scale, determinism") {
  Generator g1(3), g2(3);
  Dropout d(0.25, g1);
  Tensor x = ones({100000});
  Tensor y = d.forward(x);
  auto v = y.to_vector<float>();
  int64_t kept = 0, wrong_scale = 0;
  for (float e : v) {
    kept += e != 0;
    wrong_scale += e != 0 && std::abs(e - 1.0f / 0.75f) > 1e-6;
  }
  CHECK(wrong_scale == 0);
  CHECK(std::abs(kept / 100000.0 - 0.75) < 0.01);
  CHECK(dropout(x, 0.25, g2).to_vector<float>() == v);  // same seed, same mask
  // The mask is the documented Philox stream: element i kept iff its uniform >= p.
  int64_t mismatches = 0;
  for (int64_t i = 0; i < 100000; ++i) {
    bool keep = uint_to_unit_float(philox_block(3, i / 4).v[i % 4]) >= 0.25f;
    mismatches += keep != (v[i] != 0);
  }
  CHECK(mismatches == 0);
  d.eval();
  CHECK(d.forward(x).shares_storage(x));  // identity in eval mode
}

TEST_CASE("module tree: dotted names, tied weight once, train/eval propagate") {
  TCNConfig cfg{.vocab_size = 7, .emsize = 4, .nhid = 5, .levels = 2, .ksize = 2};
  TCNCharLM m(cfg, 1);
  auto names = m.named_parameters();
  std::vector<std::string> got;
  for (auto& [n, t] : names) got.push_back(n);
  std::vector<std::string> want = {"encoder.weight",
                                   "tcn.network.0.conv1.weight_g", "tcn.network.0.conv1.weight_v",
                                   "tcn.network.0.conv1.bias",     "tcn.network.0.conv2.weight_g",
                                   "tcn.network.0.conv2.weight_v", "tcn.network.0.conv2.bias",
                                   "tcn.network.0.downsample.weight", "tcn.network.0.downsample.bias",
                                   "tcn.network.1.conv1.weight_g", "tcn.network.1.conv1.weight_v",
                                   "tcn.network.1.conv1.bias",     "tcn.network.1.conv2.weight_g",
                                   "tcn.network.1.conv2.weight_v", "tcn.network.1.conv2.bias",
                                   "tcn.network.1.downsample.weight", "tcn.network.1.downsample.bias",
                                   "decoder.bias"};
  CHECK(got == want);
  CHECK(m.is_training());
  m.eval();
  CHECK_FALSE(m.tcn->network->items()[1]->dropout2->is_training());
  // The tied weight gets the gradient of both uses.
  m.train();
  Tensor tokens = from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {1, 6});
  sum(m.forward(tokens)).backward();
  CHECK(m.encoder->weight.grad().defined());
  CHECK(m.decoder->weight.grad().shares_storage(m.encoder->weight.grad()));
}

TEST_CASE("TCN forward of the last k positions equals the full forward, values and gradients") {
  TCNConfig cfg{.vocab_size = 7, .emsize = 5, .nhid = 6, .levels = 3, .ksize = 3};  // receptive field 29
  TCNCharLM m(cfg, 2);
  m.to(DType::F64);
  m.eval();
  CHECK(m.tcn->receptive_field() == 29);
  std::vector<int64_t> toks;
  for (int i = 0; i < 2 * 45; ++i) toks.push_back((i * 5 + i / 7) % 7);
  Tensor tokens = from_vector(toks, {2, 45});
  Tensor full = m.forward(tokens);
  for (int64_t k : {1, 10, 16, 17, 30, 45}) {
    INFO("keep_last ", k);
    Tensor part = m.forward(tokens, k);
    REQUIRE(part.shape() == Shape{2, k, 7});
    CHECK_CLOSE(part, full.narrow(1, 45 - k, k), 1e-13, 1e-12);
  }
  // Gradients of a loss on the kept positions agree with the full computation's.
  Tensor targets = from_vector(std::vector<int64_t>(2 * 10, 3), {2, 10});
  m.zero_grad();
  cross_entropy(m.forward(tokens, 10), targets).backward();
  std::vector<std::vector<double>> part_grads;
  for (auto& [n, p] : m.named_parameters()) part_grads.push_back(p.grad().to_vector<double>());
  m.zero_grad();
  cross_entropy(m.forward(tokens).narrow(1, 35, 10), targets).backward();
  size_t i = 0;
  for (auto& named : m.named_parameters()) {
    const std::string& n = named.first;  // named: INFO captures it (clang 14 cannot capture a binding)
    Tensor& p = named.second;
    INFO("gradient of ", n);
    CHECK_CLOSE(from_vector(part_grads[i++], p.shape()), p.grad(), 1e-13, 1e-10);
  }
}

TEST_CASE("clip_grad_norm returns the norm and scales to max_norm") {
  Tensor a = leaf(from_vector<double>({3, 0}, {2})), b = leaf(from_vector<double>({0}, {1}));
  add(sum(mul(a, a)), sum(mul(b, 4.0))).backward();  // grads (6, 0) and (4): norm sqrt(52)
  double n = clip_grad_norm({a, b}, 1.0);
  CHECK(n == doctest::Approx(std::sqrt(52.0)));
  double after = std::sqrt(sum(mul(a.grad(), a.grad())).item() + sum(mul(b.grad(), b.grad())).item());
  CHECK(after == doctest::Approx(1.0).epsilon(1e-5));
  CHECK(clip_grad_norm({a, b}, 10.0) == doctest::Approx(after));  // below max: unchanged
}

}  // TEST_SUITE

TEST_SUITE("nn") {

// nn::LossWatch on the CPU and, where one is usable, on a CUDA device: the same
// logic in a host loop and in a kernel.
TEST_CASE("LossWatch sums finite losses, keeps the first non-finite one for good, and gates an optimizer") {
  std::vector<Device> devices{Device::cpu()};
  if (cuda::is_available()) devices.push_back(Device::cuda(0));
  for (const Device& dev : devices) {
    INFO(dev.str());
    LossWatch w(dev);
    CHECK(w.ok().device() == dev);
    CHECK(w.ok().dim() == 0);
    w.add(full({}, 1.5, {DType::F32, dev}), 1);
    w.add(full({}, 2.25, {DType::F32, dev}), 2);
    LossWatch::Reading r = w.read();
    CHECK(r.loss_sum == 3.75);
    CHECK(r.losses == 2);
    CHECK(r.bad_step == -1);
    CHECK(w.read().loss_sum == 0);  // a read starts the sum again
    w.add(full({}, 1.0, {DType::F64, dev}), 3);
    w.add(full({}, std::nan(""), {DType::F32, dev}), 4);
    w.add(full({}, INFINITY, {DType::F32, dev}), 5);  // not the first: step 4 stays the one named
    w.add(full({}, 7.0, {DType::F32, dev}), 6);        // after a bad loss nothing is summed
    r = w.read();
    CHECK(r.bad_step == 4);
    CHECK(std::isnan(r.bad_loss));
    CHECK(r.loss_sum == 1.0);
    CHECK(r.losses == 4);
    CHECK(w.ok().item() == 0.0);
    CHECK(w.read().bad_step == 4);  // for good

    // The gate: an SGD step after the bad loss changes nothing.
    Tensor p = full({3}, 2.0, {DType::F32, dev}).requires_grad_();
    SGD opt({p}, 0.5);
    sum(mul(p, p)).backward();
    opt.step(w.ok());
    CHECK(p.detach().to(Device::cpu()).to_vector<float>() == std::vector<float>{2, 2, 2});
    opt.step(LossWatch(dev).ok());  // a fresh watch: open
    CHECK(p.detach().to(Device::cpu()).to_vector<float>() == std::vector<float>{0, 0, 0});  // 2 - 0.5 * 4
  }
  CHECK_ERROR(LossWatch(Device::cpu()).add(zeros({2}), 1), "the loss must be a float scalar");
  Tensor p = zeros({2}).requires_grad_();
  SGD opt({p}, 0.1);
  sum(p).backward();
  CHECK_ERROR(opt.step(zeros({})), "the gate must be a float64 scalar");
}

}  // TEST_SUITE
