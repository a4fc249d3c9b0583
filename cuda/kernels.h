// The CUDA kernels of the primitive ops, as plain C++ functions (the ops in
// ops/ are compiled by the host compiler and call these; only cuda/*.cu see
// CUDA types). Declared always, defined only when tcn is built with CUDA:
// ops call them through TCN_CUDA_OP, which becomes "built without CUDA"
// otherwise.
//
// Conventions as in ops/: outputs first, tensors already checked (same device,
// dtype, broadcastable shapes), any strides unless stated.
//
// Every kernel runs in CI on the emulated device (TCN_CUDA=EMU, docs/emulator.md)
// against its CPU twin (tests/op_cases.cpp, test_cuda_ops.cpp, test_cuda_train.cpp). Whether
// they have been verified on a GPU is cuda::verified_on_gpu() (the README's
// results say when); until then no trainer picks the GPU by itself, and an
// explicit --device cuda runs them with a warning.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "core/math/op_lists.h"

namespace tcn::cuda {

// One value per functor of core/math/functors.h, in the order of core/math/op_lists.h.
#define TCN_OP_ENUM_VALUE(Name) Name,
enum class UnaryOp { TCN_UNARY_OPS(TCN_OP_ENUM_VALUE) };
enum class BinaryOp { TCN_BINARY_OPS(TCN_OP_ENUM_VALUE) };
#undef TCN_OP_ENUM_VALUE

// y = op(x), y contiguous with x's shape. `param` is the exponent or the scalar.
void unary_forward(UnaryOp op, double param, const Tensor& y, const Tensor& x);
// gx = d op / dx * g, from g and the kept x and/or y (undefined ones are not read).
void unary_backward(UnaryOp op, double param, const Tensor& gx, const Tensor& g, const Tensor& x, const Tensor& y);
// out = a op b, a and b broadcast to out's shape.
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b);
// dst = src (src broadcast to dst's shape; both on the same device; any dtype, equal).
void copy(const Tensor& dst, const Tensor& src);
void fill(const Tensor& x, double value);
// dst = src converted to dst's dtype (same shape, same device, any strides).
void convert(const Tensor& dst, const Tensor& src);
// values, indices (contiguous, x's shape without `dim`) = max of x along dim (first index on ties).
void max_along(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim);
// x += alpha * y (y broadcast), in place.
void add_inplace(const Tensor& x, const Tensor& y, double alpha);
void mul_inplace(const Tensor& x, double s);
// x *= s for a tensor s broadcast to x (a device scalar: no host read).
void mul_inplace(const Tensor& x, const Tensor& s);
// out (contiguous, keepdim shape of x with 1s at `reduced`) = sum of x over the reduced dims.
void sum(const Tensor& out, const Tensor& x, const std::vector<bool>& reduced);
// out[b] = a[b] @ b[b] for [B, M, K] x [B, K, N] -> contiguous [B, M, N], non-empty
// with K > 0 (ops/matmul.cpp handles empty products); strided
// operands whose rows or columns are unit-stride go to cuBLAS as they are.
// bf16 a and b (mixed precision) give a float32 out, accumulated in float32.
// tf32: float32 products on TF32 tensor cores (--precision tf32, core/autocast.h);
// otherwise strict FP32, PyTorch's default too. The op decides, at its entry.
void batched_gemm(const Tensor& out, const Tensor& a, const Tensor& b, bool tf32);
// Row-major C = op(A) @ op(B) + beta * C on device pointers of `dtype`, exactly
// as cblas_?gemm(CblasRowMajor, ...) on the CPU (ops/cpu_blas.h). dtype BF16:
// A and B bfloat16, C float32 (cublasGemmEx, float32 accumulation); tf32 as in
// batched_gemm. With a
// GemmBatch, `count` such products in one cuBLAS call (strided batched),
// product i on A + i*stride_a, B + i*stride_b, C + i*stride_c (in elements; an
// operand's stride may be 0, C's must keep the outputs apart).
struct GemmBatch {
  int64_t count = 1, stride_a = 0, stride_b = 0, stride_c = 0;
};
void gemm(DType dtype, bool tf32, int device, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const void* A,
          int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc, GemmBatch batch = {});
