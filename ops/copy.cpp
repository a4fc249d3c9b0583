// Copies: contiguous() (the one copy the view system ever makes), clone,
// device and dtype conversion, and copy_ into an existing (possibly strided) view.
#include <bit>
#include <cstdint>
#include <type_traits>

#include "cuda/kernels.h"
#include "ops/cpu_map.h"
#include "ops/dispatch.h"
#include "ops/ops.h"
#include "core/math/simd.h"

namespace tcn {

namespace {

// dst = src for CPU tensors of the same dtype, src broadcast to dst's shape.
void copy_cpu(const Tensor& dst, const Tensor& src) {
  dispatch_all(dst.dtype(), [&]<class T>() { cpu::cpu_map<T>(dst, [](T v) { return v; }, src); });
}

// float32 -> bfloat16 over contiguous rows, the conversion mixed precision
// makes of every GEMM operand: bfloat16::round without its branch, so that it
// vectorises (compiled per ISA: core/math/simd.h).
TCN_SIMD_CLONES void float_to_bf16_row(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(in[i]);
    const uint32_t nearest_even = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (u >> 16) | 0x0040u;
    out[i] = static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : nearest_even);
  }
}

// dst = src converted to dst's dtype, any strides, same shape, on the CPU
// (float -> bfloat16 rounds to nearest even: core/bfloat16.h).
void convert_cpu(const Tensor& dst, const Tensor& src) {
  dispatch_all(dst.dtype(), [&]<class D>() {
    D* o = dst.data<D>();
    dispatch_all(src.dtype(), [&]<class S>() {
      const S* in = src.data<S>();
      cpu::for_each_row<2>(dst.shape(), {dst.strides(), src.strides()}, [&](const auto& off, int64_t n, const auto& inc) {
        if constexpr (std::is_same_v<D, bfloat16> && std::is_same_v<S, float>) {
          if (inc[0] == 1 && inc[1] == 1)
            return float_to_bf16_row(in + off[1], reinterpret_cast<uint16_t*>(o + off[0]), n);
        }
        for (int64_t i = 0; i < n; ++i) o[off[0] + i * inc[0]] = static_cast<D>(in[off[1] + i * inc[1]]);
      });
    });
  });
}

}  // namespace

void copy_(const Tensor& dst, const Tensor& src) {
  const profile::Op range("copy_");
  check_defined("copy_", dst, "destination");
  check_defined("copy_", src, "source");
  profile::add_bytes(2 * nbytes(dst));
  TCN_CHECK(!(dst.requires_grad() && autograd::grad_enabled()), "copy_: in-place update of a tensor that requires grad (shape ",
            dst.shape(), "); run it under autograd::NoGrad");
  broadcast_shapes(dst.shape(), src.shape(), "copy_");  // throws on mismatch
  Tensor s = src.detach();
  if (s.shape() != dst.shape()) s = s.expand(dst.shape());
  const Device dd = dst.device(), sd = s.device();
  // Between dtypes: a converting copy within one device (e.g. float32 into a
  // bfloat16 buffer, one pass); across devices the dtypes must match.
  if (dst.dtype() != src.dtype()) {
    TCN_CHECK(dd == sd, "copy_: dtype mismatch, ", dst.dtype(), " ", dst.shape(), " on ", dd.str(), " vs ", src.dtype(),
              " ", src.shape(), " on ", sd.str(), " (a converting copy runs within one device; use .to(dtype))");
    if (dd.is_cpu())
      convert_cpu(dst, s);
    else
      TCN_CUDA_OP("copy_", cuda::convert(dst, s));
    return;
  }
  if (dd.is_cpu() && sd.is_cpu()) {
    copy_cpu(dst, s);
    return;
  }
  if (dd == sd) {  // within one GPU: any strides, one kernel
    TCN_CUDA_OP("copy_", cuda::copy(dst, s));
    return;
  }
  // Across devices: through contiguous buffers (host <-> device, or via the host).
  const size_t nbytes = dst.numel() * dtype_size(dst.dtype());
  Tensor from = s.contiguous();
  if (sd.is_cuda() && dd.is_cuda()) from = from.to(Device::cpu());
  Tensor to = dst.is_contiguous() ? dst : empty(dst.shape(), dst.options());
  if (from.device().is_cpu())
    cuda::copy_host_to_device(to.raw_data(), from.raw_data(), nbytes);
  else
    cuda::copy_device_to_host(to.raw_data(), from.raw_data(), nbytes);
  if (!to.shares_storage(dst)) copy_(dst, to);
}

Tensor clone(const Tensor& x) {
  check_defined("clone", x);
  Tensor out = empty(x.shape(), x.options());
  copy_(out, x);
  if (autograd::needs_grad({x}))
    autograd::record("clone", {x}, {out}, [](const TensorList& g) { return TensorList{g[0]}; });
  return out;
}

// The tape's copy of a gradient (autograd/tape.h) and a leaf's gradient set by hand.
Tensor autograd::gradient_copy(const Tensor& g) { return clone(g); }

void Tensor::set_grad(const Tensor& g) const {
  TCN_CHECK(requires_grad() && is_leaf(), "set_grad(): tensor is not a leaf that requires grad");
  if (!g.defined()) {
    impl().autograd->grad = Tensor();
    return;
  }
  TCN_CHECK(g.shape() == shape() && g.dtype() == dtype() && g.device() == device(), "set_grad(): gradient ", g.dtype(),
            " ", g.shape(), " on ", g.device(), " does not match the tensor, ", dtype(), " ", shape(), " on ", device());
  autograd::NoGrad ng;
  impl().autograd->grad = clone(g.detach());  // a leaf's gradient is contiguous storage it owns alone
}

Tensor contiguous(const Tensor& x) {
  check_defined("contiguous", x);
  return x.is_contiguous() ? x : clone(x);
}

Tensor to_device(const Tensor& x, Device device) {
  const profile::Op range("to_device");
  check_defined("to", x);
  if (x.device() == device) return x;
  Tensor out = empty(x.shape(), {x.dtype(), device});
  copy_(out, x);
  if (autograd::needs_grad({x}))
    autograd::record("to_device", {x}, {out}, [from = x.device()](const TensorList& g) {
      return TensorList{to_device(g[0], from)};
    });
  return out;
}

Tensor to_dtype(const Tensor& x, DType dtype) {
  const profile::Op range("to_dtype");
  check_defined("to", x);
  if (x.dtype() == dtype) return x;
  Tensor out = empty(x.shape(), {dtype, x.device()});
  if (x.device().is_cuda()) TCN_CUDA_OP("to_dtype", cuda::convert(out, x.detach()));
  else convert_cpu(out, x.detach());
  if (autograd::needs_grad({x}) && is_floating(dtype))
    autograd::record("to_dtype", {x}, {out}, [from = x.dtype()](const TensorList& g) {
      return TensorList{to_dtype(g[0], from)};
    });
  return out;
}

}  // namespace tcn
