// The CUDA kernels of the primitive ops, as plain C++ functions (the ops in
// ops/ are compiled by the host compiler and call these; only cuda/*.cu see
// CUDA types). Declared always, defined only when tcn is built with CUDA:
// ops call them through TCN_CUDA_OP, which becomes "built without CUDA"
// otherwise.
//
// Conventions as in ops/: outputs first, tensors already checked (same device,
// dtype, broadcastable shapes), any strides unless stated.
//
// STATUS (2026-12-02): compiled and linked in CI, never run on a GPU yet (no GPU
// has been lent to this project's sessions). Their CPU-vs-CUDA tests in
// tests/test_cuda_ops.cpp are skipped until then; cuda::kernels_available()
// stays false so no trainer picks the GPU by itself.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tcn::cuda {

enum class UnaryOp { Neg, Relu, Tanh, Sigmoid, Exp, Log, Sqrt, Pow, AddScalar, MulScalar };
enum class BinaryOp { Add, Sub, Mul, Div };

// y = op(x), y contiguous with x's shape. `param` is the exponent or the scalar.
void unary_forward(UnaryOp op, double param, const Tensor& y, const Tensor& x);
// gx = d op / dx * g, from g and the kept x and/or y (undefined ones are not read).
void unary_backward(UnaryOp op, double param, const Tensor& gx, const Tensor& g, const Tensor& x, const Tensor& y);
// out = a op b, a and b broadcast to out's shape.
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b);
// dst = src (src broadcast to dst's shape; both on the same device; any dtype, equal).
void copy(const Tensor& dst, const Tensor& src);
void fill(const Tensor& x, double value);
// x += alpha * y (y broadcast), in place.
void add_inplace(const Tensor& x, const Tensor& y, double alpha);
void mul_inplace(const Tensor& x, double s);
// out (contiguous, keepdim shape of x with 1s at `reduced`) = sum of x over the reduced dims.
void sum(const Tensor& out, const Tensor& x, const std::vector<bool>& reduced);
// out[b] = a[b] @ b[b] for [B, M, K] x [B, K, N] -> contiguous [B, M, N]; strided
// operands whose rows or columns are unit-stride go to cuBLAS as they are.
void batched_gemm(const Tensor& out, const Tensor& a, const Tensor& b);
// Strict FP32 GEMMs (the default) or TF32 tensor cores.
void set_allow_tf32(bool allow);

}  // namespace tcn::cuda

// In an op's CUDA branch: the kernel call when built with CUDA, else a clear error.
#ifdef TCN_WITH_CUDA
#define TCN_CUDA_OP(op_name, ...) __VA_ARGS__
#else
#define TCN_CUDA_OP(op_name, ...) ::tcn::no_cuda_kernel(op_name)
#endif
