// core/step_graph.h: a training step captured once as a CUDA graph and replayed.
// On the emulated device (TCN_CUDA=EMU) the replays run the captured kernels
// themselves, so a replayed step must equal an eager one bit for bit: same
// kernels, same arguments, same order. What this checks is the logic (per-step
// values read from device memory, the private pool, host state after a
// replay), not a GPU: skipped when no CUDA device, real or emulated, is usable.
#include <cstring>
#include <initializer_list>

#include "core/step_graph.h"
#include "core/devices.h"
#include "cuda_compare.h"
#include "helpers.h"
#include <nlohmann/json.hpp>
#include "nn/models.h"
#include "nn/optim.h"

using namespace tcn;

namespace {

const Device kCuda = Device::cuda(0);

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.detach().to(Device::cpu()).contiguous(), y = b.detach().to(Device::cpu()).contiguous();
  return x.shape() == y.shape() && x.dtype() == y.dtype() &&
         std::memcmp(x.raw_data(), y.raw_data(), static_cast<size_t>(x.numel()) * dtype_size(x.dtype())) == 0;
}

// The graph's node count against our own count of what it runs. The emulated
// device's graph holds exactly our kernels and cuBLAS GEMMs; a GPU's also holds
// what a library adds inside one call (cuBLAS's second kernel of a split-K GEMM,
// memsets), which our call-site counters cannot see (core/devices.h).
void check_graph_nodes(int64_t ours, size_t nodes) {
  INFO("our kernels and GEMMs: ", ours, ", graph nodes: ", nodes);
#if defined(TCN_CUDA_EMU)
  CHECK(ours == static_cast<int64_t>(nodes));
#else
  CHECK(ours <= static_cast<int64_t>(nodes));
#endif
}

// One model, its optimizer and loss watch, and one fixed batch on the device.
struct Run {
  std::unique_ptr<nn::CharLM> model;
  std::unique_ptr<nn::Optimizer> opt;
  std::unique_ptr<nn::LossWatch> watch;
  Tensor inp, tgt;
  int64_t scored = 30;
  Run(const std::string& kind, bool adam, int64_t levels = 2) {
    nlohmann::json cfg = kind == "tcn" ? nn::TCNConfig{.vocab_size = 11, .emsize = 8, .nhid = 12, .levels = levels,
                                                       .ksize = 3, .dropout = 0.2, .emb_dropout = 0.2}
                                             .to_json()
                                       : nn::LSTMConfig{.vocab_size = 11, .emsize = 8, .nhid = 12, .layers = 2,
                                                        .dropout = 0.2, .emb_dropout = 0.2}
                                             .to_json();
    model = nn::make_char_lm(kind, cfg, 31);
    model->train();
    model->to(kCuda);
    if (adam)
      opt = std::make_unique<nn::Adam>(model->parameters(), 0.01);
    else
      opt = std::make_unique<nn::SGD>(model->parameters(), 0.5, 0.9);
    watch = std::make_unique<nn::LossWatch>(kCuda);
    const test::CharBatch batch = test::random_char_batch(11, 8, kCuda);
    inp = batch.inp;
    tgt = batch.tgt;
  }
  // forward, backward, clipping, the watch and the gated update
  Tensor step(int64_t n) {
    opt->zero_grad();
    Tensor loss = cross_entropy(model->forward(inp, scored), tgt);
    loss.backward();
    nn::clip_grad_norm_(model->parameters(), 0.15);
    watch->add(loss, n);
    opt->step(watch->ok());
    return loss;
  }
};

}  // namespace

