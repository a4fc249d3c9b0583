// conv1d on channels-last sequences: x [B, T, Cin], w [Cout, Cin, K] (PyTorch's
// layout), bias [Cout]; y [B, T, Cout] with
//   y[b, t, o] = bias[o] + sum_{j, i} w[o, i, j] * x[b, t + j*dilation - left_pad, i]
// and zeros outside [0, T). left_pad = (K-1)*dilation is PyTorch's
// Conv1d(padding=(K-1)*dilation) followed by the chomp of the last (K-1)*dilation
// steps: a causal conv.
//
// The same code runs on the CPU (oneDNN or OpenBLAS) and on a GPU (cuBLAS): only
// the GEMM call is device-specific; padding and copies are ordinary ops, and
// the bias is the CPU GEMM's bias argument or, on a GPU, the rows' start value.
//
// The kernel is K accumulating GEMMs, one per tap, each over all B*T rows at
// once. The input is copied once into a zero-padded buffer xp [B, Lp, Cin]
// (Lp = left_pad + T + right_pad), and the output is computed in the same padded
// row space: output row r = b*Lp + t reads input rows r + j*dilation, which
// never leave batch b. So tap j is ONE GEMM
//     yp[0:M] += xp[j*d : j*d + M] @ w_j^T,    M = B*Lp - (K-1)*d,
// and the (K-1)*d rows per batch that fall in the padding are computed and
// thrown away (2% extra work at the reference sizes, instead of B times more
// GEMM calls). The result is a strided view of yp: no copy. Backward is the
// same walk: dxp[j*d : j*d + M] += dyp[0:M] @ w_j, dw_j = xp[j*d : j*d + M]^T @ dyp[0:M].
#include "tcn/core/autocast.h"
#include "tcn/cuda/kernels.h"
#include "tcn/ops/cpu_blas.h"
#include "tcn/ops/dispatch.h"
#include "tcn/ops/ops.h"

