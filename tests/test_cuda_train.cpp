// CUDA against the CPU one level up from tests/test_cuda_ops.cpp: optimizers and
// clipping, weight-normed layers, whole models moved with Module::to, checkpoints
// written from CUDA parameters, and the first training losses of the trainer.
// Skipped, and reported as skipped, when no GPU is usable (real or emulated).
// Tolerances: float64 relative 1e-12 (1e-10 where GEMMs sum in another order),
// float32 relative 1e-5 (1e-4 where GEMMs are involved).
#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>
#include <initializer_list>
#include <tuple>

#include "cuda_compare.h"
#include "helpers.h"
#include "nn/optim.h"
#include "examples/charlm/train.h"

using namespace tcn;
using tcn::test::check_params_close;
using tcn::test::check_state_close;
using tcn::test::compare_lstm;
using tcn::test::grads;
using tcn::test::rand_tensor;
using tcn::test::TempDir;

namespace {

const Device kCuda = Device::cuda(0);

// The same model built twice from one seed, the second moved to CUDA; a forward
// and backward on each (dropout on: both draw the same masks), then the loss,
// the logits and every parameter's gradient compared.
void compare_models(nn::CharLM& cpu, nn::CharLM& gpu, int64_t vocab, double rtol, double atol) {
  gpu.to(kCuda);
  for (const Tensor& p : gpu.parameters()) REQUIRE(p.device() == kCuda);
  Generator g(7);
  Tensor tokens = rand({4, 30}, {DType::F64}, g);
  std::vector<int64_t> ids;
  for (double u : tokens.to_vector<double>()) ids.push_back(std::min<int64_t>(vocab - 1, static_cast<int64_t>(u * vocab)));
  Tensor inp = from_vector<int64_t>(ids, {4, 30});
  Tensor tgt = from_vector<int64_t>(std::vector<int64_t>(ids.rbegin(), ids.rend()), {4, 30}).narrow(1, 10, 20);
  for (bool training : {true, false}) {
    INFO("training ", training);
    cpu.train(training);
    gpu.train(training);
    cpu.zero_grad();
    gpu.zero_grad();
    // Each side's forward and backward before the other's: backward() frees the whole tape.
    Tensor lc = cpu.forward(inp, 20);
    Tensor loss_c = cross_entropy(lc, tgt);
    loss_c.backward();
    Tensor lg = gpu.forward(inp.to(kCuda), 20);
    REQUIRE(lg.device() == kCuda);
    Tensor loss_g = cross_entropy(lg, tgt.contiguous().to(kCuda));
    loss_g.backward();
    CHECK_CLOSE(lg.detach().to(Device::cpu()), lc.detach(), atol, rtol);
    CHECK(std::abs(loss_g.item() - loss_c.item()) <= rtol * std::abs(loss_c.item()));
    check_params_close(grads(gpu.parameters()), grads(cpu.parameters()), atol, rtol, "gradient of parameter");
    CHECK(cpu.dropout_generator().offset() == gpu.dropout_generator().offset());
  }
}

// "train,epoch,step,lr,loss" rows of a metrics CSV: the step and the loss.
std::vector<std::pair<int64_t, double>> train_losses(const std::string& csv) {
  std::ifstream f(csv);
  std::vector<std::pair<int64_t, double>> rows;
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("train,", 0) != 0) continue;
    std::stringstream ss(line);
    std::vector<std::string> fields;
    for (std::string field; std::getline(ss, field, ',');) fields.push_back(field);
    REQUIRE(fields.size() >= 5);
    rows.emplace_back(std::stoll(fields[2]), std::stod(fields[4]));
  }
  return rows;
}

charlm::TrainOptions small_train_options(const TempDir& d, const std::string& model, const std::string& device) {
  charlm::TrainOptions o;
  o.model = model;
  o.batch_size = 4;
  o.seq_len = 64;
  o.validseqlen = 48;
  o.emsize = 8;
  o.nhid = 16;
  o.levels = 2;
  o.dropout = 0.2;  // dropout on: the CUDA masks must be the CPU's
  o.emb_dropout = 0.2;
  o.lr = model == "lstm" ? 2.0 : 1.0;
  if (model == "lstm") o.validseqlen = o.seq_len;  // --lstm_state carry: windows that do not overlap
  o.clip = 0.15;  // active: clipping scales every step
  o.max_steps = 5;
  o.log_interval = 1;
  o.device = device;
  o.data = d.str();
  o.eval_batch_size = 2;
  o.eval_batches = 1;
  o.quiet = true;
  return o;
}

}  // namespace