TEST_CASE("a training step replayed as a CUDA graph equals the eager step bit for bit (both models, SGD and Adam)" *
          doctest::skip(!cuda::is_available())) {
  const test::Backends gemm_path(test::conv_on(ConvImpl::Gemm));  // cuDNN's replay: tests/test_cudnn.cpp
  for (const char* kind : {"tcn", "lstm"})
    for (bool adam : {false, true}) {
      INFO(kind, adam ? " adam" : " sgd");
      Run eager(kind, adam), graphed(kind, adam);
      StepGraph graph(GraphMode::On, kCuda, graphed.model->parameters());
      for (int64_t n = 1; n <= 8; ++n) {
        INFO("step ", n);
        if (n == 6) eager.opt->lr = graphed.opt->lr = eager.opt->lr / 4;  // a replay follows a new lr
        // Step 7 is given another key: it runs eagerly between replays.
        const Tensor a = eager.step(n);
        const Tensor b = graph.run(n == 7 ? 2 : 1, [&] { return graphed.step(n); });
        CHECK(graph.replaying() == (n >= 3));
        REQUIRE(same_bits(a, b));
      }
      INFO(graph.status());
      CHECK(graph.graph_nodes() > 0);
      const auto pa = eager.model->parameters(), pb = graphed.model->parameters();
      for (size_t i = 0; i < pa.size(); ++i) {
        INFO("parameter ", i);
        CHECK(same_bits(pa[i], pb[i]));
        CHECK(same_bits(pa[i].grad(), pb[i].grad()));  // the replay's gradients, back on the parameters
      }
      const auto sa = eager.opt->state(), sb = graphed.opt->state();
      for (size_t i = 0; i < sa.size(); ++i) CHECK(same_bits(sa[i].second, sb[i].second));
      const nn::LossWatch::Reading ra = eager.watch->read(), rb = graphed.watch->read();
      CHECK(ra.losses == 8);
      CHECK(rb.losses == 8);
      CHECK(ra.loss_sum == rb.loss_sum);
      // The dropout generators advanced alike (the next masks match): one more eager step each.
      CHECK(same_bits(eager.step(9), graphed.step(9)));
    }
}

TEST_CASE("a replayed step is one graph launch: no host launch, no host wait, no allocation" *
          doctest::skip(!cuda::is_available() || !cuda::counters_available())) {
  const test::Backends gemm_path(test::conv_on(ConvImpl::Gemm));  // our kernels, which our counters see
  for (const char* kind : {"tcn", "lstm"}) {
    INFO(kind);
    Run r(kind, false);
    StepGraph graph(GraphMode::On, kCuda, r.model->parameters());
    int64_t n = 0;
    for (int i = 0; i < 3; ++i) graph.run(1, [&] { return r.step(++n); });  // two eager, then capture + replay
    REQUIRE(graph.replaying());
    cuda::synchronize();
    const cuda::DeviceCounters before = cuda::counters();
    for (int i = 0; i < 2; ++i) graph.run(1, [&] { return r.step(++n); });
    cuda::synchronize();  // the replays run (on the emulator: now)
    cuda::DeviceCounters d = cuda::counters() - before;
    d.host_syncs -= 1;  // that wait
    INFO("two replays: ", d.per(1), "; ", graph.status());
    CHECK(d.graph_launches == 2);
    CHECK(d.launches == 0);
    CHECK(d.host_syncs == 0);
    CHECK(d.allocations == 0);
    check_graph_nodes(d.kernels_run + d.gemms, 2 * graph.graph_nodes());  // the graph's nodes, run
  }
}

// On a GPU, counters() are tcn's call-site counts (core/devices.h); on the
// emulated device they are the emulator's, which sees every CUDA call. Equal
// counts over whole training steps (eager, captured, replayed; a loss read, a
// Thrust sort, cudaMalloc and cudaFree) show the call sites miss nothing of ours.
TEST_CASE("tcn's call-site counters agree with the emulated device's own count" *
          doctest::skip(!cuda::is_available() || !cuda::emulated())) {
  auto same = [](const cuda::DeviceCounters& site, const cuda::DeviceCounters& emu) {
    INFO("call sites: ", site.per(1), "\nemulator:   ", emu.per(1));
    CHECK(site.launches == emu.launches);
    CHECK(site.kernels_run == emu.kernels_run);
    CHECK(site.graph_launches == emu.graph_launches);
    CHECK(site.gemms == emu.gemms);
    CHECK(site.gemm_launches == emu.gemm_launches);
    CHECK(site.host_syncs == emu.host_syncs - emu.queue_waits);
    CHECK(site.allocations == emu.allocations);
  };
  for (const char* kind : {"tcn", "lstm"})
    for (GraphMode mode : {GraphMode::Off, GraphMode::On}) {
      const std::string what = std::string(kind) + (mode == GraphMode::On ? " captured" : " eager");
      INFO(what);
      cuda::caching_allocator(0)->empty_cache();  // so this run's tensors need cudaMalloc
      cuda::synchronize();
      const cuda::DeviceCounters site0 = cuda::call_site_counters(), emu0 = cuda::counters();
      {
        Run r(kind, true);
        StepGraph graph(mode, kCuda, r.model->parameters());
        Tensor loss;
        for (int64_t n = 1; n <= 5; ++n) loss = graph.run(1, [&] { return r.step(n); });
        CHECK(graph.replaying() == (mode == GraphMode::On));
        (void)loss.item();
      }
      cuda::caching_allocator(0)->empty_cache();  // cudaFree: a wait
      cuda::synchronize();
      const cuda::DeviceCounters site = cuda::call_site_counters() - site0, emu = cuda::counters() - emu0;
      CHECK(site.allocations > 0);
      CHECK(site.host_syncs > 0);
      same(site, emu);
    }
  // The embedding backward of a table too large for the scan kernel sorts with Thrust.
  const cuda::DeviceCounters site0 = cuda::call_site_counters(), emu0 = cuda::counters();
  Generator gen(5);
  Tensor table = randn({3000, 4}, {DType::F32, kCuda}, gen).requires_grad_();
  const Tensor idx = from_vector<int64_t>({2999, 5, 5, 1200, 7}, {5}, kCuda);
  sum(gather_rows(table, idx)).backward();
  cuda::synchronize();
  same(cuda::call_site_counters() - site0, cuda::counters() - emu0);
}

