#include "ops/cpu_blas.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <unordered_map>

#include "core/error.h"
#include "core/profile.h"

#if TCN_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace tcn::cpu {

namespace {

CBLAS_TRANSPOSE cblas_trans(bool t) { return t ? CblasTrans : CblasNoTrans; }

std::atomic<int> g_library{-1};  // -1: not chosen yet (the environment decides at the first GEMM)
std::atomic<int64_t> g_primitives{0};
std::vector<GemmCall>* g_sink = nullptr;

#if TCN_WITH_ONEDNN
// One oneDNN matmul per GEMM shape: (ta, tb, M, N, K, lda, ldb, ldc, beta
// nonzero). Creating a primitive costs tens of microseconds (it picks and
// JIT-compiles a kernel); a training step uses a few dozen shapes, created in
// its first step and reused after. oneDNN has its own primitive cache too, but
// looking a primitive up there still builds its descriptor on every call.
struct MatmulKey {
  bool ta, tb, accumulate, bf16, bias;  // bf16: bfloat16 A and B (C and the bias are float32 either way)
  int64_t M, N, K, lda, ldb, ldc;
  auto tie() const { return std::tie(ta, tb, accumulate, bf16, bias, M, N, K, lda, ldb, ldc); }
  bool operator<(const MatmulKey& o) const { return tie() < o.tie(); }
};

struct OneDNN {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory::desc a, b, c, bias;
    uint64_t last_use = 0;
  };
  std::map<MatmulKey, Entry> cache;
  std::mutex mu;
  uint64_t uses = 0;

  // Shapes; a run needs far fewer (evaluation adds a few). When full, the least
  // recently used shape goes, so a steady step's shapes stay however many other
  // shapes came before (a test suite makes hundreds).
  static constexpr size_t kMaxCached = 512;

  const Entry& get(const MatmulKey& k, float beta) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(k);
    if (it != cache.end()) {
      it->second.last_use = ++uses;
      return it->second;
    }
    if (cache.size() >= kMaxCached)
      cache.erase(std::min_element(cache.begin(), cache.end(), [](const auto& x, const auto& y) {
        return x.second.last_use < y.second.last_use;
      }));
    using md = dnnl::memory::desc;
    using dt = dnnl::memory::data_type;
    // Strides express the transposes: op(A) [M, K] is A itself (row stride
    // lda) or A^T of a [K, M] array (column stride lda).
    const dt in = k.bf16 ? dt::bf16 : dt::f32;
    md a({k.M, k.K}, in, k.ta ? dnnl::memory::dims{1, k.lda} : dnnl::memory::dims{k.lda, 1});
    md b({k.K, k.N}, in, k.tb ? dnnl::memory::dims{1, k.ldb} : dnnl::memory::dims{k.ldb, 1});
    md c({k.M, k.N}, dt::f32, dnnl::memory::dims{k.ldc, 1});
    md bias = k.bias ? md({1, k.N}, dt::f32, dnnl::memory::dims{k.N, 1}) : md();
    dnnl::primitive_attr attr;
    if (k.accumulate) {  // C = A @ B + beta * C: oneDNN's sum post-op with scale beta
      dnnl::post_ops po;
      po.append_sum(beta);
      attr.set_post_ops(po);
    }
    dnnl::matmul::primitive_desc pd(k.bias ? dnnl::matmul::desc(a, b, bias, c) : dnnl::matmul::desc(a, b, c), attr,
                                    engine);
    ++g_primitives;
    return cache.emplace(k, Entry{dnnl::matmul(pd), a, b, c, bias, ++uses}).first->second;
  }
};

OneDNN& onednn() {
  static OneDNN* o = new OneDNN();  // never destroyed: GEMMs may run during static destruction
  return *o;
}

// oneDNN 2.x implements a bf16 matmul only on CPUs with AVX-512 (avx512_core;
// native dot products need avx512_bf16); elsewhere creating one fails with
// "unimplemented". Asked once, on a 1x1x1 product.
bool probe_onednn_bf16() {
  try {
    using md = dnnl::memory::desc;
    using dt = dnnl::memory::data_type;
    const md a({1, 1}, dt::bf16, dnnl::memory::dims{1, 1}), c({1, 1}, dt::f32, dnnl::memory::dims{1, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), onednn().engine);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

// A and B are float or bfloat16 (In), C float.
template <class In>
void onednn_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const In* A, int64_t lda, const In* B,
                 int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  // The sum post-op's scale is part of the primitive: beta 0 and 1 (what tcn
  // uses) each get their own entry.
  MatmulKey key{ta, tb, beta != 0.0f, std::is_same_v<In, bfloat16>, bias != nullptr, M, N, K, lda, ldb, ldc};
  OneDNN& o = onednn();
  if (beta != 0.0f && beta != 1.0f) {
    // Rare: scale C first, then accumulate with beta 1.
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] *= beta;
    beta = 1.0f;
  }
  const OneDNN::Entry& e = o.get(key, beta);
  try {
    dnnl::memory a(e.a, o.engine, const_cast<In*>(A)), b(e.b, o.engine, const_cast<In*>(B)), c(e.c, o.engine, C);
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
    if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(e.bias, o.engine, const_cast<float*>(bias)));
    e.prim.execute(o.stream, args);
    o.stream.wait();
  } catch (const dnnl::error& err) {
    TCN_FAIL("oneDNN matmul [", M, ", ", K, "] @ [", K, ", ", N, "] failed: ", err.what());
  }
}
#endif