TEST_SUITE("cuda") {

TEST_CASE("CUDA vs CPU: SGD (momentum, weight decay), Adam and clip_grad_norm_, step by step, gated" *
          doctest::skip(!cuda::is_available())) {
  struct Setup {
    const char* name;
    double clip;  // <= 0: no clipping
    std::function<std::unique_ptr<nn::Optimizer>(std::vector<Tensor>)> make;
  };
  const std::vector<Setup> setups = {
      {"SGD", 0, [](auto p) { return std::make_unique<nn::SGD>(p, 0.3); }},
      {"SGD momentum + weight decay, clipped", 0.05,
       [](auto p) { return std::make_unique<nn::SGD>(p, 0.3, 0.9, 0.01); }},
      {"SGD momentum, clip inactive", 100, [](auto p) { return std::make_unique<nn::SGD>(p, 0.3, 0.5); }},
      {"Adam", 0, [](auto p) { return std::make_unique<nn::Adam>(p, 0.05); }},
      {"Adam weight decay, clipped", 0.05,
       [](auto p) { return std::make_unique<nn::Adam>(p, 0.05, 0.8, 0.99, 1e-8, 0.02); }},
  };
  for (DType dt : {DType::F32, DType::F64}) {
    const double rtol = dt == DType::F32 ? 1e-5 : 1e-12, atol = dt == DType::F32 ? 1e-6 : 1e-12;
    for (const Setup& s : setups) {
      INFO(std::string(s.name), ", ", dt);
      const std::vector<Shape> shapes = {{5, 7}, {13}, {3, 4, 2}, {6}};
      std::vector<Tensor> pc, pg, w;
      for (size_t i = 0; i < shapes.size(); ++i) {
        Tensor t = rand_tensor(shapes[i], 100 + i, false, -1, 1, dt);
        pc.push_back(clone(t).requires_grad_());
        pg.push_back(t.to(kCuda).requires_grad_());
        w.push_back(rand_tensor(shapes[i], 200 + i, false, -2, 2, dt));
      }
      auto oc = s.make(pc), og = s.make(pg);
      for (int step = 0; step < 5; ++step) {
        INFO("step ", step);
        double norms[2] = {0, 0};
        for (int side = 0; side < 2; ++side) {
          const std::vector<Tensor>& p = side == 0 ? pc : pg;
          nn::Optimizer& opt = side == 0 ? *oc : *og;
          opt.zero_grad();
          Tensor loss;
          // The last parameter gets a gradient only on odd steps: optimizers skip it otherwise.
          for (size_t i = 0; i < p.size(); ++i) {
            if (i == 3 && step % 2 == 0) continue;
            Tensor term = sum(mul(tanh(p[i]), w[i].to(p[i].device())));
            loss = loss.defined() ? add(loss, term) : term;
          }
          loss.backward();
          if (s.clip > 0) {
            Tensor norm = nn::clip_grad_norm_(p, s.clip);
            CHECK(norm.device() == p[0].device());
            norms[side] = norm.item();
          }
          // Step 2 runs with a closed gate (nothing may change, parameters or
          // state), step 3 with an open one (as no gate), the rest with none.
          if (step == 2) {
            std::vector<Tensor> before;
            for (const Tensor& t : p) before.push_back(clone(t.detach()));
            for (const auto& [name, t] : opt.state()) before.push_back(clone(t));
            opt.step(zeros({}, {DType::F64, p[0].device()}));
            size_t k = 0;
            for (const Tensor& t : p) CHECK(t.detach().to(Device::cpu()).to_vector<double>() == before[k++].to(Device::cpu()).to_vector<double>());
            for (const auto& state : opt.state()) {
              const auto& name = state.first;  // named: INFO captures it (clang 14 cannot capture a binding)
              const auto& t = state.second;
              INFO("state ", name);
              CHECK(t.to(Device::cpu()).to_vector<double>() == before[k++].to(Device::cpu()).to_vector<double>());
            }
          } else if (step == 3) {
            opt.step(full({}, 1.0, {DType::F64, p[0].device()}));
          } else {
            opt.step();
          }
        }
        CHECK(std::abs(norms[1] - norms[0]) <= rtol * std::abs(norms[0]));
        check_params_close(pg, pc, atol, rtol, "parameter");
        check_state_close(og->state(), oc->state(), atol, rtol);
      }
    }
  }
}

TEST_CASE("CUDA vs CPU: clipping, SGD and Adam over 70 parameters (three multi-tensor groups), some without a gradient" *
          doctest::skip(!cuda::is_available())) {
  for (int variant = 0; variant < 3; ++variant) {  // SGD, SGD with momentum, Adam
    INFO("variant ", variant);
    std::vector<Tensor> pc, pg;
    for (int i = 0; i < 70; ++i) {
      Tensor t = rand_tensor({1 + i % 7, 1 + i % 3}, 300 + i, false, -1, 1, DType::F32);
      pc.push_back(clone(t).requires_grad_());
      pg.push_back(t.to(kCuda).requires_grad_());
    }
    auto make = [variant](std::vector<Tensor> p) -> std::unique_ptr<nn::Optimizer> {
      if (variant == 2) return std::make_unique<nn::Adam>(p, 0.05, 0.9, 0.999, 1e-8, 0.01);
      return std::make_unique<nn::SGD>(p, 0.2, variant == 1 ? 0.9 : 0.0, 0.01);
    };
    auto oc = make(pc), og = make(pg);
    for (int step = 0; step < 3; ++step) {
      INFO("step ", step);
      double norms[2];
      for (int side = 0; side < 2; ++side) {
        std::vector<Tensor>& p = side == 0 ? pc : pg;
        nn::Optimizer& opt = side == 0 ? *oc : *og;
        opt.zero_grad();
        Tensor loss;
        for (size_t i = 0; i < p.size(); ++i) {
          if (i % 11 == 5) continue;  // no gradient: skipped by both
          Tensor term = sum(mul(p[i], p[i]));
          loss = loss.defined() ? add(loss, term) : term;
        }
        loss.backward();
        norms[side] = nn::clip_grad_norm_(p, 1.0).item();
        opt.step();
      }
      CHECK(norms[1] == doctest::Approx(norms[0]).epsilon(1e-5));
      check_params_close(pg, pc, 1e-6, 1e-5, "parameter");
      auto sc = oc->state(), sg = og->state();
      REQUIRE(sc.size() == sg.size());
      for (size_t k = 0; k < sc.size(); ++k) CHECK_CLOSE(sg[k].second.to(Device::cpu()), sc[k].second, 1e-6, 1e-5);
    }
  }
}

TEST_CASE("CUDA vs CPU: weight-normed Conv1d and Linear, forward and backward" * doctest::skip(!cuda::is_available())) {
  for (DType dt : {DType::F32, DType::F64}) {
    const double rtol = dt == DType::F32 ? 1e-4 : 1e-10;
    for (bool causal : {true, false}) {
      INFO("causal ", causal, ", ", dt);
      Generator g1(11), g2(11);
      nn::Conv1d::Options o{.dilation = 2, .causal = causal, .bias = true, .weight_norm = true};
      nn::Conv1d cc(6, 4, 3, g1, o), cg(6, 4, 3, g2, o);
      nn::Linear::Options lo{.bias = true, .weight_norm = true};
      nn::Linear lc(4, 5, g1, lo), lg(4, 5, g2, lo);
      cc.to(dt);
      cg.to(dt);
      lc.to(dt);
      lg.to(dt);
      cg.to(kCuda);
      lg.to(kCuda);
      REQUIRE(cc.weight_g.defined());
      REQUIRE(lg.weight_v.device() == kCuda);
      Tensor x = rand_tensor({2, 11, 6}, 12, false, -1, 1, dt);
      Tensor xc = clone(x).requires_grad_(), xg = x.to(kCuda).requires_grad_();
      Tensor yc = lc.forward(cc.forward(xc));
      Tensor w = rand_tensor(yc.shape(), 13, false, -1, 1, dt);
      sum(mul(yc, w)).backward();
      Tensor yg = lg.forward(cg.forward(xg));
      sum(mul(yg, w.to(kCuda))).backward();
      CHECK_CLOSE(yg.detach().to(Device::cpu()), yc.detach(), 1e-7, rtol);
      CHECK_CLOSE(xg.grad().to(Device::cpu()), xc.grad(), 1e-7, rtol);
      check_params_close(grads(cg.parameters()), grads(cc.parameters()), 1e-7, rtol, "conv gradient");
      check_params_close(grads(lg.parameters()), grads(lc.parameters()), 1e-7, rtol, "linear gradient");
      CHECK_CLOSE(cg.effective_weight().to(Device::cpu()), cc.effective_weight(), 1e-7, rtol);
    }
  }
}

TEST_CASE("CUDA vs CPU: nn::LSTM at the reference size (B 32, H 700, emsize 100) with a given state" *
          doctest::skip(!cuda::is_available())) {
  const int64_t E = 100, H = 700;
  Generator g1(41), g2(41);
  nn::LSTM cpu(E, H, 1, g1), gpu(E, H, 1, g2);
  gpu.to(kCuda);
  // float32 sums of 800 products in another order on each side: 1e-4 relative, and 2e-6 absolute for
  // gradients near zero (1e-6 was exceeded by 12% on an AVX2 machine in the clang ThreadSanitizer
  // build, where the CPU's oneDNN kernels and the emulated cuBLAS round differently than on AVX-512).
  compare_lstm(cpu, gpu, 32, 4, 42, 2e-6, 1e-4);
}

TEST_CASE("CUDA vs CPU: whole char-LMs moved with Module::to, forward and backward" *
          doctest::skip(!cuda::is_available())) {
  {
    INFO("tcn");
    nn::TCNConfig cfg{.vocab_size = 11, .emsize = 8, .nhid = 12, .levels = 2, .ksize = 3, .dropout = 0.2,
                      .emb_dropout = 0.2};
    nn::TCNCharLM cpu(cfg, 21), gpu(cfg, 21);
    // float32: 1e-4 relative (GEMMs), 1e-6 absolute for gradients near zero.
    compare_models(cpu, gpu, cfg.vocab_size, 1e-4, 1e-6);
    CHECK(gpu.decoder->weight.shares_storage(gpu.encoder->weight));  // still tied after the move
  }
  {
    INFO("lstm");
    nn::LSTMConfig cfg{.vocab_size = 11, .emsize = 8, .nhid = 12, .layers = 2, .dropout = 0.2, .emb_dropout = 0.2};
    nn::LSTMCharLM cpu(cfg, 22), gpu(cfg, 22);
    compare_models(cpu, gpu, cfg.vocab_size, 1e-4, 1e-6);
  }
}

// The GPU step's first target (docs/gpu_step.md), counted by the emulated device: a steady training
// step (forward, backward, clipping, SGD; the batch already on the device)
// makes the host wait for the device zero times and allocates nothing.
TEST_CASE("a steady CUDA training step makes no host synchronisation and no allocation (both models)" *
          doctest::skip(!cuda::is_available() || !cuda::counters_available())) {
  nn::TCNConfig tcfg{.vocab_size = 11, .emsize = 8, .nhid = 12, .levels = 2, .ksize = 3, .dropout = 0.2,
                     .emb_dropout = 0.2};
  nn::LSTMConfig lcfg{.vocab_size = 11, .emsize = 8, .nhid = 12, .layers = 2, .dropout = 0.2, .emb_dropout = 0.2};
  nn::TCNCharLM tcn(tcfg, 23);
  nn::LSTMCharLM lstm(lcfg, 24);
  for (nn::CharLM* m : std::initializer_list<nn::CharLM*>{&tcn, &lstm}) {
    INFO((m == &tcn ? "tcn" : "lstm"));
    m->train();
    m->to(kCuda);
    nn::SGD opt(m->parameters(), 0.5);
    const test::CharBatch batch = test::random_char_batch(11, 8, kCuda);
    const Tensor &inp = batch.inp, &tgt = batch.tgt;
    Tensor loss;
    auto step = [&] {
      opt.zero_grad();
      loss = cross_entropy(m->forward(inp, 30), tgt);
      loss.backward();
      nn::clip_grad_norm_(m->parameters(), 0.15);
      opt.step();
    };
    step();
    step();  // caches warm
    cuda::synchronize();
    const cuda::DeviceCounters before = cuda::counters();
    step();
    step();
    const cuda::DeviceCounters d = cuda::counters() - before;
    INFO("two steps: ", d.per(1));
    CHECK(d.host_syncs == 0);
    CHECK(d.allocations == 0);
    CHECK(d.launches > 0);  // the steps did run on the device
    CHECK(std::isfinite(loss.item()));  // one wait, to read the loss
    CHECK(cuda::counters().host_syncs - before.host_syncs == 1);
  }
}

TEST_CASE("a checkpoint saved from CUDA parameters loads back equal (CPU and CUDA models, optimizer state)" *
          doctest::skip(!cuda::is_available())) {
  TempDir d;
  nn::TCNConfig cfg{.vocab_size = 5, .emsize = 6, .nhid = 7, .levels = 2, .ksize = 3};
  const std::vector<std::string> vocab = {"\n", " ", "a", "b", "c"};
  nn::TCNCharLM m(cfg, 31);
  m.to(kCuda);
  nn::SGD opt(m.parameters(), 0.5, 0.9);
  Tensor tokens = from_vector<int64_t>({0, 1, 2, 3, 4, 4, 3, 2, 1, 0, 2, 2, 1, 3}, {2, 7}).to(kCuda);
  cross_entropy(m.forward(tokens), tokens).backward();  // one step: momentum buffers hold something
  opt.step();
  nn::NamedTensors extra;
  for (auto& [name, t] : opt.state()) extra.emplace_back("optim." + name, t);
  nn::save_char_lm(d.file("m.safetensors"), m, vocab, {{"note", "from cuda"}}, extra);

  auto loaded = nn::load_char_lm(d.file("m.safetensors"), charlm::kTrainingTensors);
  CHECK(loaded.vocab == vocab);
  CHECK(loaded.file.metadata.at("note") == "from cuda");
  auto want = m.named_parameters(), got = loaded.model->named_parameters();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(want[i].first);
    CHECK(got[i].first == want[i].first);
    CHECK(got[i].second.device() == Device::cpu());
    CHECK(got[i].second.to_vector<float>() == want[i].second.to(Device::cpu()).to_vector<float>());
  }
  // Into a model that already lives on CUDA (load_module copies host -> device), and its optimizer.
  nn::TCNCharLM m2(cfg, 99);
  m2.to(kCuda);
  nn::load_module(loaded.file, m2, charlm::kTrainingTensors);
  nn::SGD opt2(m2.parameters(), 0.5, 0.9);
  nn::NamedTensors ostate;
  for (auto& [name, t] : loaded.file.tensors)
    if (name.rfind("optim.", 0) == 0) ostate.emplace_back(name.substr(6), t);
  opt2.load_state(ostate);
  auto p2 = m2.named_parameters();
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(want[i].first);
    CHECK(p2[i].second.device() == kCuda);
    CHECK(p2[i].second.to(Device::cpu()).to_vector<float>() == want[i].second.to(Device::cpu()).to_vector<float>());
  }
  auto s1 = opt.state(), s2 = opt2.state();
  REQUIRE(s1.size() == s2.size());
  for (size_t i = 0; i < s1.size(); ++i) {
    INFO(s1[i].first);
    CHECK(s2[i].second.device() == s1[i].second.device());
    CHECK(s2[i].second.to(Device::cpu()).to_vector<double>() == s1[i].second.to(Device::cpu()).to_vector<double>());
  }
}