namespace tcn {

namespace {

// Geometry of the padded row space.
struct ConvRows {
  int64_t B, L, Cin, Cout, K, d, left, Lp, M;
  ConvRows(int64_t B, int64_t L, int64_t Cin, int64_t Cout, int64_t K, int64_t d, int64_t left)
      : B(B), L(L), Cin(Cin), Cout(Cout), K(K), d(d), left(left), Lp(L + (K - 1) * d), M(B * Lp - (K - 1) * d) {}
};

// Row-major GEMM on the tensors' device: C = op(A) @ op(B) + beta * C, pointers
// into the buffers of `like` (its dtype and device). When `like` is bfloat16
// (mixed precision), A and B are bfloat16 and C is float32. `bias` ([N], C's
// dtype, or null) is added to every row of C; on the CPU the GEMM adds it as it
// writes C, on a GPU C is first set to it.
void gemm_on(const Tensor& like, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda,
             const void* B, int64_t ldb, double beta, void* C, int64_t ldc, const void* bias = nullptr) {
  if (like.device().is_cuda()) {
    TCN_CHECK(bias == nullptr, "conv1d: internal error: a CUDA GEMM with a bias");
    TCN_CUDA_OP("conv1d", cuda::gemm(like.dtype(), like.device().index, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc));
    return;
  }
  if (like.dtype() == DType::BF16) {
    cpu::gemm(ta, tb, M, N, K, static_cast<const bfloat16*>(A), lda, static_cast<const bfloat16*>(B), ldb,
              static_cast<float>(beta), static_cast<float*>(C), ldc, static_cast<const float*>(bias));
    return;
  }
  dispatch_float(like.dtype(), "conv1d", [&]<class T>() {
    cpu::gemm(ta, tb, M, N, K, static_cast<const T*>(A), lda, static_cast<const T*>(B), ldb, static_cast<T>(beta),
              static_cast<T*>(C), ldc, static_cast<const T*>(bias));
  });
}

// yp rows [0, M) = bias + sum_j xp rows [j*d, j*d + M) @ wt[j]; wt = [K, Cin, Cout] contiguous.
// Tap 0 overwrites the rows (beta 0) and brings the bias: on the CPU as the
// GEMM's bias argument; on a GPU the rows start as the broadcast bias.
void conv1d_forward_rows(const ConvRows& g, const Tensor& xp, const Tensor& wt, const Tensor& bias, const Tensor& yp) {
  const void* gemm_bias = nullptr;
  double beta0 = 0.0;
  if (bias.defined() && yp.device().is_cpu()) {
    gemm_bias = bias.raw_data();
  } else if (bias.defined()) {
    copy_(yp.view({-1, g.Cout}).narrow(0, 0, g.M), bias);  // broadcast over the rows
    beta0 = 1.0;
  }
  for (int64_t j = 0; j < g.K; ++j)
    gemm_on(xp, false, false, g.M, g.Cout, g.Cin, element_ptr(xp, j * g.d * g.Cin), g.Cin,
            element_ptr(wt, j * g.Cin * g.Cout), g.Cout, j == 0 ? beta0 : 1.0, yp.raw_data(), g.Cout,
            j == 0 ? gemm_bias : nullptr);
}

// dxp = sum_j dyp @ wt[j]^T, shifted by j*d rows (rows past M must be zero already);
// dwt[j] = xp^T @ dyp per tap. dyp is zero in the padding rows.
void conv1d_backward_rows(const ConvRows& g, const Tensor& xp, const Tensor& wt, const Tensor& dyp, const Tensor& dxp,
                          const Tensor& dwt) {
  for (int64_t j = 0; j < g.K; ++j) {
    if (dxp.defined())  // tap 0 covers rows [0, M) first and overwrites them (beta 0); later taps accumulate
      gemm_on(xp, false, true, g.M, g.Cin, g.Cout, dyp.raw_data(), g.Cout, element_ptr(wt, j * g.Cin * g.Cout), g.Cout,
              j == 0 ? 0.0 : 1.0, element_ptr(dxp, j * g.d * g.Cin), g.Cin);
    if (dwt.defined())
      gemm_on(xp, true, false, g.Cin, g.Cout, g.M, element_ptr(xp, j * g.d * g.Cin), g.Cin, dyp.raw_data(), g.Cout, 0.0,
              element_ptr(dwt, j * g.Cin * g.Cout), g.Cout);
  }
}

// Places x [B, L, C] at rows [left, left + L) of each batch of a [B, Lp, C]
// buffer of `dtype` whose other rows are zero (only those rows are written
// twice); for mixed precision the copy is also the conversion to bfloat16.
Tensor to_padded_rows(const Tensor& x, int64_t left, int64_t Lp, DType dtype) {
  const int64_t L = x.size(1);
  if (Lp == L && x.is_contiguous()) return x.to(dtype);  // no padding (a 1x1 conv): x as it is, or one conversion
  Tensor p = empty({x.size(0), Lp, x.size(2)}, {dtype, x.device()});
  if (x.device().is_cuda() && (dtype == x.dtype() || (dtype == DType::BF16 && x.dtype() == DType::F32))) {
    // one kernel for the zeros and the copy (and the conversion to bf16)
    TCN_CUDA_OP("conv1d", cuda::pad_rows(p, x, left));
    return p;
  }
  if (left > 0) zero_(p.narrow(1, 0, left));
  if (Lp > left + L) zero_(p.narrow(1, left + L, Lp - left - L));
  copy_(p.narrow(1, left, L), x);
  return p;
}

}  // namespace

Tensor conv1d(const Tensor& x_in, const Tensor& w, const Tensor& bias, int64_t dilation, int64_t left_pad) {
  const profile::Op range("conv1d");
  check_defined("conv1d", x_in);
  check_defined("conv1d", w, "weight");
  TCN_CHECK(x_in.dim() == 3, "conv1d: input must be [batch, time, channels], got ", x_in.shape());
  TCN_CHECK(w.dim() == 3, "conv1d: weight must be [out_channels, in_channels, kernel], got ", w.shape());
  check_same_dtype("conv1d", x_in, w);
  check_same_device("conv1d", x_in, w);
  check_float("conv1d", x_in);
  const int64_t B = x_in.size(0), L = x_in.size(1), Cin = x_in.size(2);
  const int64_t Cout = w.size(0), K = w.size(2);
  TCN_CHECK(w.size(1) == Cin, "conv1d: input has ", Cin, " channels (shape ", x_in.shape(), ") but the weight ",
            w.shape(), " expects ", w.size(1));
  TCN_CHECK(dilation >= 1, "conv1d: dilation must be >= 1, got ", dilation);
  TCN_CHECK(left_pad >= 0 && left_pad <= (K - 1) * dilation, "conv1d: left padding ", left_pad,
            " must be in [0, (K-1)*dilation = ", (K - 1) * dilation, "]");
  if (bias.defined()) {
    TCN_CHECK(bias.dim() == 1 && bias.size(0) == Cout, "conv1d: bias must be [", Cout, "], got ", bias.shape());
    check_same_dtype("conv1d", x_in, bias);
    check_same_device("conv1d", x_in, bias);
  }

  const ConvRows geo(B, L, Cin, Cout, K, dilation, left_pad);
  // Mixed precision (core/autocast.h): the GEMM operands in bfloat16, the
  // output, the bias and the gradients in float32. The bf16 copies are also
  // what backward keeps, at half the memory.
  const bool bf16 = autocast_bf16(x_in);
  const DType op_dtype = bf16 ? DType::BF16 : x_in.dtype();  // of the GEMM operands
  Tensor xp = to_padded_rows(x_in.detach(), left_pad, geo.Lp, op_dtype);
  // [K, Cin, Cout]: each tap a GEMM operand (permuted and converted in one copy).
  Tensor wt = empty({K, Cin, Cout}, {op_dtype, w.device()});
  copy_(wt, w.detach().permute({2, 1, 0}));
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor yp = empty({B, geo.Lp, Cout}, x_in.options());
  conv1d_forward_rows(geo, xp, wt, b, yp);
  Tensor y = yp.narrow(1, 0, L);  // the valid rows of each batch; a view

  if (autograd::needs_grad({x_in, w, bias})) {
    bool need_x = x_in.requires_grad(), need_w = w.requires_grad(), need_b = bias.defined() && bias.requires_grad();
    const TensorOptions out_opts = x_in.options();
    autograd::record("conv1d", {x_in, w, bias}, {y}, [geo, xp, wt, need_x, need_w, need_b, bf16,
                                                      out_opts](const TensorList& g) {
      Tensor dyp = to_padded_rows(g[0], 0, geo.Lp, bf16 ? DType::BF16 : g[0].dtype());
      // Tap 0 writes rows [0, M) with beta = 0 below, so only the tail needs zeros.
      Tensor dxp;
      if (need_x) {
        dxp = empty(xp.shape(), out_opts);
        zero_(dxp.view({-1, geo.Cin}).narrow(0, geo.M, geo.B * geo.Lp - geo.M));
      }
      Tensor dwt = need_w ? empty(wt.shape(), out_opts) : Tensor();
      conv1d_backward_rows(geo, xp, wt, dyp, dxp, dwt);
      return TensorList{need_x ? dxp.narrow(1, geo.left, geo.L) : Tensor(),
                        need_w ? dwt.permute({2, 1, 0}).contiguous() : Tensor(),
                        need_b ? sum(g[0], {0, 1}) : Tensor()};
    });
  }
  return y;
}

}  // namespace tcn
