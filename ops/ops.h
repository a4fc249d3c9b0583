// The primitive ops. Each one checks its arguments (throwing tcn::Error with the
// op name and the shapes), dispatches on the device to its CPU or CUDA kernel,
// and, when an input requires grad, records its backward on the tape.
// One primitive (or one family of primitives) per .cpp file in ops/.
//
// Differentiable unless marked "in place" or "no grad".
#pragma once

#include <tuple>
#include <utility>

#include "autograd/tape.h"
#include "core/generator.h"
#include "core/tensor.h"

namespace tcn {

// ---- elementwise, NumPy broadcasting (ops/binary.cpp) ------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// relu(a + b) in one pass each way (a TCN block's residual connection): the same
// values and gradients as composed, one kernel and one tensor fewer forward.
Tensor add_relu(const Tensor& a, const Tensor& b);
// The gated linear unit over the last dim: x [..., 2C] -> a * sigmoid(b), a and
// b its two halves (torch.nn.functional.glu(x, -1)).
Tensor glu(const Tensor& x);

// ---- elementwise, one input (ops/unary.cpp) ---------------------------------
Tensor neg(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor relu_backward(const Tensor& g, const Tensor& y);  // g where y > 0, else 0 (no tape)
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor pow(const Tensor& x, double p);
Tensor add(const Tensor& x, double s);
Tensor mul(const Tensor& x, double s);
Tensor minimum(const Tensor& x, double s);  // elementwise min(x, s)
// Activations, as torch.nn.functional defines them (gelu: the exact, erf form).
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor selu(const Tensor& x);
Tensor gelu(const Tensor& x);
inline Tensor sub(const Tensor& x, double s) { return add(x, -s); }
inline Tensor div(const Tensor& x, double s) { return mul(x, 1.0 / s); }

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& x, double s) { return add(x, s); }
inline Tensor operator+(double s, const Tensor& x) { return add(x, s); }
inline Tensor operator-(const Tensor& x, double s) { return add(x, -s); }
inline Tensor operator-(double s, const Tensor& x) { return add(neg(x), s); }
inline Tensor operator*(const Tensor& x, double s) { return mul(x, s); }
inline Tensor operator*(double s, const Tensor& x) { return mul(x, s); }
inline Tensor operator/(const Tensor& x, double s) { return mul(x, 1.0 / s); }
inline Tensor operator/(double s, const Tensor& x) { return mul(pow(x, -1.0), s); }

// ---- reductions (ops/reduce.cpp) --------------------------------------------
// Over `dims` (negative allowed; empty = all dims). keepdim keeps them as size 1.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Largest value along `dim` and its index (int64, the first on ties).
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
// Sums a broadcast gradient back to `shape` (the inverse of broadcasting).
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- matrix products through BLAS (ops/matmul.cpp) ----------------------------
// a [M, K] @ b [K, N]; transposed views are passed to BLAS without copies.
Tensor mm(const Tensor& a, const Tensor& b);
// a [B, M, K] @ b [B, K, N].
Tensor bmm(const Tensor& a, const Tensor& b);
// a [..., M, K] @ b [K, N] or b [..., K, N] (batch dims broadcast).
Tensor matmul(const Tensor& a, const Tensor& b);

// ---- rows: the embedding primitive (ops/rows.cpp) ---------------------------
// table [V, D], idx int64 of any shape -> [*idx.shape, D]; idx values must be in [0, V).
Tensor gather_rows(const Tensor& table, const Tensor& idx);
// Sums src [*idx.shape, D] into the rows idx of a zero [num_rows, D] table;
// duplicate indices accumulate, in index order.
Tensor scatter_add_rows(const Tensor& src, const Tensor& idx, int64_t num_rows);

// ---- padding and joining (ops/pad.cpp, ops/cat.cpp) --------------------------
// Adds `left` and `right` entries of `value` along `dim`.
Tensor pad(const Tensor& x, int64_t dim, int64_t left, int64_t right, double value = 0.0);
Tensor cat(const TensorList& xs, int64_t dim);
// Joins equally shaped tensors along a new dim.
Tensor stack(const TensorList& xs, int64_t dim);
// The slices of x along dim, as views; one tape node whose backward stacks the gradients.
TensorList unbind(const Tensor& x, int64_t dim);

// ---- layer primitives --------------------------------------------------------
// Channels-last conv: x [B, T, Cin], w [Cout, Cin, K], bias [Cout] (or undefined)
// -> [B, T, Cout]; output t reads inputs t + j*dilation - left_pad, zeros outside.
// left_pad = (K-1)*dilation is a causal conv (PyTorch's padded conv + chomp). (ops/conv1d.cpp)
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t dilation, int64_t left_pad);
// w = g * v / ||v||, the norm per row of v (over every dim but the first), g
// [rows, 1, ...]: PyTorch's weight_norm with dim 0, one fused op. (ops/weight_norm.cpp)
Tensor weight_norm(const Tensor& v, const Tensor& g);
// Layer norm over the last dim (over channels of a [B, L, C] activation), as
// torch.nn.functional.layer_norm(x, [C], gamma, beta, eps); gamma and beta [C]
// may be undefined (no affine part). (ops/layer_norm.cpp)
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps = 1e-5);
// Mean over positions of -log softmax(logits)[target]; logits [..., V], targets int64 [...]. (ops/cross_entropy.cpp)
Tensor cross_entropy(const Tensor& logits, const Tensor& targets);
// Inverted dropout with a Philox mask (stored on the CPU, regenerated in backward on a GPU); p = 0 returns x. (ops/dropout.cpp)
Tensor dropout(const Tensor& x, double p, Generator& gen = default_generator());
// dropout(relu(x)), fused: the same values, mask and gradients in one pass.
Tensor relu_dropout(const Tensor& x, double p, Generator& gen = default_generator());
// relu(relu_dropout(x) + res), res of x's shape: a TCN block's tail, one pass each
// way; the same values, gradients and draws as composed.
Tensor relu_dropout_add_relu(const Tensor& x, const Tensor& res, double p, Generator& gen = default_generator());
// One LSTM step: gates [B, 4H] (i, f, g, o pre-activations), c_prev [B, H] -> (h, c). (ops/lstm_cell.cpp)
std::pair<Tensor, Tensor> lstm_cell(const Tensor& gates, const Tensor& c_prev);
// A whole LSTM layer after the input projection: xp [B, T, 4H] (= x W_ih^T + biases),
// W_hh [4H, H], h0 and c0 [B, H] -> (outputs [B, T, H], h_T, c_T). (ops/lstm_layer.cpp)
std::tuple<Tensor, Tensor, Tensor> lstm_layer(const Tensor& xp, const Tensor& w_hh, const Tensor& h0, const Tensor& c0);
// The same layer on cuDNN (CUDA float32 tensors; cuda/cudnn.h), from the layer's
// input: x [B, T, I], PyTorch's w_ih [4H, I], w_hh [4H, H], b_ih, b_hh [4H], h0,
// c0 [B, H] -> (outputs [B, T, H], h_T, c_T). (ops/lstm_layer.cpp)
std::tuple<Tensor, Tensor, Tensor> lstm_layer_cudnn(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh,
                                                    const Tensor& b_ih, const Tensor& b_hh, const Tensor& h0,
                                                    const Tensor& c0);