// The GPU step's kernel budget (docs/gpu_step.md): the reference TCN's step (char_cnn's structure: 3 levels,
// kernel 3, a downsample in the first and last level; channel counts do not
// change the count) is one graph of at most 120 kernels, cuBLAS GEMMs aside.
TEST_CASE("the reference TCN's captured step holds at most 120 kernels besides its GEMMs" *
          doctest::skip(!cuda::is_available() || !cuda::counters_available())) {
  const test::Backends gemm_path(test::conv_on(ConvImpl::Gemm));  // our kernels, which our counters see
  Run r("tcn", false, 3);
  StepGraph graph(GraphMode::On, kCuda, r.model->parameters());
  int64_t n = 0;
  for (int i = 0; i < 3; ++i) graph.run(1, [&] { return r.step(++n); });
  REQUIRE(graph.replaying());
  cuda::synchronize();
  const cuda::DeviceCounters before = cuda::counters();
  graph.run(1, [&] { return r.step(++n); });
  cuda::synchronize();
  const cuda::DeviceCounters d = cuda::counters() - before;
  MESSAGE("reference TCN step graph: ", d.kernels_run, " kernels and ", d.gemms, " GEMMs (", graph.graph_nodes(),
          " nodes)");
  check_graph_nodes(d.kernels_run + d.gemms, graph.graph_nodes());
  CHECK(d.kernels_run <= 120);
}

TEST_CASE("a step that cannot be captured: auto runs it eagerly saying why, on is an error" *
          doctest::skip(!cuda::is_available())) {
  Run r("tcn", false), ref("tcn", false);
  auto reads_back = [&](int64_t n) {
    Tensor l = r.step(n);
    (void)l.item();  // a host read inside the step: CUDA refuses it during a capture
    return l;
  };
  StepGraph graph(GraphMode::Auto, kCuda, r.model->parameters());
  for (int64_t n = 1; n <= 4; ++n) {
    const Tensor a = graph.run(1, [&] { return reads_back(n); });
    CHECK(same_bits(a, ref.step(n)));  // the step still ran, once, eagerly
  }
  CHECK_FALSE(graph.replaying());
  INFO(graph.status());
  CHECK(graph.status().find("could not be captured") != std::string::npos);
  CHECK(graph.status().find("cudaMemcpy") != std::string::npos);

  Run r2("tcn", false);
  StepGraph strict(GraphMode::On, kCuda, r2.model->parameters());
  int64_t n = 0;
  // Step 3 tries the capture; a capture the private pool could not serve runs
  // eagerly and is tried again at the next step (how often depends on what the
  // allocator holds from earlier tests), so give it the steps it may take.
  auto steps = [&] {
    for (int i = 0; i < 8; ++i) strict.run(1, [&] { return reads_back(++n); });
  };
  CHECK_THROWS_WITH_AS(steps(), doctest::Contains("--cuda_graph on: the training step could not be captured"), Error);
}

TEST_CASE("StepGraph on the CPU runs the step eagerly") {
  int calls = 0;
  StepGraph graph(GraphMode::Auto, Device::cpu());
  for (int i = 0; i < 4; ++i) graph.run(1, [&] {
      ++calls;
      return scalar_tensor(1.0);
    });
  CHECK(calls == 4);
  CHECK_FALSE(graph.replaying());
  CHECK(graph.status().find("eager") != std::string::npos);
  CHECK_THROWS_WITH_AS(parse_graph_mode("maybe"), doctest::Contains("--cuda_graph maybe: expected auto, on or off"),
                       Error);
}
