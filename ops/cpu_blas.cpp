#include "ops/cpu_blas.h"

#include <cblas.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include "core/error.h"

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
  bool ta, tb, accumulate;
  int64_t M, N, K, lda, ldb, ldc;
  auto tie() const { return std::tie(ta, tb, accumulate, M, N, K, lda, ldb, ldc); }
  bool operator<(const MatmulKey& o) const { return tie() < o.tie(); }
};

struct OneDNN {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory::desc a, b, c;
  };
  std::map<MatmulKey, Entry> cache;
  std::mutex mu;

  static constexpr size_t kMaxCached = 512;  // shapes; a run needs far fewer (evaluation adds a few)

  const Entry& get(const MatmulKey& k, float beta) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(k);
    if (it != cache.end()) return it->second;
    if (cache.size() >= kMaxCached) cache.clear();
    using md = dnnl::memory::desc;
    using dt = dnnl::memory::data_type;
    // Strides express the transposes: op(A) [M, K] is A itself (row stride
    // lda) or A^T of a [K, M] array (column stride lda).
    md a({k.M, k.K}, dt::f32, k.ta ? dnnl::memory::dims{1, k.lda} : dnnl::memory::dims{k.lda, 1});
    md b({k.K, k.N}, dt::f32, k.tb ? dnnl::memory::dims{1, k.ldb} : dnnl::memory::dims{k.ldb, 1});
    md c({k.M, k.N}, dt::f32, dnnl::memory::dims{k.ldc, 1});
    dnnl::primitive_attr attr;
    if (k.accumulate) {  // C = A @ B + beta * C: oneDNN's sum post-op with scale beta
      dnnl::post_ops po;
      po.append_sum(beta);
      attr.set_post_ops(po);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine);
    ++g_primitives;
    return cache.emplace(k, Entry{dnnl::matmul(pd), a, b, c}).first->second;
  }
};

OneDNN& onednn() {
  static OneDNN* o = new OneDNN();  // never destroyed: GEMMs may run during static destruction
  return *o;
}

void onednn_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float beta, float* C, int64_t ldc) {
  // The sum post-op's scale is part of the primitive: beta 0 and 1 (what tcn
  // uses) each get their own entry; any other beta is keyed by its value too.
  MatmulKey key{ta, tb, beta != 0.0f, M, N, K, lda, ldb, ldc};
  OneDNN& o = onednn();
  if (beta != 0.0f && beta != 1.0f) {
    // Rare: scale C first, then accumulate with beta 1.
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] *= beta;
    beta = 1.0f;
  }
  const OneDNN::Entry& e = o.get(key, beta);
  try {
    dnnl::memory a(e.a, o.engine, const_cast<float*>(A)), b(e.b, o.engine, const_cast<float*>(B)), c(e.c, o.engine, C);
    e.prim.execute(o.stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
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
void gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
              int64_t ldb, float beta, float* C, int64_t ldc);
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc) {
  if (!g_sink) return gemm_f32(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
  const auto t0 = std::chrono::steady_clock::now();
  gemm_f32(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  g_sink->push_back({ta, tb, M, N, K, lda, ldb, ldc, beta, s});
}

namespace {
void gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
              int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;  // nothing to compute (oneDNN divides by these when it blocks)
  if (K == 0) {                  // an empty sum: C = beta * C, as BLAS does
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
#if TCN_WITH_ONEDNN
  if (gemm_library() == GemmLibrary::OneDNN) {
    onednn_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#endif
  cblas_sgemm(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}
}  // namespace

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
          int64_t ldb, double beta, double* C, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), M, N, K, 1.0, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace tcn::cpu