// The trainer's own steps (batch slicing, the loss watch, the gated optimizer)
// wait for the device no more than the bench loop's: runs of 6 and of 10 steps
// differ by no host wait except the emulator's full-queue ones; and with the
// allocator's cache warm (a first run, not counted), a run allocates nothing.
// With --cuda_graph auto each of the 4 extra steps is one graph launch (the
// capture, in the third step or soon after, is in both runs).
TEST_CASE("charlm train on CUDA: extra steps add no host wait and no allocation (both models, graphs on and off)" *
          doctest::skip(!cuda::is_available() || !cuda::counters_available())) {
  TempDir d;
  tcn::test::write_corpus(d.str(), 3000, 600);
  for (const std::string model : {"tcn", "lstm"})
    for (const std::string graph : {"auto", "off"}) {
      INFO("model ", model, ", --cuda_graph ", graph);
      cuda::DeviceCounters runs[3];
      for (int r = 0; r < 3; ++r) {  // r 0 warms the cache
        charlm::TrainOptions o = small_train_options(d, model, "cuda");
        o.cuda_graph = graph;
        o.max_steps = r == 1 ? 6 : 10;
        o.log_interval = 1000;  // one log line, at the last step, in both runs
        o.metrics = d.file(model + std::to_string(r) + ".csv");
        const cuda::DeviceCounters before = cuda::counters();
        REQUIRE(charlm::run_train(o) == 0);
        runs[r] = cuda::counters() - before;
      }
      const cuda::DeviceCounters extra = runs[2] - runs[1];
      INFO("4 more steps: ", extra.per(1), "; the 10-step run: ", runs[2].per(1));
      CHECK(extra.host_syncs - extra.queue_waits == 0);
      CHECK(runs[2].allocations == 0);
      if (graph == "off") {
        CHECK(extra.launches > 0);
        CHECK(extra.graph_launches == 0);
      } else {
        CHECK(extra.graph_launches == 4);
        CHECK(extra.launches == 4 * 2);  // the batch copied into the graph's two input buffers
      }
    }
}

