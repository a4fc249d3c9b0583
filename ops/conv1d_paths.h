// conv1d's paths behind one interface, shared by ops/conv1d.cpp (the op and its
// GEMM path, the teaching file), ops/conv1d_winograd.cpp (the Winograd-domain path,
// on the CPU) and ops/conv1d_cudnn.cpp (the cuDNN path and the --conv_impl choice
// between them). Internal to ops/: not part of the API.
#pragma once

#include <functional>
#include <vector>

#include "core/backends.h"
#include "core/tensor.h"
#include "cuda/kernels.h"

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

// The pieces of the GEMM path that the Winograd path shares (ops/conv1d.cpp): a
// row-major GEMM on the tensors' device (bf16 operands give float32 C), the row
// width X of the packed operands, the weights packed [K, X, Cout] with the bias as
// row Cin of tap 0, and the gradients dw, db unpacked from that layout.
void gemm_on(const Tensor& like, bool tf32, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda,
             const void* B, int64_t ldb, double beta, void* C, int64_t ldc, cuda::GemmBatch batch = {});
int64_t row_width(int64_t Cin, bool bias);
Tensor pack_weights(const Tensor& w, const Tensor& bias, int64_t X, DType dtype);
void unpack_grads(const Tensor& dwt, const ConvRows& geo, bool need_w, bool need_b, ConvGrads& g);

// The GEMM path: K accumulating GEMMs per pass over padded rows (ops/conv1d.cpp).
ConvOut conv1d_gemm(const ConvRows& geo, const Tensor& x, const Tensor& w, const Tensor& b, const ConvSettings& s);

// The Winograd path (ops/conv1d_winograd.cpp), CPU only: F(m, K) minimal filtering
// on each dilation phase. winograd_tile says which m it uses for a kernel size
// and precision (0: none, the GEMM path runs); conv1d_winograd_tiled takes m given.
int64_t winograd_tile(int64_t K, bool bf16);
// Whether --conv_impl auto takes the Winograd path on the CPU: where it has a tile and
// the channels are many enough for its GEMMs to outweigh its transforms.
bool winograd_pays(const ConvRows& geo, bool bf16);
ConvOut conv1d_winograd(const ConvRows& geo, const Tensor& x, const Tensor& w, const Tensor& b, const ConvSettings& s);
ConvOut conv1d_winograd_tiled(const ConvRows& geo, const Tensor& x, const Tensor& w, const Tensor& b,
                              const ConvSettings& s, int64_t m);
// The transforms of F(m, k), row-major: A^T [m, n], G [n, k], B^T [n, n] (n = m + k - 1).
struct WinogradTransforms {
  int64_t m, k, n;
  std::vector<double> AT, G, BT;
};
WinogradTransforms winograd_transforms(int64_t m, int64_t k);
// The cuDNN path (ops/conv1d_cudnn.cpp).
ConvOut conv1d_cudnn(const ConvRows& geo, const Tensor& x, const Tensor& w, const Tensor& b, const ConvSettings& s);
// Which path runs this call: the setting, the device, and for auto the
// per-shape timing (ops/conv1d_cudnn.cpp).
ConvImpl conv1d_impl(const ConvRows& geo, const Tensor& x, const Tensor& w, const Tensor& b, const ConvSettings& s);

}  // namespace tcn::conv1d_paths
