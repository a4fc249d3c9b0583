// nn/profiler.h: a profiled step's ops add up to the step, a slow op is charged
// to itself, the trace is valid nested JSON naming every module. Timing
// *ratios* of one run only (no absolute speed is asserted).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "core/devices.h"
#include "helpers.h"
#include <nlohmann/json.hpp>
#include "nn/models.h"
#include "nn/optim.h"
#include "nn/profiler.h"

using namespace tcn;

namespace {

struct Step {
  std::unique_ptr<nn::CharLM> model;
  std::unique_ptr<nn::SGD> opt;
  Tensor inp, tgt;
  explicit Step(Device dev, int64_t nhid = 64, int64_t T = 120) {
    model = nn::make_char_lm(
        "tcn", nn::TCNConfig{.vocab_size = 20, .emsize = 16, .nhid = nhid, .levels = 2, .ksize = 3}.to_json(), 5);
    model->train();
    model->to(dev);
    opt = std::make_unique<nn::SGD>(model->parameters(), 0.5);
    Generator g(3);
    std::vector<int64_t> ids;
    for (double u : rand({4, T + 1}, {DType::F64}, g).to_vector<double>()) ids.push_back(static_cast<int64_t>(u * 20));
    Tensor seq = from_vector<int64_t>(ids, {4, T + 1});
    inp = seq.narrow(1, 0, T).contiguous().to(dev);
    tgt = seq.narrow(1, 1, T).contiguous().to(dev);
  }
  void run() {
    opt->zero_grad();
    Tensor loss = cross_entropy(model->forward(inp), tgt);
    loss.backward();
    nn::clip_grad_norm_(model->parameters(), 0.15);
    opt->step();
  }
};

double sum_ms(const nn::ProfileReport& r, bool ops_only) {
  double s = 0;
  for (const auto& row : r.ops)
    if (!ops_only || row.op != "(between ops)") s += row.ms;
  return s;
}

}  // namespace

TEST_CASE("profiler: the ops of a CPU step add up to the step's wall time within 5%") {
  Step st(Device::cpu(), 96, 200);
  st.run();  // warm caches and the allocator
  nn::Profiler prof(*st.model, Device::cpu());
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) prof.step([&] { st.run(); });
  const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 3;
  const nn::ProfileReport& r = prof.finish();
  CHECK(r.steps == 3);
  CHECK(r.step_ms <= wall * 1.0001);
  CHECK(sum_ms(r, false) == doctest::Approx(r.step_ms).epsilon(1e-6));  // every row together is the step
  CHECK(sum_ms(r, true) >= 0.95 * wall);                                  // and ops alone cover 95% of it
  // Ops are attributed to their module and phase, GEMMs have FLOPs.
  bool conv_fwd = false, conv_bwd = false, sgd = false;
  for (const auto& row : r.ops) {
    if (row.op == "conv1d" && row.module == "tcn.network.0.conv1" && row.phase == profile::Phase::Forward) {
      conv_fwd = true;
      CHECK(row.calls == 1);
      CHECK(row.flops > 0);
    }
    if (row.op == "conv1d" && row.module == "tcn.network.0.conv1" && row.phase == profile::Phase::Backward)
      conv_bwd = true;
    if (row.op == "sgd_step") sgd = row.module == "-" && row.phase == profile::Phase::Optimizer;
  }
  CHECK(conv_fwd);
  CHECK(conv_bwd);
  CHECK(sgd);
  // Every row (table() shows the 40 longest by default): under ASan this row
  // ranks about 32nd, so the machine's noise could push it past the cut.
  const std::string t = r.table(r.ops.size());
  CHECK(t.find("| conv1d | tcn.network.0.conv1 | forward |") != std::string::npos);
  CHECK(t.find("| tcn.network.1 |") != std::string::npos);
}

TEST_CASE("profiler: a slow op is charged to itself, not to the op after it") {
  Tensor x = ones({64, 64});
  Generator g(1);
  nn::Linear lin(64, 64, g);
  nn::Profiler prof(lin, Device::cpu());
  prof.step([&] {
    {
      const profile::Op slow("slow_test_op");
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    (void)relu(x);
  });
  const nn::ProfileReport& r = prof.finish();
  std::map<std::string, double> ms;
  for (const auto& row : r.ops) ms[row.op] += row.ms;
  CHECK(ms["slow_test_op"] >= 29);
  CHECK(ms["relu"] < 5);
  CHECK(ms["relu"] > 0);
}

TEST_CASE("profiler: the trace is JSON whose ranges nest and balance, naming every module") {
  Step st(Device::cpu());
  st.run();
  nn::Profiler prof(*st.model, Device::cpu());
  prof.step([&] { st.run(); });
  prof.finish();
  const std::string path = "test_profiler_trace.json";
  prof.write_trace(path);
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);  // throws if not JSON
  std::map<int, std::vector<std::pair<std::string, double>>> open;  // per track
  std::set<std::string> names;
  int ranges = 0;
  for (const auto& e : j.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if (ph == "M") continue;
    const int tid = e.at("tid");
    const double ts = e.at("ts");
    auto& stack = open[tid];
    if (ph == "B") {
      if (!stack.empty()) CHECK(ts >= stack.back().second);  // a child starts inside its parent
      stack.emplace_back(e.at("name"), ts);
      names.insert(e.at("name").get<std::string>());
      ++ranges;
    } else {
      REQUIRE(ph == "E");
      REQUIRE(!stack.empty());
      CHECK(e.at("name") == stack.back().first);  // ends match the innermost begin
      CHECK(ts >= stack.back().second);
      stack.pop_back();
    }
  }
  for (auto& [tid, stack] : open) CHECK(stack.empty());
  CHECK(ranges > 50);
  CHECK(names.count("step 1"));
  CHECK(names.count("backward"));
  CHECK(names.count("(TCNCharLM)"));
  for (const auto& named : st.model->named_modules()) {  // tcn.network: a ModuleList, a container with no forward
    const std::string& p = named.first;  // named: CHECK_MESSAGE captures it (clang 14 cannot capture a binding)
    if (!p.empty() && p != "tcn.network") CHECK_MESSAGE(names.count(p), "module ", p, " missing from the trace");
  }
  std::remove(path.c_str());
}

