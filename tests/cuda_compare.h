// CUDA-vs-CPU comparison helper shared by the CUDA test files: runs a function
// on CPU leaves and on their CUDA copies and compares values and gradients.
#pragma once

#include <algorithm>
#include <functional>
#include <numeric>

#include "helpers.h"
#include "core/backends.h"
#include "nn/layers.h"
#include "nn/module.h"

namespace tcn::test {

// Sets the process's CUDA backends (core/backends.h) for a scope and restores
// them. Tests that demand bit-exact repeats, or count our own kernels, pin the
// GEMM path with it: under the default (auto) a GPU may choose cuDNN per shape.
using Backends = BackendsScope;

inline CudaBackends conv_on(ConvImpl c, bool deterministic = false) {
  CudaBackends b;
  b.conv = c;
  b.deterministic = deterministic;
  return b;
}

// A copy of t on `device` with t's layout: a dense buffer whose dims are laid
// out in the order of t's strides (a transposed view stays a transposed view),
// detached, so it can be a leaf. Device copies alone would make every input
// contiguous, and the kernels' strided paths would go untested.
inline Tensor copy_with_layout(const Tensor& t, Device device) {
  std::vector<int64_t> perm(t.dim());
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  std::vector<int64_t> inv(t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) inv[perm[i]] = i;
  Tensor dense = clone(t.detach().permute(perm)).to(device);
  return dense.permute(inv).detach();
}

// Runs f on CPU leaves and on their CUDA copies (both with the inputs' layouts); compares outputs and the
// gradients of sum(f(...) * w). Each side runs forward and backward before the
// other starts: backward() frees the whole tape, so a graph built before it
// (the other side's) could no longer be differentiated.
// `constant[i]` true: input i is a constant on both sides (no gradient asked for).
inline void compare(const std::function<Tensor(const TensorList&)>& f, const TensorList& cpu_inputs, double rtol,
                    double atol = 1e-7, const std::vector<bool>& constant = {}) {
  TensorList cpu, gpu;
  for (size_t i = 0; i < cpu_inputs.size(); ++i) {
    const Tensor& t = cpu_inputs[i];
    Tensor c = copy_with_layout(t, Device::cpu());
    Tensor g = copy_with_layout(t, Device::cuda(0));
    REQUIRE(g.strides() == c.strides());
    if (is_floating(t.dtype()) && !(i < constant.size() && constant[i])) {
      c.requires_grad_();
      g.requires_grad_();
    }
    cpu.push_back(c);
    gpu.push_back(g);
  }
  Tensor yc = f(cpu);
  Tensor w = rand_tensor(yc.shape(), 99, false, -1, 1, yc.dtype());
  if (yc.requires_grad()) sum(mul(yc, w)).backward();
  Tensor yg = f(gpu);
  REQUIRE(yg.device() == Device::cuda(0));
  CHECK_CLOSE(yg.to(Device::cpu()), yc, atol, rtol);
  REQUIRE(yg.requires_grad() == yc.requires_grad());
  if (yg.requires_grad()) sum(mul(yg, w.to(Device::cuda(0)))).backward();
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (!cpu[i].requires_grad() || !cpu[i].grad().defined()) continue;
    INFO("gradient of input ", i);
    REQUIRE(gpu[i].grad().defined());
    CHECK(gpu[i].grad().device() == Device::cuda(0));
    CHECK_CLOSE(gpu[i].grad().to(Device::cpu()), cpu[i].grad(), atol, rtol);
  }
}

// CUDA tensors (parameters, gradients), each compared with its CPU counterpart.
inline void check_params_close(const std::vector<Tensor>& gpu, const std::vector<Tensor>& cpu, double atol,
                               double rtol, const char* what) {
  REQUIRE(gpu.size() == cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    INFO(what, " ", i, " ", cpu[i].shape());
    REQUIRE(gpu[i].device().is_cuda());
    CHECK_CLOSE(gpu[i].to(Device::cpu()), cpu[i], atol, rtol);
  }
}

// The gradients of parameters (or inputs), in order; each must exist.
inline std::vector<Tensor> grads(const std::vector<Tensor>& params) {
  std::vector<Tensor> g;
  for (const Tensor& p : params) {
    REQUIRE(p.grad().defined());
    g.push_back(p.grad());
  }
  return g;
}

// Two nn::LSTMs with equal weights, one on the CPU and one on CUDA, run on the
// same input [B, T, E] from a given state [layers, B, H]; every output, the
// final state, the gradients of the input and the state, and every parameter
// gradient compared (the loss weighs outputs and state with random weights).
inline void compare_lstm(nn::LSTM& cpu, nn::LSTM& gpu, int64_t B, int64_t T, uint64_t seed, double atol, double rtol) {
  const int64_t E = cpu.input_size, H = cpu.hidden, L = cpu.layers;
  Tensor x = rand_tensor({B, T, E}, seed, false, -1, 1, DType::F32);
  Tensor h0 = rand_tensor({L, B, H}, seed + 1, false, -1, 1, DType::F32);
  Tensor c0 = rand_tensor({L, B, H}, seed + 2, false, -1, 1, DType::F32);
  Tensor w = rand_tensor({B, T, H}, seed + 3, false, -1, 1, DType::F32);
  Tensor wh = rand_tensor({L, B, H}, seed + 4, false, -1, 1, DType::F32);
  auto run = [&](nn::LSTM& m, Device dev) {
    Tensor xd = x.detach().to(dev).requires_grad_(), hd = h0.detach().to(dev).requires_grad_();
    Tensor cd = c0.detach().to(dev).requires_grad_();
    auto [out, st] = m.forward(xd, nn::LSTM::State{hd, cd});
    add(sum(mul(out, w.to(dev))), sum(mul(add(st.h, st.c), wh.to(dev)))).backward();
    return std::vector<Tensor>{out.detach(), st.h.detach(), st.c.detach(), xd.grad(), hd.grad(), cd.grad()};
  };
  auto rc = run(cpu, Device::cpu()), rg = run(gpu, Device::cuda(0));
  const char* names[] = {"output", "h_n", "c_n", "dx", "dh0", "dc0"};
  for (size_t i = 0; i < rc.size(); ++i) {
    INFO(names[i]);
    CHECK_CLOSE(rg[i].to(Device::cpu()), rc[i], atol, rtol);
  }
  check_params_close(grads(gpu.parameters()), grads(cpu.parameters()), atol, rtol, "gradient of parameter");
}

// Two optimizers' state() (CUDA and CPU): the same names in the same order, close values.
inline void check_state_close(const nn::NamedTensors& gpu, const nn::NamedTensors& cpu, double atol, double rtol) {
  REQUIRE(gpu.size() == cpu.size());
  for (size_t k = 0; k < cpu.size(); ++k) {
    INFO("state ", cpu[k].first);
    CHECK(gpu[k].first == cpu[k].first);
    CHECK_CLOSE(gpu[k].second.to(Device::cpu()), cpu[k].second, atol, rtol);
  }
}

}  // namespace tcn::test
