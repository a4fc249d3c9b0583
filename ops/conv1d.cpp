// conv1d on channels-last sequences: x [B, T, Cin], w [Cout, Cin, K] (PyTorch's
// layout), bias [Cout]; y [B, T, Cout] with
//   y[b, t, o] = bias[o] + sum_{j, i} w[o, i, j] * x[b, t + j*dilation - left_pad, i]
// and zeros outside [0, T). left_pad = (K-1)*dilation is PyTorch's
// Conv1d(padding=(K-1)*dilation) followed by the chomp of the last (K-1)*dilation
// steps: a causal conv.
//
// The same code runs on the CPU (oneDNN or OpenBLAS) and on a GPU (cuBLAS): only
// the GEMM call is device-specific; padding and packing are ordinary ops (one
// kernel each on a GPU).
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
// same walk: dxp[j*d : j*d + M] += dyp[0:M] @ w_j, dw_j = xp[j*d : j*d + M]^T @ dyp[0:M],
// the taps' dw_j in one batched GEMM (they write separate outputs).
//
// The bias rides in the GEMMs: xp gets one more column, of ones, and the packed
// weights wt [K, X, Cout] one more row: the bias in tap 0, zeros in the
// others. So tap 0 adds the bias as it multiplies, and row Cin of dw_0 is
// ones^T @ dyp, the bias gradient (dyp is zero in the padding rows): no
// broadcast before the forward GEMMs and no column sum after the backward ones
// (on a GPU, 2 kernels per conv fewer). X, the rows' width, is Cin + 1 rounded
// up to 16 elements (zero columns and rows), so each row of xp starts 64-byte
// aligned: with X = 451 the CPU step was 5-9% slower than with the bias added
// outside the GEMMs, with X = 464 within 3% (docs/gpu_step.md). Under mixed
// precision the bias is then a bf16 operand like the weights, as in PyTorch's
// autocast (core/autocast.h).
//
// On a GPU the same op can run on cuDNN instead (ops/conv1d_cudnn.cpp), and on
// the CPU in the Winograd domain, with fewer multiplies (ops/conv1d_winograd.cpp;
// which one: core/backends.h). The paths sit behind one interface
// (ops/conv1d_paths.h): a forward that returns y and the backward that turns dy
// into (dx, dw, db).
#include "conv1d_paths.h"
#include "cuda/kernels.h"
#include "ops/cpu_blas.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace tcn {

