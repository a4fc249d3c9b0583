// Matrix products through the CPU GEMM (oneDNN or OpenBLAS: ops/cpu_blas.h) or cuBLAS (GPU). A 2-D operand whose
// rows or columns are unit-stride goes to the GEMM as it is (a transposed view
// is just a transposed operand with the other leading dimension; see
// core/math/gemm_layout.h), so mm(a, b.t()) copies nothing.
#include "core/autocast.h"
#include "cuda/kernels.h"
#include "ops/cpu_blas.h"
#include "ops/dispatch.h"
#include "core/math/gemm_layout.h"
#include "ops/ops.h"

namespace tcn {

namespace {

// out[b] = a[b] @ b[b] for every batch b; a is [B, M, K] (K > 0), b is [B, K, N], out [B, M, N] contiguous.
// bfloat16 a and b (mixed precision) give a float32 out.
void batched_gemm_cpu(const char* op, const Tensor& a_in, const Tensor& b_in, const Tensor& out) {
  const int64_t B = a_in.size(0), M = a_in.size(1), K = a_in.size(2), N = b_in.size(2);
  if (a_in.dtype() == DType::BF16) {
    GemmOperands g = gemm_operands(a_in, b_in);
    for (int64_t i = 0; i < B; ++i)
      cpu::gemm(g.la.trans, g.lb.trans, M, N, K, g.a.data<bfloat16>() + i * g.a.stride(0), g.la.ld,
                g.b.data<bfloat16>() + i * g.b.stride(0), g.lb.ld, 0.0f, out.data<float>() + i * M * N, N);
    return;
  }
  GemmOperands g = gemm_operands(a_in, b_in);
  dispatch_float(g.a.dtype(), op, [&]<class T>() {
    for (int64_t i = 0; i < B; ++i)
      cpu::gemm(g.la.trans, g.lb.trans, M, N, K, g.a.data<T>() + i * g.a.stride(0), g.la.ld, g.b.data<T>() + i * g.b.stride(0),
                   g.lb.ld, T(0), out.data<T>() + i * M * N, N);
  });
}

// out = a @ b batched, on the operands' device. Empty products are handled
// here, once for both backends: nothing to compute, or zeros when K == 0.
void batched_gemm(const char* op, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.numel() == 0) return;
  if (a.size(2) == 0) {
    fill_(out, 0.0);
    return;
  }
  // Mixed precision (core/autocast.h), on either device: bfloat16 copies of
  // both operands (contiguous: the conversion is the one copy), float32
  // accumulation and output. TF32 (--precision tf32) only for CUDA tensors.
  const bool bf16 = autocast_bf16(a);
  const Tensor a_op = bf16 ? a.to(DType::BF16) : a, b_op = bf16 ? b.to(DType::BF16) : b;
  if (a.device().is_cuda())
    TCN_CUDA_OP(op, cuda::batched_gemm(out, a_op, b_op, autocast_tf32()));
  else
    batched_gemm_cpu(op, a_op, b_op, out);
}

void check_matmul_args(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a);
  check_defined(op, b);
  check_same_device(op, a, b);
  check_same_dtype(op, a, b);
  check_float(op, a);
}

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  const profile::Op range("mm");
  check_matmul_args("mm", a, b);
  TCN_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected two matrices, got shapes ", a.shape(), " and ", b.shape());
  TCN_CHECK(a.size(1) == b.size(0), "mm: inner dimensions differ, ", a.shape(), " @ ", b.shape());
  Tensor out = empty({a.size(0), b.size(1)}, a.options());
  batched_gemm("mm", a.detach().unsqueeze(0), b.detach().unsqueeze(0), out.unsqueeze(0));
  if (autograd::needs_grad({a, b}))
    // da = g @ b^T needs b; db = a^T @ g needs a. Keep only what is needed.
    autograd::record("mm", {a, b}, {out},
                     [ad = b.requires_grad() ? a.detach() : Tensor(),
                      bd = a.requires_grad() ? b.detach() : Tensor()](const TensorList& g) {
                       return TensorList{bd.defined() ? mm(g[0], bd.t()) : Tensor(),
                                         ad.defined() ? mm(ad.t(), g[0]) : Tensor()};
                     });
  return out;
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  const profile::Op range("bmm");
  check_matmul_args("bmm", a, b);
  TCN_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected two [B, M, K] and [B, K, N] tensors, got shapes ",
            a.shape(), " and ", b.shape());
  TCN_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1), "bmm: shapes do not match, ", a.shape(), " @ ",
            b.shape());
  Tensor out = empty({a.size(0), a.size(1), b.size(2)}, a.options());
  batched_gemm("bmm", a.detach(), b.detach(), out);
  if (autograd::needs_grad({a, b}))
    autograd::record("bmm", {a, b}, {out},
                     [ad = b.requires_grad() ? a.detach() : Tensor(),
                      bd = a.requires_grad() ? b.detach() : Tensor()](const TensorList& g) {
                       return TensorList{bd.defined() ? bmm(g[0], bd.transpose(1, 2)) : Tensor(),
                                         ad.defined() ? bmm(ad.transpose(1, 2), g[0]) : Tensor()};
                     });
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  const profile::Op range("matmul");
  check_matmul_args("matmul", a, b);
  TCN_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: both operands need at least 2 dims, got shapes ", a.shape(),
            " and ", b.shape());
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  TCN_CHECK(b.size(-2) == K, "matmul: inner dimensions differ, ", a.shape(), " @ ", b.shape());
  if (a.dim() == 2 && b.dim() == 2) return mm(a, b);
  Shape batch_a(a.shape().begin(), a.shape().end() - 2);
  if (b.dim() == 2) {  // fold a's batch dims into its rows: one GEMM
    Shape out_shape = batch_a;
    out_shape.push_back(M);
    out_shape.push_back(N);
    return mm(a.reshape({-1, K}), b).reshape(out_shape);
  }
  Shape batch_b(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  Shape sa = batch, sb = batch, out_shape = batch;
  sa.insert(sa.end(), {M, K});
  sb.insert(sb.end(), {K, N});
  out_shape.insert(out_shape.end(), {M, N});
  return bmm(a.expand(sa).reshape({-1, M, K}), b.expand(sb).reshape({-1, K, N})).reshape(out_shape);
}

}  // namespace tcn
