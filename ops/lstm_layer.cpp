// One LSTM layer over a whole sequence, after the input projection:
//   xp [B, T, 4H]  = x @ W_ih^T + b_ih + b_hh for all steps (one GEMM, done by the caller)
//   gates_t        = xp[:, t] + h_{t-1} @ W_hh^T          (one GEMM per step)
//   (h_t, c_t)     = the cell of ops/lstm_cell.cpp
// Returns out [B, T, H] (every h_t), h_T and c_T.
//
// Fused so that a sequence is one node on the tape, and so that backward can
// do what a per-step graph cannot: the recurrent weight gradient is ONE GEMM
//   dW_hh = dG^T @ H_prev   over all B*T rows,
// instead of T rank-B updates. Per step, backward only propagates
// dh_{t-1} = dG_t @ W_hh. Steps address their [B, ...] slices of the [B, T, ...]
// buffers through the GEMM leading dimensions, so nothing is copied per step.
// lstm_cell (composed in a loop) is this op's test oracle.
#include <algorithm>
#include <cmath>
#include <functional>
#include <type_traits>
#include <vector>

#include "core/autocast.h"

#include "cuda/cudnn.h"

#include "cuda/kernels.h"
#include "ops/cpu_blas.h"
#include "ops/dispatch.h"
#include "ops/ops.h"
#include "core/math/vmath.h"

