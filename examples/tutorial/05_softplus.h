// Chapter 5 (docs/tutorial/05-cuda-kernel.md): the CUDA kernels of softplus,
// as plain C++ functions. This header has no CUDA types, so the host program
// (05_cuda_kernel.cpp, compiled by the host compiler) can call them; only
// 05_softplus.cu sees CUDA. The framework does the same for its own kernels:
// cuda/kernels.h declares them, cuda/*.cu define them.
#pragma once

#include <tcn/tcn.h>

namespace tut {

// y = softplus(x) = max(x, 0) + log1p(exp(-|x|)), elementwise. x and y are
// contiguous, on the same CUDA device, of one float dtype, with the same shape.
void softplus_forward_cuda(const tcn::Tensor& y, const tcn::Tensor& x);

// gx = g * sigmoid(x) (d softplus / dx = sigmoid), elementwise; all three
// contiguous, same device, dtype and shape.
void softplus_backward_cuda(const tcn::Tensor& gx, const tcn::Tensor& g, const tcn::Tensor& x);

}  // namespace tut