TEST_CASE("charlm on CUDA: the first 5 losses equal the CPU's, and a resumed CUDA run continues exactly" *
          doctest::skip(!cuda::is_available())) {
  TempDir d;
  tcn::test::write_corpus(d.str(), 3000, 600);
  for (const char* model : {"tcn", "lstm"}) {
    INFO("model ", model);
    charlm::TrainOptions cpu = small_train_options(d, model, "cpu"), gpu = small_train_options(d, model, "cuda");
    cpu.metrics = d.file(std::string(model) + "_cpu.csv");
    gpu.metrics = d.file(std::string(model) + "_gpu.csv");
    gpu.save = d.file(std::string(model) + "_gpu.safetensors");
    REQUIRE(charlm::run_train(cpu) == 0);
    REQUIRE(charlm::run_train(gpu) == 0);
    auto lc = train_losses(cpu.metrics), lg = train_losses(gpu.metrics);
    REQUIRE(lc.size() == 5);
    REQUIRE(lg.size() == 5);
    for (size_t i = 0; i < lc.size(); ++i) {
      INFO("step ", lc[i].first, ": cpu ", lc[i].second, " cuda ", lg[i].second);
      CHECK(lg[i].first == lc[i].first);
      // 1e-4 relative: float32 GEMMs in another order, five steps deep (the CSV keeps 6 decimals).
      CHECK(std::abs(lg[i].second - lc[i].second) <= 1e-4 * std::abs(lc[i].second));
    }
    // Resume on CUDA from a checkpoint written by a CUDA run after 2 steps: the same losses, bit for bit.
    charlm::TrainOptions first = gpu, second = gpu;
    first.max_steps = 2;
    first.save = d.file(std::string(model) + "_part.safetensors");
    first.metrics = d.file(std::string(model) + "_part.csv");
    REQUIRE(charlm::run_train(first) == 0);
    second.save = first.save;
    second.metrics = first.metrics;
    second.resume = d.file(std::string(model) + "_part.last.safetensors");
    REQUIRE(charlm::run_train(second) == 0);
    auto lr = train_losses(first.metrics);
    REQUIRE(lr.size() == 5);
    for (size_t i = 0; i < lr.size(); ++i) CHECK(lr[i] == lg[i]);
    auto full = nn::load_char_lm(d.file(std::string(model) + "_gpu.last.safetensors"), charlm::kTrainingTensors);
    auto resumed = nn::load_char_lm(d.file(std::string(model) + "_part.last.safetensors"), charlm::kTrainingTensors);
    auto na = full.model->named_parameters(), nb = resumed.model->named_parameters();
    REQUIRE(na.size() == nb.size());
    for (size_t i = 0; i < na.size(); ++i) CHECK(na[i].second.to_vector<float>() == nb[i].second.to_vector<float>());
  }
}

}  // TEST_SUITE