namespace tcn {

namespace {

// Sequences at least this long run their CPU recurrent GEMMs on a transposed copy of W_hh.
constexpr int64_t kTransposeSteps = 16;

// The recurrent GEMM of a step, C [B, N] (+)= A [B, K] (rows ld_a apart) @ op(W):
// float32, or under mixed precision (w_b set) A rounded into the bf16 scratch
// `a_b` [B, K] and multiplied by the bf16 copy of W with float32 accumulation.
template <class T>
void recurrent_gemm(bool tw, int64_t B, int64_t N, int64_t K, const T* A, int64_t ld_a, const T* w, const bfloat16* w_b,
                    bfloat16* a_b, T beta, T* C, int64_t ldc) {
  const int64_t ldw = tw ? K : N;
  if constexpr (std::is_same_v<T, float>) {
    if (w_b) {
      for (int64_t b = 0; b < B; ++b)
        for (int64_t k = 0; k < K; ++k) a_b[b * K + k] = bfloat16(A[b * ld_a + k]);
      cpu::gemm(false, tw, B, N, K, a_b, K, w_b, ldw, beta, C, ldc);
      return;
    }
  }
  cpu::gemm(false, tw, B, N, K, A, ld_a, w, ldw, beta, C, ldc);
}

// The cell of one batch row at one step, forward: a [4H] holds x-projection
// pre-activations on entry and (i, f, g, o) on exit, r [4H] the recurrent GEMM's
// part; writes c_t, and h_t twice (into hs and the contiguous h buffer).
template <class T>
TCN_ALWAYS_INLINE inline void cell_forward_row(T* a, const T* r, const T* cp, T* c, T* hst, T* hb, int64_t H) {
#pragma omp simd
  for (int64_t k = 0; k < H; ++k) {
    T i = vmath::sigmoid_of(a[k] + r[k]), f = vmath::sigmoid_of(a[H + k] + r[H + k]),
      g = vmath::tanh_of(a[2 * H + k] + r[2 * H + k]), o = vmath::sigmoid_of(a[3 * H + k] + r[3 * H + k]);
    a[k] = i;
    a[H + k] = f;
    a[2 * H + k] = g;
    a[3 * H + k] = o;
    c[k] = f * cp[k] + i * g;
    hst[k] = hb[k] = o * vmath::tanh_of(c[k]);
  }
}

// Backward of the same row: gate gradients dg [4H]; dh, dc carry the gradients
// of h_t, c_t in and leave with those of h_{t-1} (before the GEMM's part), c_{t-1}.
template <class T>
TCN_ALWAYS_INLINE inline void cell_backward_row(const T* a, const T* cp, const T* c, const T* go, T* dg, T* dh, T* dc, int64_t H) {
#pragma omp simd
  for (int64_t k = 0; k < H; ++k) {
    T i = a[k], f = a[H + k], g = a[2 * H + k], o = a[3 * H + k];
    T tc = vmath::tanh_of(c[k]);
    T dht = go[k] + dh[k];
    T dct = dc[k] + dht * o * (T(1) - tc * tc);
    dg[k] = dct * g * i * (T(1) - i);
    dg[H + k] = dct * cp[k] * f * (T(1) - f);
    dg[2 * H + k] = dct * i * (T(1) - g * g);
    dg[3 * H + k] = dht * tc * o * (T(1) - o);
    dc[k] = dct * f;
  }
}

// float32 rows compiled for each vector ISA and picked at load time
// (TCN_SIMD_CLONES, core/math/simd.h); float64 (the tests' precision) as above.
TCN_SIMD_CLONES void cell_forward_row(float* a, const float* r, const float* cp, float* c, float* hst, float* hb,
                                      int64_t H) {
  cell_forward_row<float>(a, r, cp, c, hst, hb, H);
}
TCN_SIMD_CLONES void cell_backward_row(const float* a, const float* cp, const float* c, const float* go, float* dg,
                                       float* dh, float* dc, int64_t H) {
  cell_backward_row<float>(a, cp, c, go, dg, dh, dc, H);
}

// act [B, T, 4H] holds xp on entry and (i, f, g, o) on exit; hs, cs [B, T, H].
// w: W_hh^T [H, 4H] (contiguous; tw false) or W_hh [4H, H] as stored (tw true),
// and its bf16 copy w_b under mixed precision (else null). Each step's GEMM
// writes a contiguous [B, 4H] scratch from a contiguous copy of h_{t-1}: in place
// in `act` (rows T*4H apart, C +=) it ran at half the rate (measured with
// build/bench_gemm --model lstm).
template <class T>
void lstm_forward_cpu(bool tw, T* act, const T* w, const bfloat16* w_b, const T* h0, const T* c0, T* hs, T* cs,
                      int64_t B, int64_t Tn, int64_t H) {
  const int64_t G = 4 * H;
  std::vector<T> gates(B * G), h(h0, h0 + B * H);  // h: h_{t-1}, then h_t
  std::vector<bfloat16> h_b(w_b ? B * H : 0);
  for (int64_t t = 0; t < Tn; ++t) {
    recurrent_gemm<T>(tw, B, G, H, h.data(), H, w, w_b, h_b.data(), T(0), gates.data(), G);
#pragma omp parallel for schedule(static) if (B * H >= (1 << 14))
    for (int64_t b = 0; b < B; ++b) {
      T* a = act + (b * Tn + t) * G;
      const T* r = gates.data() + b * G;
      const T* cp = t == 0 ? c0 + b * H : cs + (b * Tn + t - 1) * H;
      T* c = cs + (b * Tn + t) * H;
      T* hst = hs + (b * Tn + t) * H;
      T* hb = h.data() + b * H;
      cell_forward_row(a, r, cp, c, hst, hb, H);
    }
  }
}

// dG [B, T, 4H] out; dh, dc [B, H] in (grads of h_T, c_T) and out (grads of h0, c0).
template <class T>
void lstm_backward_cpu(const T* act, const T* whh, const bfloat16* whh_b, const T* c0, const T* cs, const T* dout, T* dG,
                       T* dh, T* dc, int64_t B, int64_t Tn, int64_t H) {
  const int64_t G = 4 * H;
  std::vector<bfloat16> dg_b(whh_b ? B * G : 0);
  for (int64_t t = Tn - 1; t >= 0; --t) {
#pragma omp parallel for schedule(static) if (B * H >= (1 << 14))
    for (int64_t b = 0; b < B; ++b) {
      const T* a = act + (b * Tn + t) * G;
      const T* cp = t == 0 ? c0 + b * H : cs + (b * Tn + t - 1) * H;
      const T* c = cs + (b * Tn + t) * H;
      const T* go = dout + (b * Tn + t) * H;
      T* dg = dG + (b * Tn + t) * G;
      T* dhb = dh + b * H;
      T* dcb = dc + b * H;
      cell_backward_row(a, cp, c, go, dg, dhb, dcb, H);
    }
    // dh_{t-1} = dG_t @ W_hh  ([B, 4H] rows with stride T*4H, W_hh [4H, H])
    recurrent_gemm<T>(false, B, H, G, dG + t * G, Tn * G, whh, whh_b, dg_b.data(), T(0), dh, H);
  }
}

#ifdef TCN_WITH_CUDA
// The same two loops on a GPU: cuBLAS for the GEMMs, cuda/lstm_cell.cu for the cell.
// Under mixed precision (whh_b, W_hh in bf16, defined) each GEMM multiplies bf16
// operands into float32 (cuda::gemm with DType::BF16): h_{t-1} comes from a bf16
// [B, H] scratch that the cell kernel of step t - 1 writes beside hs (h0's is one
// conversion), and in backward dG_t from a bf16 [B, 4H] scratch written by the
// cell's backward; so no conversion kernel per step.
void lstm_forward_cuda(const Tensor& act, const Tensor& whh, const Tensor& whh_b, const Tensor& h0, const Tensor& c0,
                       const Tensor& hs, const Tensor& cs, bool tf32) {
  const int64_t B = act.size(0), Tn = act.size(1), H = act.size(2) / 4, G = 4 * H;
  const int dev = act.device().index;
  const Tensor h_b = whh_b.defined() ? h0.to(DType::BF16) : Tensor();
  for (int64_t t = 0; t < Tn; ++t) {
    if (h_b.defined()) {
      cuda::gemm(DType::BF16, tf32, dev, false, true, B, G, H, h_b.raw_data(), H, whh_b.raw_data(), H, 1.0,
                 element_ptr(act, t * G), Tn * G);
    } else {
      const void* h_prev = t == 0 ? h0.raw_data() : element_ptr(hs, (t - 1) * H);
      cuda::gemm(act.dtype(), tf32, dev, false, true, B, G, H, h_prev, t == 0 ? H : Tn * H, whh.raw_data(), H, 1.0,
                 element_ptr(act, t * G), Tn * G);
    }
    cuda::lstm_cell_forward(act, c0, hs, cs, t, h_b);
  }
}

void lstm_backward_cuda(const Tensor& act, const Tensor& whh, const Tensor& whh_b, const Tensor& c0, const Tensor& cs,
                        const Tensor& dout, const Tensor& dG, const Tensor& dh, const Tensor& dc, bool tf32) {
  const int64_t B = act.size(0), Tn = act.size(1), H = act.size(2) / 4, G = 4 * H;
  const int dev = act.device().index;
  const Tensor dG_b = whh_b.defined() ? empty({B, G}, {DType::BF16, act.device()}) : Tensor();
  for (int64_t t = Tn - 1; t >= 0; --t) {
    cuda::lstm_cell_backward(dG, act, c0, cs, dout, dh, dc, t, dG_b);
    if (dG_b.defined())
      cuda::gemm(DType::BF16, tf32, dev, false, false, B, H, G, dG_b.raw_data(), G, whh_b.raw_data(), H, 0.0, dh.raw_data(),
                 H);
    else
      cuda::gemm(act.dtype(), tf32, dev, false, false, B, H, G, element_ptr(dG, t * G), Tn * G, whh.raw_data(), H, 0.0,
                 dh.raw_data(), H);
  }
}
#endif

// What the fused layer's backward keeps: the gate activations, W_hh (and its
// bf16 copy under mixed precision), the initial state, every step's h and c.
struct LstmSaved {
  Tensor act, whh, whh_b, h0, c0, hs, cs;
  bool need_w, tf32;
};

// lstm_layer's node on the tape: the gradients of (xp, W_hh, h0, c0) from those
// of (hs, hT, cT). The time loop runs backward once (dG, the gates' gradients,
// is xp's); dW_hh is then one GEMM over all steps.
TensorList lstm_layer_backward(const LstmSaved& s, const TensorList& grad_outputs) {
  const Tensor& act = s.act;
  const int64_t B = act.size(0), Tn = act.size(1), H = act.size(2) / 4;
  Tensor dout = grad_outputs[0].contiguous();
  Tensor dh = clone(grad_outputs[1]), dc = clone(grad_outputs[2]);
  Tensor dG = empty(act.shape(), act.options());
  if (act.device().is_cuda()) {
    TCN_CUDA_OP("lstm_layer backward", lstm_backward_cuda(act, s.whh, s.whh_b, s.c0, s.cs, dout, dG, dh, dc, s.tf32));
  } else {
    dispatch_float(act.dtype(), "lstm_layer backward", [&]<class T>() {
      lstm_backward_cpu<T>(act.data<T>(), s.whh.data<T>(), s.whh_b.defined() ? s.whh_b.data<bfloat16>() : nullptr,
                           s.c0.data<T>(), s.cs.data<T>(), dout.data<T>(), dG.data<T>(), dh.data<T>(), dc.data<T>(), B,
                           Tn, H);
    });
  }
  Tensor dW;
  if (s.need_w) {  // dW_hh = dG^T @ H_prev, H_prev = [h0, h_0 .. h_{T-2}] per batch
    Tensor h_prev = cat({s.h0.unsqueeze(1), s.hs.narrow(1, 0, Tn - 1)}, 1);
    dW = mm(dG.view({B * Tn, 4 * H}).t(), h_prev.view({B * Tn, H}));
  }
  return {dG, dW, dh, dc};
}

// What cuDNN's LSTM backward needs: its reserve space (in `saved`), the inputs and the output.
struct LstmCudnnSaved {
  cuda::CudnnLstmSaved saved;
  Tensor x, h0, c0, y, wih, whh;
};

// lstm_layer_cudnn's node on the tape: cuDNN's backward data and weights passes.
TensorList lstm_layer_cudnn_backward(const LstmCudnnSaved& s, const TensorList& grad_outputs) {
  const TensorOptions o = s.x.options();
  Tensor dx = empty(s.x.shape(), o), dh0 = empty(s.h0.shape(), o), dc0 = empty(s.c0.shape(), o);
  Tensor dwih = empty(s.wih.shape(), o), dwhh = empty(s.whh.shape(), o);
  Tensor dbih = empty({s.wih.size(0)}, o), dbhh = empty({s.wih.size(0)}, o);
  TCN_CUDA_OP("lstm_layer_cudnn backward",
              cuda::cudnn_lstm_backward(dx, dh0, dc0, dwih, dwhh, dbih, dbhh, s.saved, s.x, s.h0, s.c0, s.y,
                                        grad_outputs[0].contiguous(), grad_outputs[1].contiguous(),
                                        grad_outputs[2].contiguous()));
  return {dx, dwih, dwhh, dbih, dbhh, dh0, dc0};
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> lstm_layer(const Tensor& xp_in, const Tensor& w_hh, const Tensor& h0_in,
                                              const Tensor& c0_in) {
  const profile::Op range("lstm_layer");
  const char* op = "lstm_layer";
  for (const Tensor* t : {&xp_in, &w_hh, &h0_in, &c0_in}) check_defined(op, *t);
  check_float(op, xp_in);
  for (const Tensor* t : {&w_hh, &h0_in, &c0_in}) {
    check_same_dtype(op, xp_in, *t);
    check_same_device(op, xp_in, *t);
  }
  TCN_CHECK(xp_in.dim() == 3 && xp_in.size(2) % 4 == 0, op, ": projected input must be [B, T, 4H], got ",
            xp_in.shape());
  const int64_t B = xp_in.size(0), Tn = xp_in.size(1), H = xp_in.size(2) / 4;
  TCN_CHECK(w_hh.shape() == Shape({4 * H, H}), op, ": W_hh must be [", 4 * H, ", ", H, "], got ", w_hh.shape());
  TCN_CHECK(h0_in.shape() == Shape({B, H}) && c0_in.shape() == Shape({B, H}), op, ": h0 and c0 must be [", B, ", ", H,
            "], got ", h0_in.shape(), " and ", c0_in.shape());
  TCN_CHECK(Tn > 0, op, ": empty sequence");
  Tensor act = clone(xp_in.detach());  // becomes the gate activations
  Tensor whh = w_hh.detach().contiguous(), h0 = h0_in.detach().contiguous(), c0 = c0_in.detach().contiguous();
  // Mixed precision (core/autocast.h): the recurrent GEMMs multiply bf16 copies
  // of h_{t-1} (dG_t in backward) and W_hh; the cell and the state stay float32.
  // TF32 (CUDA only): the float32 recurrent GEMMs on tensor cores, backward's too.
  const bool bf16 = autocast_bf16(xp_in), tf32 = autocast_tf32();
  Tensor whh_b = bf16 ? whh.to(DType::BF16) : Tensor();  // for backward (and both directions on CUDA)
  Tensor hs = empty({B, Tn, H}, act.options()), cs = empty({B, Tn, H}, act.options());
  if (act.device().is_cuda()) {
    TCN_CUDA_OP(op, lstm_forward_cuda(act, whh, whh_b, h0, c0, hs, cs, tf32));
  } else {
    // The GEMMs run at about twice the rate on W_hh^T [H, 4H] than on W_hh read
    // transposed, but the transposed copy costs about as much as ten batch-1 steps:
    // a window pays for it, a step of generation (T = 1) does not.
    const bool transpose = Tn >= kTransposeSteps;
    Tensor w = transpose ? whh.t().contiguous() : whh;
    Tensor w_b = !bf16 ? Tensor() : transpose ? w.to(DType::BF16) : whh_b;
    dispatch_float(act.dtype(), op, [&]<class T>() {
      lstm_forward_cpu<T>(!transpose, act.data<T>(), w.data<T>(), w_b.defined() ? w_b.data<bfloat16>() : nullptr,
                          h0.data<T>(), c0.data<T>(), hs.data<T>(), cs.data<T>(), B, Tn, H);
    });
  }
  Tensor hT = hs.narrow(1, Tn - 1, 1).squeeze(1).contiguous();
  Tensor cT = cs.narrow(1, Tn - 1, 1).squeeze(1).contiguous();

  if (autograd::needs_grad({xp_in, w_hh, h0_in, c0_in}))
    autograd::record(op, {xp_in, w_hh, h0_in, c0_in}, {hs, hT, cT},
                     std::bind_front(lstm_layer_backward,
                                     LstmSaved{.act = act, .whh = whh, .whh_b = whh_b, .h0 = h0, .c0 = c0,
                                               .hs = hs.detach(), .cs = cs, .need_w = w_hh.requires_grad(),
                                               .tf32 = tf32}));
  return {hs, hT, cT};
}

std::tuple<Tensor, Tensor, Tensor> lstm_layer_cudnn(const Tensor& x_in, const Tensor& w_ih, const Tensor& w_hh,
                                                    const Tensor& b_ih, const Tensor& b_hh, const Tensor& h0_in,
                                                    const Tensor& c0_in) {
  const profile::Op range("lstm_layer_cudnn");
  const char* op = "lstm_layer_cudnn";
  const TensorList all{x_in, w_ih, w_hh, b_ih, b_hh, h0_in, c0_in};
  for (const Tensor& t : all) check_defined(op, t);
  TCN_CHECK(x_in.device().is_cuda() && x_in.dtype() == DType::F32, op, ": float32 CUDA tensors only, got ",
            x_in.dtype(), " on ", x_in.device());
  for (const Tensor& t : all) {
    check_same_dtype(op, x_in, t);
    check_same_device(op, x_in, t);
  }
  TCN_CHECK(x_in.dim() == 3 && x_in.size(1) > 0, op, ": input must be [B, T > 0, I], got ", x_in.shape());
  const int64_t B = x_in.size(0), Tn = x_in.size(1), I = x_in.size(2), H = w_hh.size(1);
  TCN_CHECK(w_ih.shape() == Shape({4 * H, I}) && w_hh.shape() == Shape({4 * H, H}) && b_ih.shape() == Shape({4 * H}) &&
                b_hh.shape() == Shape({4 * H}),
            op, ": parameters must be w_ih [", 4 * H, ", ", I, "], w_hh [", 4 * H, ", ", H, "], biases [", 4 * H,
            "], got ", w_ih.shape(), ", ", w_hh.shape(), ", ", b_ih.shape(), ", ", b_hh.shape());
  TCN_CHECK(h0_in.shape() == Shape({B, H}) && c0_in.shape() == Shape({B, H}), op, ": h0 and c0 must be [", B, ", ", H,
            "], got ", h0_in.shape(), " and ", c0_in.shape());
  TCN_CHECK(B > 0 && B * Tn * std::max(I, 4 * H) < (int64_t{1} << 31), op, ": batch ", B, " x ", Tn,
            " steps is empty or too large for cuDNN's 32-bit sizes");
  const std::string why = cuda::cudnn_unavailable_reason();
  TCN_CHECK(why.empty(), op, ": cuDNN is unavailable: ", why);
  auto c = [](const Tensor& t) { return t.detach().contiguous(); };
  Tensor x = c(x_in), wih = c(w_ih), whh = c(w_hh), bih = c(b_ih), bhh = c(b_hh), h0 = c(h0_in), c0 = c(c0_in);
  Tensor y = empty({B, Tn, H}, x.options()), hT = empty({B, H}, x.options()), cT = empty({B, H}, x.options());
  const bool training = autograd::needs_grad(all);
  cuda::CudnnLstmSaved saved;
  TCN_CUDA_OP(op, saved = cuda::cudnn_lstm_forward(y, hT, cT, x, wih, whh, bih, bhh, h0, c0, training, autocast_tf32()));
  if (training) {
    autograd::record(op, all, {y, hT, cT},
                     std::bind_front(lstm_layer_cudnn_backward,
                                     LstmCudnnSaved{saved, x, h0, c0, y.detach(), wih, whh}));
  }
  return {y, hT, cT};
}

}  // namespace tcn