namespace conv1d_paths {

// Row-major GEMM on the tensors' device: C = op(A) @ op(B) + beta * C, pointers
// into the buffers of `like` (its dtype and device). When `like` is bfloat16
// (mixed precision), A and B are bfloat16 and C is float32; tf32: float32 on the
// GPU's TF32 tensor cores. A batch (strides in elements) is one cuBLAS call on a
// GPU and a loop of GEMMs on the CPU.
void gemm_on(const Tensor& like, bool tf32, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda,
             const void* B, int64_t ldb, double beta, void* C, int64_t ldc, cuda::GemmBatch batch) {
  if (like.device().is_cuda()) {
    TCN_CUDA_OP("conv1d",
                cuda::gemm(like.dtype(), tf32, like.device().index, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, batch));
    return;
  }
  const size_t op_size = dtype_size(like.dtype()), out_size = like.dtype() == DType::BF16 ? 4 : op_size;
  for (int64_t i = 0; i < batch.count; ++i) {
    const void* a = static_cast<const char*>(A) + i * batch.stride_a * static_cast<int64_t>(op_size);
    const void* b = static_cast<const char*>(B) + i * batch.stride_b * static_cast<int64_t>(op_size);
    void* c = static_cast<char*>(C) + i * batch.stride_c * static_cast<int64_t>(out_size);
    if (like.dtype() == DType::BF16) {
      cpu::gemm(ta, tb, M, N, K, static_cast<const bfloat16*>(a), lda, static_cast<const bfloat16*>(b), ldb,
                static_cast<float>(beta), static_cast<float*>(c), ldc);
      continue;
    }
    dispatch_float(like.dtype(), "conv1d", [&]<class T>() {
      cpu::gemm(ta, tb, M, N, K, static_cast<const T*>(a), lda, static_cast<const T*>(b), ldb, static_cast<T>(beta),
                static_cast<T*>(c), ldc);
    });
  }
}

// X: the row width of xp and wt (row_width below).
// yp rows [0, M) = sum_j xp rows [j*d, j*d + M) @ wt[j]; wt = [K, X, Cout]
// contiguous. Tap 0 overwrites the rows (beta 0), later taps accumulate.
void conv1d_forward_rows(const ConvRows& g, int64_t X, const Tensor& xp, const Tensor& wt, const Tensor& yp, bool tf32) {
  for (int64_t j = 0; j < g.K; ++j)
    gemm_on(xp, tf32, false, false, g.M, g.Cout, X, element_ptr(xp, j * g.d * X), X, element_ptr(wt, j * X * g.Cout),
            g.Cout, j == 0 ? 0.0 : 1.0, yp.raw_data(), g.Cout);
}

// dxp = sum_j dyp @ wt[j][0:Cin]^T, shifted by j*d rows (rows past M must be
// zero already); dwt[j] = xp^T @ dyp per tap, row Cin of dwt[0] the bias
// gradient. dyp is zero in the padding rows.
void conv1d_backward_rows(const ConvRows& g, int64_t X, const Tensor& xp, const Tensor& wt, const Tensor& dyp,
                          const Tensor& dxp, const Tensor& dwt, bool tf32) {
  if (dxp.defined())  // tap 0 covers rows [0, M) first and overwrites them (beta 0); later taps accumulate
    for (int64_t j = 0; j < g.K; ++j)
      gemm_on(xp, tf32, false, true, g.M, g.Cin, g.Cout, dyp.raw_data(), g.Cout, element_ptr(wt, j * X * g.Cout), g.Cout,
              j == 0 ? 0.0 : 1.0, element_ptr(dxp, j * g.d * g.Cin), g.Cin);
  // The taps' weight gradients write separate outputs, so they are one batched
  // GEMM: tap j's A starts j*d rows further into xp, B (dyp) is shared.
  if (dwt.defined())
    gemm_on(xp, tf32, true, false, X, g.Cout, g.M, xp.raw_data(), X, dyp.raw_data(), g.Cout, 0.0, dwt.raw_data(), g.Cout,
            {.count = g.K, .stride_a = g.d * X, .stride_b = 0, .stride_c = X * g.Cout});
}

// Places x [B, L, C] at rows [left, left + L) of each batch of a [B, Lp, X]
// buffer of `dtype` (X >= C; 0: X = C) whose other rows are zero; when X > C,
// column C is all ones (the bias's) and the columns past it zeros. For mixed
// precision the copy is also the conversion to bfloat16.
Tensor to_padded_rows(const Tensor& x, int64_t left, int64_t Lp, DType dtype, int64_t X) {
  const int64_t L = x.size(1), C = x.size(2);
  if (X == 0) X = C;
  if (Lp == L && X == C && x.is_contiguous()) return x.to(dtype);  // a 1x1 conv's rows as they are (or converted)
  Tensor p = empty({x.size(0), Lp, X}, {dtype, x.device()});
  if (x.device().is_cuda() && (dtype == x.dtype() || (dtype == DType::BF16 && x.dtype() == DType::F32))) {
    // one kernel for the zeros, the ones and the copy (and the conversion to bf16)
    TCN_CUDA_OP("conv1d", cuda::pad_rows(p, x, left, 1.0));
    return p;
  }
  Tensor rows = p.narrow(2, 0, C);
  if (left > 0) zero_(rows.narrow(1, 0, left));
  if (Lp > left + L) zero_(rows.narrow(1, left + L, Lp - left - L));
  copy_(rows.narrow(1, left, L), x);
  if (X > C) fill_(p.narrow(2, C, 1), 1.0);
  if (X > C + 1) zero_(p.narrow(2, C + 1, X - C - 1));
  return p;
}

// wt [K, X, Cout] (dtype) from w [Cout, Cin, K] and the bias [Cout] (or none):
// wt[j, i, o] = w[o, i, j]; row Cin the bias in tap 0 and zeros in the others,
// rows past it zeros. One kernel on a GPU.
Tensor pack_weights(const Tensor& w, const Tensor& bias, int64_t X, DType dtype) {
  const int64_t Cout = w.size(0), Cin = w.size(1), K = w.size(2);
  Tensor wt = empty({K, X, Cout}, {dtype, w.device()});
  if (w.device().is_cuda()) {
    TCN_CUDA_OP("conv1d", cuda::pack_conv_weights(wt, w, bias));
    return wt;
  }
  copy_(wt.narrow(1, 0, Cin), w.permute({2, 1, 0}));
  if (X > Cin) zero_(wt.narrow(1, Cin, X - Cin));
  if (bias.defined()) copy_(wt.narrow(0, 0, 1).narrow(1, Cin, 1).squeeze(0).squeeze(0), bias);
  return wt;
}

// The row width of xp and wt: Cin, or with a bias Cin + 1 rounded up to 16
// elements, so that xp's rows start 64-byte aligned (the GEMMs' A operand).
// Without a bias a 1x1 conv multiplies x as it is, so its width stays Cin.
int64_t row_width(int64_t Cin, bool bias) { return bias ? (Cin + 1 + 15) / 16 * 16 : Cin; }

// dw [Cout, Cin, K] and db [Cout] out of the packed gradient dwt [K, X, Cout]
// (pack_weights' layout), each only if asked for; one kernel on a GPU. db gets
// its own buffer: a bias's .grad() must not share storage (autograd clones a
// view).
void unpack_grads(const Tensor& dwt, const ConvRows& geo, bool need_w, bool need_b, ConvGrads& g) {
  if (!need_w && !need_b) return;
  if (need_w) g.dw = empty({geo.Cout, geo.Cin, geo.K}, dwt.options());
  if (need_b) g.db = empty({geo.Cout}, dwt.options());
  if (dwt.device().is_cuda()) {
    TCN_CUDA_OP("conv1d backward", cuda::unpack_conv_grads(g.dw, g.db, dwt, geo.Cin));
    return;
  }
  if (need_w) copy_(g.dw, dwt.narrow(1, 0, geo.Cin).permute({2, 1, 0}));
  if (need_b) copy_(g.db, dwt.narrow(0, 0, 1).narrow(1, geo.Cin, 1).squeeze(0).squeeze(0));
}

// What the GEMM path's backward keeps from its forward: the padded input rows
// and the packed weights (the bf16 copies under mixed precision, at half the
// memory), and how its GEMMs run.
struct GemmSaved {
  ConvRows geo;
  int64_t X;  // the row width of xp and wt
  Tensor xp, wt;
  bool bf16, tf32;
  TensorOptions out_opts;  // of the gradients: x's dtype and device
};

// The GEMM path's backward: dy [B, L, Cout] into dx, dw and db, each only if
// asked for, by the same walk over padded rows as the forward.
ConvGrads conv1d_gemm_backward(const GemmSaved& s, const Tensor& dy, bool need_x, bool need_w, bool need_b) {
  const ConvRows& geo = s.geo;
  Tensor dyp = to_padded_rows(dy, 0, geo.Lp, s.bf16 ? DType::BF16 : dy.dtype());
  // Tap 0 writes rows [0, M) with beta = 0, so only the tail needs zeros.
  Tensor dxp;
  if (need_x) {
    dxp = empty({geo.B, geo.Lp, geo.Cin}, s.out_opts);
    zero_(dxp.view({-1, geo.Cin}).narrow(0, geo.M, geo.B * geo.Lp - geo.M));
  }
  // The bias gradient is a row of dwt, so a bias gradient computes dwt too.
  Tensor dwt = need_w || need_b ? empty(s.wt.shape(), s.out_opts) : Tensor();
  conv1d_backward_rows(geo, s.X, s.xp, s.wt, dyp, dxp, dwt, s.tf32);
  ConvGrads g;
  if (need_x) g.dx = dxp.narrow(1, geo.left, geo.L);
  unpack_grads(dwt, geo, need_w, need_b, g);
  return g;
}

// The GEMM path (above): K accumulating GEMMs per pass over padded rows.
ConvOut conv1d_gemm(const ConvRows& geo, const Tensor& x, const Tensor& w, const Tensor& b, const ConvSettings& s) {
  // Mixed precision (core/autocast.h): the GEMM operands in bfloat16, the
  // output, the bias and the gradients in float32. The bf16 copies are also
  // what backward keeps. TF32 applies to backward too.
  const DType op_dtype = s.bf16 ? DType::BF16 : x.dtype();  // of the GEMM operands
  const int64_t X = row_width(geo.Cin, b.defined());
  Tensor xp = to_padded_rows(x, geo.left, geo.Lp, op_dtype, X);
  Tensor wt = pack_weights(w, b, X, op_dtype);  // [K, X, Cout]: each tap a GEMM operand
  Tensor yp = empty({geo.B, geo.Lp, geo.Cout}, x.options());
  conv1d_forward_rows(geo, X, xp, wt, yp, s.tf32);
  return {yp.narrow(1, 0, geo.L),  // the valid rows of each batch; a view
          std::bind_front(conv1d_gemm_backward, GemmSaved{geo, X, xp, wt, s.bf16, s.tf32, x.options()})};
}

}  // namespace conv1d_paths

