// One LSTM step after the matrix products: gates [B, 4H] are the
// pre-activations in PyTorch's order (input, forget, cell, output), c_prev [B, H].
//   i = s(a_i), f = s(a_f), g = tanh(a_g), o = s(a_o)
//   c = f * c_prev + i * g,  h = o * tanh(c)
// Fused so a step is one node on the tape instead of a dozen.
#include <cmath>
#include <functional>

#include "ops/dispatch.h"
#include "ops/ops.h"

namespace tcn {

namespace {
template <class T>
T sigm(T x) {
  return T(1) / (T(1) + std::exp(-x));
}
}  // namespace

// lstm_cell's backward, from the gate activations, c_prev and c: the gradients
// of the pre-activation gates and of c_prev.
static TensorList lstm_cell_backward(const Tensor& act, const Tensor& c_prev, const Tensor& c,
                                     const TensorList& grad_outputs) {
  const int64_t B = c.size(0), H = c.size(1);
  Tensor dh = grad_outputs[0].contiguous(), dc_in = grad_outputs[1].contiguous();
  Tensor dgates = empty({B, 4 * H}, c.options()), dc_prev = empty({B, H}, c.options());
  dispatch_float(c.dtype(), "lstm_cell backward", [&]<class T>() {
    const T *ac = act.data<T>(), *cp = c_prev.data<T>(), *cc = c.data<T>();
    const T *dhp = dh.data<T>(), *dcp = dc_in.data<T>();
    T *dg = dgates.data<T>(), *dcpv = dc_prev.data<T>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t k = 0; k < H; ++k) {
        const T* acb = ac + b * 4 * H;
        T* dgb = dg + b * 4 * H;
        const int64_t e = b * H + k;
        T i = acb[k], f = acb[H + k], gg = acb[2 * H + k], o = acb[3 * H + k];
        T tc = std::tanh(cc[e]);
        T dc = dcp[e] + dhp[e] * o * (T(1) - tc * tc);
        dgb[k] = dc * gg * i * (T(1) - i);
        dgb[H + k] = dc * cp[e] * f * (T(1) - f);
        dgb[2 * H + k] = dc * i * (T(1) - gg * gg);
        dgb[3 * H + k] = dhp[e] * tc * o * (T(1) - o);
        dcpv[e] = dc * f;
      }
  });
  return {dgates, dc_prev};
}

std::pair<Tensor, Tensor> lstm_cell(const Tensor& gates_in, const Tensor& c_prev_in) {
  const profile::Op range("lstm_cell");
  check_defined("lstm_cell", gates_in, "gates");
  check_defined("lstm_cell", c_prev_in, "c_prev");
  check_float("lstm_cell", gates_in);
  check_same_dtype("lstm_cell", gates_in, c_prev_in);
  check_same_device("lstm_cell", gates_in, c_prev_in);
  TCN_CHECK(gates_in.dim() == 2 && c_prev_in.dim() == 2 && gates_in.size(0) == c_prev_in.size(0) &&
                gates_in.size(1) == 4 * c_prev_in.size(1),
            "lstm_cell: gates must be [B, 4H] and c_prev [B, H], got ", gates_in.shape(), " and ", c_prev_in.shape());
  if (gates_in.device().is_cuda()) no_cuda_kernel("lstm_cell");
  const int64_t B = c_prev_in.size(0), H = c_prev_in.size(1);
  Tensor gates = gates_in.detach().contiguous(), c_prev = c_prev_in.detach().contiguous();
  Tensor act = empty({B, 4 * H}, gates.options());  // i, f, g, o after their nonlinearities
  Tensor h = empty({B, H}, gates.options()), c = empty({B, H}, gates.options());
  dispatch_float(gates.dtype(), "lstm_cell", [&]<class T>() {
    const T* a = gates.data<T>();
    const T* cp = c_prev.data<T>();
    T *ac = act.data<T>(), *hp = h.data<T>(), *cc = c.data<T>();
#pragma omp parallel for schedule(static) if (B * H >= (1 << 14))
    for (int64_t b = 0; b < B; ++b)
      for (int64_t k = 0; k < H; ++k) {
        const T* ab = a + b * 4 * H;
        T* acb = ac + b * 4 * H;
        T i = sigm(ab[k]), f = sigm(ab[H + k]), g = std::tanh(ab[2 * H + k]), o = sigm(ab[3 * H + k]);
        acb[k] = i;
        acb[H + k] = f;
        acb[2 * H + k] = g;
        acb[3 * H + k] = o;
        T cv = f * cp[b * H + k] + i * g;
        cc[b * H + k] = cv;
        hp[b * H + k] = o * std::tanh(cv);
      }
  });
  if (autograd::needs_grad({gates_in, c_prev_in}))
    autograd::record("lstm_cell", {gates_in, c_prev_in}, {h, c},
                     std::bind_front(lstm_cell_backward, act, c_prev, c.detach()));
  return {h, c};
}

}  // namespace tcn
