// Chapter 5 (docs/tutorial/05-cuda-kernel.md): a CUDA kernel for a new op.
// softplus gets a forward and a backward kernel (05_softplus.cu); this host
// program wraps them into a differentiable op that runs on CUDA tensors (and
// on the CPU with a plain loop), then checks the device against a CPU
// computation and the gradient against finite differences.
//
// Built with TCN_CUDA=EMU the device is the emulated one: the kernels run on
// the CPU, which checks their logic and never their speed; everything this
// program prints about the device says EMULATED then. Without a usable CUDA
// device (a real-CUDA build on a machine without a GPU) it exits 77, which
// ctest reports as skipped.
#include <tcn/tcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "05_softplus.h"
#include "check.h"
#include "gradcheck.h"

using tcn::Tensor;
using tcn::TensorList;
using tut::check;

// The CPU twin of the forward kernel (chapter 2's loop).
Tensor softplus_cpu(const Tensor& x) {
  using namespace tcn;
  Tensor y = empty(x.shape(), x.options());
  dispatch_float(x.dtype(), "softplus", [&]<class T>() {
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) yp[i] = std::max(xp[i], T(0)) + std::log1p(std::exp(-std::abs(xp[i])));
  });
  return y;
}

// ---- the differentiable op ---------------------------------------------------
// Forward on x's device (the CUDA kernel, or the CPU loop); the backward closure
// recorded on the tape runs the backward kernel on the same device. Nothing in
// the framework needs to know about this op: ops are plain functions that
// branch on the device, and autograd::record is how any function joins the tape.
Tensor softplus(const Tensor& x_in) {
  using namespace tcn;
  TCN_CHECK(x_in.dtype() == DType::F32 || x_in.dtype() == DType::F64, "softplus: expected a float32 or float64 tensor, got ",
            x_in.dtype());
  const Tensor x = x_in.detach().contiguous();  // the kernels read dense arrays
  Tensor y;
  if (x.device().is_cuda()) {
    y = empty(x.shape(), x.options());  // device memory, from the device's caching allocator
    tut::softplus_forward_cuda(y, x);    // queued on the device's stream: no host wait
  } else {
    y = softplus_cpu(x);
  }
  if (autograd::needs_grad({x_in})) {
    autograd::record("softplus", {x_in}, {y}, [x](const TensorList& g) {
      // g[0] may be a broadcast view (sum's backward expands a scalar), and
      // the kernel wants a dense array: contiguous() copies it on the device.
      const Tensor gy = g[0].contiguous();
      if (!x.device().is_cuda()) return TensorList{gy * sigmoid(x)};
      Tensor gx = empty(x.shape(), x.options());
      tut::softplus_backward_cuda(gx, gy, x);
      return TensorList{gx};
    });
  }
  return y;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

int main() {
  using namespace tcn;
  if (!cuda::is_available()) {  // device_count() is 0 (never a crash) when cudaGetDeviceCount fails
    std::printf("tutorial_05_cuda_kernel: skipped, no usable CUDA device (%s)\n",
                cuda::built_with_cuda() ? cuda::unavailable_reason().c_str() : "tcn was built without CUDA");
    return 77;
  }
  const bool emu = cuda::emulated();
  const std::string where = emu ? " (on the EMULATED device)" : " (on the GPU)";
  std::printf("      build %s, %d CUDA device(s)%s\n", build_config(), cuda::device_count(),
              emu ? ": EMULATED, kernels run on the CPU to check their logic, never their speed" : "");
  const Device gpu = Device::cuda();
  const TensorOptions f64 = TensorOptions{}.with(DType::F64);
  Generator gen(5);

  // ---- forward: the kernel against the CPU, in both precisions -------------
  // Both branches of |x|, zero, and values where exp(x) overflows.
  const Tensor edge = tensor({-1000, -40, -3, -0.5, 0, 0.5, 3, 40, 1000}, {9});
  for (const DType dt : {DType::F32, DType::F64}) {
    const Tensor x = cat({edge.to(dt), randn({1000}, TensorOptions{}.with(dt), gen) * 5.0}, 0);
    const Tensor on_device = softplus(x.to(gpu));
    check(on_device.device().is_cuda(), std::string("softplus of a CUDA tensor stays on the device, ") + dtype_name(dt));
    const double err = max_abs_diff(on_device.to(Device::cpu()).to_vector<double>(), softplus_cpu(x).to_vector<double>());
    const double tol = dt == DType::F32 ? 1e-5 : 1e-13;  // device math may differ from the host's in the last bits
    std::printf("      %s: max |CUDA - CPU| %.2e over %lld values\n", dtype_name(dt), err,
                static_cast<long long>(x.numel()));
    check(err <= tol, std::string("forward kernel equals the CPU loop") + where + ", " + dtype_name(dt));
  }
  const auto big = softplus(tensor({1000, -1000}, {2}).to(gpu)).to(Device::cpu()).to_vector<float>();
  check(big[0] == 1000.0f && big[1] == 0.0f, "softplus(1000) = 1000 and softplus(-1000) = 0 in float32: no overflow");

  // A non-contiguous input (a transposed view): softplus makes it contiguous first.
  const Tensor m = randn({3, 4}, {}, gen);
  check(max_abs_diff(softplus(m.to(gpu).t()).to(Device::cpu()).to_vector<double>(),
                     softplus_cpu(m.t().contiguous()).to_vector<double>()) <= 1e-6,
        "a transposed CUDA view gives the transposed result");

  // Many blocks and a partial last block (2^20 + 3 elements).
  const Tensor large = randn({(int64_t{1} << 20) + 3}, {}, gen) * 4.0;
  const Tensor large_dev = large.to(gpu);
  cuda::synchronize();
  const auto start = std::chrono::steady_clock::now();
  const Tensor large_y = softplus(large_dev);
  cuda::synchronize();  // kernels are asynchronous: wait before reading the clock
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const double err_large = max_abs_diff(large_y.to(Device::cpu()).to_vector<double>(), softplus_cpu(large).to_vector<double>());
  std::printf("      %lld elements (%u blocks of 256): %.2f ms%s, max |CUDA - CPU| %.2e\n",
              static_cast<long long>(large.numel()), static_cast<unsigned>((large.numel() + 255) / 256), ms,
              emu ? " EMULATED wall time, not a speed" : "", err_large);
  check(err_large <= 1e-5, "2^20 + 3 elements: every block and the partial last one are right" + where);

  // ---- backward: the kernel against the CPU formula -------------------------
  Tensor xd = randn({6, 7}, f64, gen).to(gpu).requires_grad_();  // a CUDA leaf
  const Tensor w = randn({6, 7}, f64, gen);
  sum(softplus(xd) * w.to(gpu)).backward();
  check(xd.grad().defined() && xd.grad().device().is_cuda(), "backward left d loss / dx on the device");
  const Tensor x_host = xd.detach().to(Device::cpu());
  const Tensor want = w * sigmoid(x_host);
  const double err_bwd = max_abs_diff(xd.grad().to(Device::cpu()).to_vector<double>(), want.to_vector<double>());
  std::printf("      backward: max |CUDA grad - w * sigmoid(x)| %.2e\n", err_bwd);
  check(err_bwd <= 1e-13, "the backward kernel's gradient equals w * sigmoid(x)" + where);

  // ---- finite differences through the device --------------------------------
  // gradcheck (chapter 2) nudges float64 CPU leaves; f moves them to the
  // device (to() is differentiable: its backward copies the gradient back), so
  // both the numeric and the analytic side run the CUDA kernels.
  Tensor xc = (randn({4, 5}, f64, gen) * 3.0).requires_grad_();
  const Tensor wc = randn({4, 5}, f64, gen).to(gpu);
  const double err_fd = tut::gradcheck(
      [&](const TensorList& in) { return sum(softplus(in[0].to(gpu)) * wc).to(Device::cpu()); }, {xc});
  std::printf("      finite-difference check on the device: max gradient error %.2e\n", err_fd);
  check(err_fd < 1e-7, "the CUDA op passes the float64 gradient check (error < 1e-7)" + where);

  // ---- the tape knows nothing of devices ------------------------------------
  // softplus inside a small CUDA computation: gradients flow through the
  // framework's own kernels and ours alike.
  Tensor a = randn({8}, {}, gen).to(gpu).requires_grad_();
  const Tensor loss = mean(softplus(a * 2.0) - a);
  loss.backward();
  const Tensor a_host = a.detach().to(Device::cpu());
  const Tensor want_a = (sigmoid(a_host * 2.0) * 2.0 - 1.0) / 8.0;
  check(max_abs_diff(a.grad().to(Device::cpu()).to_vector<double>(), want_a.to_vector<double>()) <= 1e-6,
        "d mean(softplus(2a) - a) / da = (2 sigmoid(2a) - 1) / 8 through framework and tutorial kernels");
  if (emu) check(!cuda::verified_on_gpu(), "the emulated device never counts as a verified GPU");

  return tut::finish("tutorial_05_cuda_kernel");
}
