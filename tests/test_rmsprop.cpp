// nn::RMSprop: its update against values torch.optim.RMSprop computes, the
// gate (a closed one changes nothing), its state for checkpoints, and the CUDA
// kernel (cuda/optim.cu) against the CPU loop step by step, as Adam's is in
// tests/test_cuda_train.cpp (run on the emulated device in CI; skipped
// without a usable device).
#include <functional>
#include <memory>

#include "cuda_compare.h"
#include "helpers.h"
#include "nn/optim.h"

using namespace tcn;
using tcn::test::check_params_close;
using tcn::test::check_state_close;
using tcn::test::rand_tensor;

namespace {

// loss = sum(p * w), so p's gradient is w at every step.
void backward_linear(const Tensor& p, const Tensor& w) { sum(mul(p, w)).backward(); }

}  // namespace

TEST_CASE("RMSprop: three steps equal torch.optim.RMSprop's (lr 0.1, defaults alpha 0.99, eps 1e-8)") {
  Tensor p = from_vector<double>({1.0, -2.0, 0.25}, {3}).requires_grad_();
  Tensor w = from_vector<double>({0.5, 3.0, -0.1}, {3});
  nn::RMSprop opt({p}, 0.1);
  // Printed by PyTorch 1.13 (float64) for the same parameters and gradients.
  const std::vector<std::vector<double>> want_p = {
      {1.9999996048181146e-07, -2.9999999666666675, 1.2499990000009995},
      {-0.7088809045058768, -3.708881154924585, 1.9588797024971285},
      {-1.2891299219328585, -4.289130228466393, 2.5391284505730973}};
  const std::vector<std::vector<double>> want_v = {{0.0025, 0.09, 0.0001},
                                                   {0.004975, 0.1791, 0.000199},
                                                   {0.00742525, 0.267309, 0.00029701}};
  for (size_t step = 0; step < want_p.size(); ++step) {
    INFO("step ", step + 1);
    opt.zero_grad();
    backward_linear(p, w);
    opt.step();
    const std::vector<double> got = p.detach().to_vector<double>();
    const std::vector<double> v = opt.state().at(0).second.to_vector<double>();
    for (size_t k = 0; k < 3; ++k) {
      CHECK(got[k] == doctest::Approx(want_p[step][k]).epsilon(1e-12));
      CHECK(v[k] == doctest::Approx(want_v[step][k]).epsilon(1e-12));
    }
  }
}

TEST_CASE("RMSprop: weight decay, alpha and eps as torch.optim.RMSprop") {
  Tensor p = from_vector<double>({1.0, -2.0, 0.25}, {3}).requires_grad_();
  Tensor w = from_vector<double>({0.5, 3.0, -0.1}, {3});
  nn::RMSprop opt({p}, 0.01, /*alpha=*/0.9, /*eps=*/1e-3, /*weight_decay=*/0.1);
  const std::vector<std::vector<double>> want = {{0.9685430162598789, -2.0315871026056413, 0.2803433870675817},
                                                 {0.9457460607550217, -2.054497623120027, 0.3021495563065636}};
  for (const auto& want_p : want) {
    opt.zero_grad();
    backward_linear(p, w);
    opt.step();
    const std::vector<double> got = p.detach().to_vector<double>();
    for (size_t k = 0; k < 3; ++k) CHECK(got[k] == doctest::Approx(want_p[k]).epsilon(1e-12));
  }
}

TEST_CASE("RMSprop: a closed gate changes neither parameters nor state; an open one is a plain step") {
  Tensor w = rand_tensor({4, 3}, 11, false, -2, 2, DType::F32);
  Tensor a = rand_tensor({4, 3}, 12, false, -1, 1, DType::F32).requires_grad_();
  Tensor b = clone(a.detach()).requires_grad_();
  nn::RMSprop oa({a}, 0.01), ob({b}, 0.01);
  for (int step = 0; step < 3; ++step) {
    INFO("step ", step);
    for (auto [p, opt] : {std::pair{a, &oa}, std::pair{b, &ob}}) {
      opt->zero_grad();
      backward_linear(p, w);
    }
    if (step == 1) {  // a's step is gated off: a and its state stay as they were
      const std::vector<float> before = a.detach().to_vector<float>();
      const std::vector<float> state = oa.state().at(0).second.to_vector<float>();
      oa.step(zeros({}, {DType::F64}));
      CHECK(a.detach().to_vector<float>() == before);
      CHECK(oa.state().at(0).second.to_vector<float>() == state);
      continue;  // b skips this step too, so the two stay in step
    }
    oa.step(full({}, 1.0, {DType::F64}));  // open gate
    ob.step();                             // no gate
    CHECK(a.detach().to_vector<float>() == b.detach().to_vector<float>());
  }
  CHECK_THROWS_WITH(oa.step(zeros({2}, {DType::F64})), doctest::Contains("the gate must be a float64 scalar"));
}