TEST_CASE("profiler: off, nothing records; a second profiler at once is an error") {
  CHECK(!profile::active());
  Step st(Device::cpu());
  {
    nn::Profiler prof(*st.model, Device::cpu());
    CHECK(profile::active());
    CHECK_THROWS_WITH_AS(nn::Profiler(*st.model, Device::cpu()), doctest::Contains("already recording"), Error);
  }
  CHECK(!profile::active());
}

TEST_CASE("profiler on the CUDA device: the same table, device-timed, saying so when emulated" *
          doctest::skip(!cuda::is_available())) {
  Step st(Device::cuda(0));
  st.run();
  nn::Profiler prof(*st.model, Device::cuda(0));
  for (int i = 0; i < 2; ++i) prof.step([&] { st.run(); });
  const nn::ProfileReport& r = prof.finish();
  CHECK(r.device_timed);
  CHECK(r.emulated == cuda::emulated());
  CHECK(r.steps == 2);
  CHECK(r.step_device_ms > 0);
  CHECK(sum_ms(r, false) == doctest::Approx(r.step_device_ms).epsilon(1e-3));
  bool conv = false;
  for (const auto& row : r.ops)
    if (row.op == "conv1d" && row.module == "tcn.network.0.conv1" && row.phase == profile::Phase::Forward)
      conv = row.ms > 0 && row.flops > 0;
  CHECK(conv);
  const std::string t = r.table();
  CHECK(t.find("device ms") != std::string::npos);
  if (cuda::emulated()) CHECK(t.find("EMULATED") != std::string::npos);
  // Where the device counts launches (the emulated one), each op's own
  // launches add up to the step's; a conv launches GEMMs (one per tap).
  CHECK(r.launches_counted == cuda::counters_available());
  if (r.launches_counted) {
    double sum = 0;
    for (const auto& row : r.ops) {
      sum += row.launches;
      if (row.op == "conv1d" && row.module == "tcn.network.0.conv1" && row.phase == profile::Phase::Forward)
        CHECK(row.launches >= 3);
    }
    CHECK(r.step_launches > 50);
    CHECK(sum == doctest::Approx(r.step_launches));
    CHECK(t.find(" launches |") != std::string::npos);
  }
}

// The seed's mistake, staged: a long GEMM is queued, then a small copy to the
// host makes the host wait for it. A host clock charges the GEMM's time to the
// copy (torch.autograd.profiler put 93% of a TCN step on
// embedding_dense_backward this way); the device clock charges it to the GEMM.
// The emulated device queues work and runs it when the host waits, as a GPU
// does from the host's side, so this runs in CI.
TEST_CASE("profiler on CUDA: queued device work is charged to the op that issued it, not to the op that waits" *
          doctest::skip(!cuda::is_available())) {
  Step st(Device::cuda(0));
  Generator g(9);
  const int64_t n = cuda::emulated() ? 384 : 4096;  // a GPU: GEMMs of ms, launches of us
  const Tensor a = rand({n, n}, {DType::F32}, g).to(Device::cuda(0));
  (void)mm(a, a).to(Device::cpu());  // warm: cuBLAS handle, allocator blocks
  nn::Profiler prof(*st.model, Device::cuda(0));
  prof.step([&] {
    Tensor c = mm(a, a);
    for (int i = 0; i < 3; ++i) c = mm(c, a);
    (void)c.narrow(0, 0, 1).to(Device::cpu());  // one row back to the host: waits for the GEMMs
  });
  const nn::ProfileReport& r = prof.finish();
  const nn::ProfileRow *gemm = nullptr, *copy = nullptr;
  for (const auto& row : r.ops) {
    if (row.op == "mm") gemm = &row;
    if (row.op == "copy_") copy = &row;  // to_device's part that copies (and waits)
  }
  REQUIRE(gemm != nullptr);
  REQUIRE(copy != nullptr);
  MESSAGE("device ms: mm ", gemm->ms, ", copy_ ", copy->ms, "; host ms: mm ", gemm->host_ms, ", copy_ ",
          copy->host_ms, std::string(cuda::emulated() ? " (emulated device)" : ""));
  CHECK(gemm->calls == 4);
  CHECK(gemm->ms > 5 * copy->ms);          // the device clock: the GEMMs' time is theirs
  CHECK(copy->host_ms > 5 * gemm->host_ms);  // the host clock would have blamed the copy
}