// Checks on the device that every element of idx (int64, contiguous) is in
// [0, bound), without a host synchronisation: the first one that is not is
// recorded for cuda::raise_device_errors() (core/devices.h), which the host
// runs whenever it next waits for the device. `what` names the check in the
// error. The kernels below skip out-of-range indices, so nothing reads or
// writes out of bounds meanwhile.
enum class DeviceCheck : int32_t { None = 0, GatherRows, ScatterAddRows, CrossEntropyTarget };
void check_index_range(DeviceCheck what, const Tensor& idx, int64_t bound);
// out [N, D] = table rows idx[i] (idx int64 [N], contiguous); a row whose index
// is out of range is zero (the check above reports it).
void gather_rows(const Tensor& out, const Tensor& table, const Tensor& idx);
// out [V, D] (zeroed by the caller) += src rows [N, D] at idx; duplicates summed
// in index order: deterministic. Out-of-range indices are skipped.
void scatter_add_rows(const Tensor& out, const Tensor& src, const Tensor& idx);
// Per-row log-sum-exp (float64 [N]) and the mean loss (scalar, logits' dtype) of
// contiguous logits rows [N, V]; targets int64 [N].
void cross_entropy_forward(const Tensor& loss, const Tensor& lse, const Tensor& logits, const Tensor& targets);
// dlogits [N, V] = scale * (softmax - onehot), scale = dloss / N read on the device.
void cross_entropy_backward(const Tensor& dlogits, const Tensor& dloss, const Tensor& logits, const Tensor& lse,
                            const Tensor& targets);
// out [B, Lp, C] (contiguous, x's dtype or bfloat16 from float32) = x [B, L, Cx]
// (any strides, Cx <= C) at rows [left, left + L) of each batch and zeros
// elsewhere; when C > Cx, column Cx all `extra` and the columns past it zeros:
// conv1d's padded rows with the bias's column of ones (converted to bf16 in one
// pass under mixed precision).
void pad_rows(const Tensor& out, const Tensor& x, int64_t left, double extra = 0.0);
// conv1d's GEMM operand wt [K, X, Cout] (contiguous; w's dtype or bfloat16 from
// float32, X >= Cin + 1 with a bias) from w [Cout, Cin, K] (any strides) and the
// bias [Cout] or none: wt[j, i, o] = w[o, i, j], row Cin the bias in tap 0 and
// zeros in the others, rows past it zeros (ops/conv1d.cpp).
void pack_conv_weights(const Tensor& wt, const Tensor& w, const Tensor& bias);
// Its reverse for the gradients: dw [Cout, Cin, K] and db [Cout] (contiguous;
// either may be undefined) from dwt [K, X, Cout]: dw[o, i, j] = dwt[j, i, o],
// db = row Cin of dwt[0]; rows past Cin are not read.
void unpack_conv_grads(const Tensor& dw, const Tensor& db, const Tensor& dwt, int64_t Cin);
// Weight norm per row of v (R rows, contiguous, g [R] contiguous): w = g v / ||v||,
// norm (float64 [R]) kept for backward; backward writes dv and/or dg (either
// may be undefined) from dw. One block per row each way (ops/weight_norm.cpp).
void weight_norm_forward(const Tensor& w, const Tensor& norm, const Tensor& v, const Tensor& g);
void weight_norm_backward(const Tensor& dv, const Tensor& dg, const Tensor& dw, const Tensor& v, const Tensor& g,
                          const Tensor& norm);
// Layer norm over the last dim of x (contiguous, R rows of C): y, and per row
// mean and rstd (float64 [R]); gamma and beta [C] or undefined. Backward writes
// dx and/or xhat (either may be undefined) from dy (contiguous). One block per
// row each way (ops/layer_norm.cpp).
void layer_norm_forward(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& gamma,
                        const Tensor& beta, double eps);
void layer_norm_backward(const Tensor& dx, const Tensor& xhat, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                         const Tensor& mean, const Tensor& rstd);
// y = x * keep * scale with keep from the Philox stream (seed, start) as on the
// CPU (ops/dropout.cpp); with relu, y = relu(x) * keep * scale. y (and dx)
// contiguous; x (and g) of at most 3 dims with any strides, or contiguous.
// base: undefined, or a float64 device scalar added to start when the kernel
// runs (a captured step's Philox base, core/step_graph.h).
void dropout_forward(const Tensor& y, const Tensor& x, double p, uint64_t seed, uint64_t start, const Tensor& base,
                     bool relu);
