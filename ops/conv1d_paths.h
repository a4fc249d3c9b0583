// conv1d's two paths behind one interface, shared by ops/conv1d.cpp (the op and
// its GEMM path, the teaching file) and ops/conv1d_cudnn.cpp (the cuDNN path and
// the --conv_impl choice between the two). Internal to ops/: not part of the API.
#pragma once

#include <functional>

#include "core/backends.h"
#include "core/tensor.h"

namespace tcn::conv1d_paths {

// Geometry of the padded row space.
struct ConvRows {
  int64_t B, L, Cin, Cout, K, d, left, Lp, M;
  ConvRows(int64_t B, int64_t L, int64_t Cin, int64_t Cout, int64_t K, int64_t d, int64_t left)
      : B(B), L(L), Cin(Cin), Cout(Cout), K(K), d(d), left(left), Lp(L + (K - 1) * d), M(B * Lp - (K - 1) * d) {}
};

// The process-wide settings that decide how this call runs, read once, at the
// top of the op (ops/conv1d.cpp), and passed down as arguments.
struct ConvSettings {
  bool bf16 = false;           // autocast: GEMM operands in bfloat16 (core/autocast.h)
  bool tf32 = false;           // float32 GEMMs on the GPU's TF32 tensor cores (core/autocast.h)
  ConvImpl impl = ConvImpl::Auto;  // --conv_impl (core/backends.h)
  bool deterministic = false;  // only deterministic cuDNN algorithms (core/backends.h)
  bool capturing = false;      // inside a CUDA graph capture, where nothing may be timed (core/step_graph.h)
};
ConvSettings conv_settings(const Tensor& x);

// What an implementation gives the op: y [B, L, Cout] (x's dtype) and the
// function that computes the gradients from dy: dx [B, L, Cin], dw [Cout, Cin, K]
// and db [Cout], each only where asked for.
struct ConvGrads {
  Tensor dx, dw, db;
};
using ConvBackward = std::function<ConvGrads(const Tensor& dy, bool need_x, bool need_w, bool need_b)>;
struct ConvOut {
  Tensor y;
  ConvBackward backward;  // a path's named backward with what it saved (std::bind_front)
};

// x [B, L, C] copied into rows of width X of a zero-padded [B, Lp, X] buffer
// (ops/conv1d.cpp says which rows and columns hold what).
Tensor to_padded_rows(const Tensor& x, int64_t left, int64_t Lp, DType dtype, int64_t X = 0);

// The GEMM path: K accumulating GEMMs per pass over padded rows (ops/conv1d.cpp).
ConvOut conv1d_gemm(const ConvRows& geo, const Tensor& x, const Tensor& w, const Tensor& b, const ConvSettings& s);
// The cuDNN path (ops/conv1d_cudnn.cpp).
ConvOut conv1d_cudnn(const ConvRows& geo, const Tensor& x, const Tensor& w, const Tensor& b, const ConvSettings& s);
// Which path runs this call: the setting, the device, and for auto the
// per-shape timing (ops/conv1d_cudnn.cpp).
ConvImpl conv1d_impl(const ConvRows& geo, const Tensor& x, const Tensor& w, const Tensor& b, const ConvSettings& s);

}  // namespace tcn::conv1d_paths