namespace {

// conv1d's node on the tape: the path's backward, run on the output's gradient,
// gives the gradients of the op's inputs (x, weight, bias).
TensorList conv1d_backward(const conv1d_paths::ConvBackward& path_backward, bool need_x, bool need_w, bool need_b,
                           const TensorList& grad_outputs) {
  const conv1d_paths::ConvGrads d = path_backward(grad_outputs[0], need_x, need_w, need_b);
  return {d.dx, d.dw, d.db};
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

  using namespace conv1d_paths;
  const ConvRows geo(B, L, Cin, Cout, K, dilation, left_pad);
  const ConvSettings s = conv_settings(x_in);  // precision, --conv_impl, determinism, capture: read here only
  const Tensor x = x_in.detach(), wd = w.detach(), b = bias.defined() ? bias.detach().contiguous() : Tensor();
  const ConvImpl impl = conv1d_impl(geo, x, wd, b, s);
  ConvOut out = impl == ConvImpl::Cudnn      ? conv1d_cudnn(geo, x, wd, b, s)
                : impl == ConvImpl::Winograd ? conv1d_winograd(geo, x, wd, b, s)
                                             : conv1d_gemm(geo, x, wd, b, s);
  if (autograd::needs_grad({x_in, w, bias})) {
    const bool need_x = x_in.requires_grad(), need_w = w.requires_grad(), need_b = bias.defined() && bias.requires_grad();
    autograd::record("conv1d", {x_in, w, bias}, {out.y},
                     std::bind_front(conv1d_backward, out.backward, need_x, need_w, need_b));
  }
  return out.y;
}

}  // namespace tcn