// dx = g * keep * scale, the mask regenerated from (seed, start); with relu,
// keep is read from the forward output instead (y > 0).
void dropout_backward(const Tensor& dx, const Tensor& g, double p, uint64_t seed, uint64_t start, const Tensor& base,
                      const Tensor& y);
// A TCN block's tail (ops/dropout.cpp, relu_dropout_add_relu): z = relu(relu(x)
// * keep * scale + res), keep as in dropout_forward; x and res of at most 3 dims,
// any strides, same shape; z contiguous. Backward: dres = g * (z > 0), dx = dres
// * keep * scale * (x > 0), the keep flags drawn again; dx and dres contiguous.
void dropout_add_relu_forward(const Tensor& z, const Tensor& x, const Tensor& res, double p, uint64_t seed,
                              uint64_t start, const Tensor& base);
void dropout_add_relu_backward(const Tensor& dx, const Tensor& dres, const Tensor& g, const Tensor& x, const Tensor& z,
                               double p, uint64_t seed, uint64_t start, const Tensor& base);
// LSTM cell on B rows of a [B, T, ...] layout at step t (see ops/lstm_layer.cpp):
// act holds the gate pre-activations of step t on entry and (i, f, g, o) on exit.
// Under mixed precision h_bf16 [B, H] (else undefined) also receives h_t in bf16.
void lstm_cell_forward(const Tensor& act, const Tensor& c0, const Tensor& hs, const Tensor& cs, int64_t t,
                       const Tensor& h_bf16 = Tensor());
// Gate gradients of step t into dG, from dout and the running dh, dc (updated to
// step t-1); under mixed precision dG_bf16 [B, 4H] also receives them in bf16.
void lstm_cell_backward(const Tensor& dG, const Tensor& act, const Tensor& c0, const Tensor& cs, const Tensor& dout,
                        const Tensor& dh, const Tensor& dc, int64_t t, const Tensor& dG_bf16 = Tensor());
// Optimizer updates as the CPU loops of nn/optim.cpp, parameters contiguous (as
// g, buf, m, v). gate: undefined, or a float64 scalar on the device that turns
// the update off when 0 (read by the kernel: no host wait). SGD: many
// parameters (one dtype, one device) in one launch per 32.
struct SgdParam {
  Tensor p, g, buf;  // buf undefined without momentum
  bool first;        // the buffer's first step (buf = d)
};
// lr: a float64 scalar on the device (read by the kernel, so a captured step follows changes).
void sgd_update_many(const std::vector<SgdParam>& params, const Tensor& lr, double weight_decay, double momentum,
                     const Tensor& gate);
// Adam likewise, two launches per 32 parameters. step_count: a float64 scalar
// on the device per parameter, the steps it has taken; advanced by one unless
// the gate is closed (so the kernels compute the bias corrections).
struct AdamParam {
  Tensor p, g, m, v, step_count;
};
void adam_update_many(const std::vector<AdamParam>& params, const Tensor& lr, double beta1, double beta2, double eps,
                      double weight_decay, const Tensor& gate);
// RMSprop likewise (torch.optim.RMSprop without momentum, not centered), one
// launch per 32 parameters; v: the running average of squared gradients.
struct RmspropParam {
  Tensor p, g, v;
};
void rmsprop_update_many(const std::vector<RmspropParam>& params, const Tensor& lr, double alpha, double eps,
                         double weight_decay, const Tensor& gate);
// Global-norm clipping of many gradients in a few launches (one sum-of-squares
// pass per 32 tensors, one reduction, one scaling pass per 32): the squares
// summed in float64 in a fixed order (deterministic), norm (a scalar of the
// grads' dtype, on the device) = its square root, every grad scaled in place by
// min(1, max_norm / (norm + 1e-6)). Grads contiguous, one dtype, on norm's device.
void clip_grad_norm(const std::vector<Tensor>& grads, double max_norm, const Tensor& norm);
// watch: float64 [5] = (ok, first bad step, its loss, sum of finite losses, step of the
// last add), see nn::LossWatch: counts this loss's step as the last one + 1.
void watch_loss(const Tensor& watch, const Tensor& loss);

}  // namespace tcn::cuda

// In an op's CUDA branch: the kernel call when built with CUDA, else a clear error.
#ifdef TCN_WITH_CUDA
#define TCN_CUDA_OP(op_name, ...) __VA_ARGS__
#else
#define TCN_CUDA_OP(op_name, ...) ::tcn::no_cuda_kernel(op_name)
#endif