GemmLibrary default_library() {
  const char* env = std::getenv("TCN_CPU_GEMM");
  if (env && *env) return parse_gemm_library(env);
  return onednn_available() ? GemmLibrary::OneDNN : GemmLibrary::OpenBLAS;
}

}  // namespace

bool onednn_available() { return TCN_WITH_ONEDNN != 0; }

bool onednn_bf16_available() {
#if TCN_WITH_ONEDNN
  static const bool ok = probe_onednn_bf16();
  return ok;
#else
  return false;
#endif
}

GemmLibrary parse_gemm_library(const std::string& name) {
  if (name == "openblas") return GemmLibrary::OpenBLAS;
  if (name == "onednn") return GemmLibrary::OneDNN;
  TCN_FAIL("unknown CPU GEMM library '", name, "': expected openblas or onednn");
}

const char* gemm_library_name(GemmLibrary lib) { return lib == GemmLibrary::OneDNN ? "oneDNN" : "OpenBLAS"; }

GemmLibrary gemm_library() {
  int lib = g_library.load();
  if (lib < 0) {
    set_gemm_library(default_library());
    lib = g_library.load();
  }
  return static_cast<GemmLibrary>(lib);
}

void set_gemm_library(GemmLibrary lib) {
  TCN_CHECK(lib != GemmLibrary::OneDNN || onednn_available(),
            "this build of tcn has no oneDNN (install libdnnl-dev and reconfigure); use openblas");
  g_library = static_cast<int>(lib);
}

int64_t onednn_primitives_created() { return g_primitives.load(); }

void record_gemms(std::vector<GemmCall>* sink) { g_sink = sink; }

namespace {

// Empty products, handled before any library sees them (oneDNN divides by
// M and N when it blocks; an empty sum over K is C = bias + beta * C, as in BLAS).
template <class T>
bool trivial(int64_t M, int64_t N, int64_t K, T beta, T* C, int64_t ldc, const T* bias) {
  if (M == 0 || N == 0) return true;
  if (K != 0) return false;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      C[i * ldc + j] = (beta == T(0) ? T(0) : beta * C[i * ldc + j]) + (bias ? bias[j] : T(0));
  return true;
}

// For BLAS, which has no bias: C = bias + beta * C first, after which the
// GEMM accumulates (returns the beta to call it with).
template <class T>
T fold_bias(int64_t M, int64_t N, T beta, T* C, int64_t ldc, const T* bias) {
  if (!bias) return beta;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = (beta == T(0) ? T(0) : beta * C[i * ldc + j]) + bias[j];
  return T(1);
}

// Runs `body` (the GEMM), appending its shape and time to the sink when one is set.
template <class Body>
void timed(bool ta, bool tb, bool bf16, bool bias, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
           int64_t ldc, float beta, Body&& body) {
  profile::add_flops(2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K));
  if (!g_sink) return body();
  const auto t0 = std::chrono::steady_clock::now();
  body();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  g_sink->push_back({ta, tb, bf16, bias, M, N, K, lda, ldb, ldc, beta, s});
}

}  // namespace

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  if (trivial(M, N, K, beta, C, ldc, bias)) return;
  timed(ta, tb, false, bias != nullptr, M, N, K, lda, ldb, ldc, beta, [&] {
#if TCN_WITH_ONEDNN
    if (gemm_library() == GemmLibrary::OneDNN)
      return onednn_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, bias);
#endif
    const float b = fold_bias(M, N, beta, C, ldc, bias);
    cblas_sgemm(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), M, N, K, 1.0f, A, lda, B, ldb, b, C, ldc);
  });
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t lda, const bfloat16* B,
          int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  if (trivial(M, N, K, beta, C, ldc, bias)) return;
  timed(ta, tb, true, bias != nullptr, M, N, K, lda, ldb, ldc, beta, [&] {
#if TCN_WITH_ONEDNN
    if (gemm_library() == GemmLibrary::OneDNN && onednn_bf16_available())
      return onednn_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, bias);
#endif
    // Widen the stored arrays (rows x ld each) and multiply in float32: the
    // same products and float32 sums (bf16 x bf16 is exact in float32).
    const int64_t arows = ta ? K : M, acols = ta ? M : K, brows = tb ? N : K, bcols = tb ? K : N;
    std::vector<float> a(A, A + (arows - 1) * lda + acols), b(B, B + (brows - 1) * ldb + bcols);
    const float bt = fold_bias(M, N, beta, C, ldc, bias);
    cblas_sgemm(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), M, N, K, 1.0f, a.data(), lda, b.data(), ldb, bt, C,
                ldc);
  });
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
          int64_t ldb, double beta, double* C, int64_t ldc, const double* bias) {
  if (trivial(M, N, K, beta, C, ldc, bias)) return;
  const double b = fold_bias(M, N, beta, C, ldc, bias);
  cblas_dgemm(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), M, N, K, 1.0, A, lda, B, ldb, b, C, ldc);
}

}  // namespace tcn::cpu