TEST_CASE("RMSprop: state() names the averages, and load_state continues exactly") {
  Tensor w1 = rand_tensor({5}, 21), w2 = rand_tensor({2, 3}, 22);
  auto make = [] {
    return std::vector<Tensor>{rand_tensor({5}, 31).requires_grad_(), rand_tensor({2, 3}, 32).requires_grad_()};
  };
  std::vector<Tensor> pa = make(), pb = make();
  nn::RMSprop oa(pa, 0.05), ob(pb, 0.05);
  auto step = [&](std::vector<Tensor>& p, nn::RMSprop& opt) {
    opt.zero_grad();
    sum(mul(p[0], w1)).backward();
    sum(mul(tanh(p[1]), w2)).backward();
    opt.step();
  };
  step(pa, oa);
  const nn::NamedTensors s = oa.state();
  REQUIRE(s.size() == 2);
  CHECK(s[0].first == "square_avg.0");
  CHECK(s[1].first == "square_avg.1");
  CHECK(s[1].second.shape() == Shape{2, 3});
  // b takes a's parameters and state, then both take the same step.
  {
    autograd::NoGrad ng;
    for (size_t i = 0; i < pa.size(); ++i) copy_(pb[i], pa[i].detach());
  }
  ob.load_state(s);
  step(pa, oa);
  step(pb, ob);
  for (size_t i = 0; i < pa.size(); ++i) CHECK(pa[i].detach().to_vector<double>() == pb[i].detach().to_vector<double>());
  CHECK_THROWS_WITH(ob.load_state({s[0]}), doctest::Contains("optimizer state has 1 tensors, expected 2"));
}

TEST_SUITE("cuda") {

TEST_CASE("CUDA vs CPU: RMSprop (with weight decay, clipped), step by step, gated" *
          doctest::skip(!cuda::is_available())) {
  const Device kCuda = Device::cuda(0);
  for (DType dt : {DType::F32, DType::F64}) {
    for (double wd : {0.0, 0.02}) {
      INFO(dt, ", weight decay ", wd);
      const double rtol = dt == DType::F32 ? 1e-5 : 1e-12, atol = dt == DType::F32 ? 1e-6 : 1e-12;
      const std::vector<Shape> shapes = {{5, 7}, {13}, {3, 4, 2}, {6}};
      std::vector<Tensor> pc, pg, w;
      for (size_t i = 0; i < shapes.size(); ++i) {
        Tensor t = rand_tensor(shapes[i], 100 + i, false, -1, 1, dt);
        pc.push_back(clone(t).requires_grad_());
        pg.push_back(t.to(kCuda).requires_grad_());
        w.push_back(rand_tensor(shapes[i], 200 + i, false, -2, 2, dt));
      }
      nn::RMSprop oc(pc, 0.01, 0.99, 1e-8, wd), og(pg, 0.01, 0.99, 1e-8, wd);
      for (int step = 0; step < 5; ++step) {
        INFO("step ", step);
        for (int side = 0; side < 2; ++side) {
          const std::vector<Tensor>& p = side == 0 ? pc : pg;
          nn::RMSprop& opt = side == 0 ? oc : og;
          opt.zero_grad();
          Tensor loss;
          // The last parameter gets a gradient only on odd steps: the optimizer skips it otherwise.
          for (size_t i = 0; i < p.size(); ++i) {
            if (i == 3 && step % 2 == 0) continue;
            Tensor term = sum(mul(tanh(p[i]), w[i].to(p[i].device())));
            loss = loss.defined() ? add(loss, term) : term;
          }
          loss.backward();
          nn::clip_grad_norm_(p, 0.5);
          if (step == 2) {  // closed gate, on the parameters' device: nothing may change
            std::vector<std::vector<double>> before;
            for (const Tensor& t : p) before.push_back(t.detach().to(Device::cpu()).to_vector<double>());
            for (const auto& [name, t] : opt.state()) before.push_back(t.to(Device::cpu()).to_vector<double>());
            opt.step(zeros({}, {DType::F64, p[0].device()}));
            size_t k = 0;
            for (const Tensor& t : p) CHECK(t.detach().to(Device::cpu()).to_vector<double>() == before[k++]);
            for (const auto& [name, t] : opt.state()) CHECK(t.to(Device::cpu()).to_vector<double>() == before[k++]);
          } else if (step == 3) {
            opt.step(full({}, 1.0, {DType::F64, p[0].device()}));
          } else {
            opt.step();
          }
        }
        check_params_close(pg, pc, atol, rtol, "parameter");
        check_state_close(og.state(), oc.state(), atol, rtol);
      }
    }
  }
}

TEST_CASE("CUDA vs CPU: RMSprop over 70 parameters (three multi-tensor groups), some without a gradient" *
          doctest::skip(!cuda::is_available())) {
  const Device kCuda = Device::cuda(0);
  std::vector<Tensor> pc, pg;
  for (int i = 0; i < 70; ++i) {
    Tensor t = rand_tensor({1 + i % 7, 1 + i % 3}, 300 + i, false, -1, 1, DType::F32);
    pc.push_back(clone(t).requires_grad_());
    pg.push_back(t.to(kCuda).requires_grad_());
  }
  nn::RMSprop oc(pc, 0.02, 0.99, 1e-8, 0.01), og(pg, 0.02, 0.99, 1e-8, 0.01);
  for (int step = 0; step < 3; ++step) {
    INFO("step ", step);
    for (int side = 0; side < 2; ++side) {
      std::vector<Tensor>& p = side == 0 ? pc : pg;
      nn::RMSprop& opt = side == 0 ? oc : og;
      opt.zero_grad();
      Tensor loss;
      for (size_t i = 0; i < p.size(); ++i) {
        if (i % 11 == 5) continue;  // no gradient: skipped by both
        Tensor term = sum(mul(p[i], p[i]));
        loss = loss.defined() ? add(loss, term) : term;
      }
      loss.backward();
      opt.step();
    }
    for (size_t i = 0; i < pc.size(); ++i) CHECK_CLOSE(pg[i].detach().to(Device::cpu()), pc[i].detach(), 1e-6, 1e-5);
    const nn::NamedTensors sc = oc.state(), sg = og.state();
    for (size_t k = 0; k < sc.size(); ++k) CHECK_CLOSE(sg[k].second.to(Device::cpu()), sc[k].second, 1e-6, 1e-5);
  }
}

}  // TEST_SUITE("cuda")