// ---- views (ops/view.cpp); also available as Tensor methods -------------------
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor view(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x, int64_t dim);

// ---- copies (ops/copy.cpp) ---------------------------------------------------
Tensor contiguous(const Tensor& x);         // x itself when already contiguous
Tensor clone(const Tensor& x);              // always a new contiguous tensor
Tensor to_device(const Tensor& x, Device device);
Tensor to_dtype(const Tensor& x, DType dtype);  // differentiable between float types
// In place, no grad: dst[...] = src (src broadcast to dst's shape, same dtype;
// any devices). dst may be a strided view: this is "copy into a slice".
void copy_(const Tensor& dst, const Tensor& src);

// ---- in place, no grad (ops/inplace.cpp): optimizer and gradient updates ------
void fill_(const Tensor& x, double value);
inline void zero_(const Tensor& x) { fill_(x, 0.0); }
// x += alpha * y (y broadcast to x's shape).
void add_(const Tensor& x, const Tensor& y, double alpha = 1.0);
void mul_(const Tensor& x, double s);
// x *= s, s a tensor broadcast to x (e.g. a scalar that stays on the device).
void mul_(const Tensor& x, const Tensor& s);

// ---- random (ops/random.cpp): Philox streams, see core/philox.h -------------
void uniform_(const Tensor& x, double lo, double hi, Generator& gen = default_generator());
void normal_(const Tensor& x, double mean, double std, Generator& gen = default_generator());
Tensor rand(const Shape& shape, TensorOptions opts = {}, Generator& gen = default_generator());
Tensor randn(const Shape& shape, TensorOptions opts = {}, Generator& gen = default_generator());

}  // namespace tcn
