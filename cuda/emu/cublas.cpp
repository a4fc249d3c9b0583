// The emulated device's cuBLAS (cuda/emu/cublas_api.h): arguments checked as
// cuBLAS checks them, every operand checked to lie inside one device
// allocation, and the product queued on the handle's stream, where OpenBLAS
// computes it column-major, exactly the cuBLAS definition.
#include <cblas.h>

#include <bit>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/bfloat16.h"
#include "cublas_api.h"
#include "internal.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
};

namespace {

thread_local std::string tl_status_detail;
thread_local std::string tl_status_message;

cublasStatus_t invalid(const std::string& detail) {
  tl_status_detail = detail;
  return CUBLAS_STATUS_INVALID_VALUE;
}

float round_to_tf32(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7F800000u) != 0x7F800000u) {  // finite: round to nearest even at mantissa bit 13
    u += 0x0FFFu + ((u >> 13) & 1u);
    u &= 0xFFFFE000u;
  }
  return std::bit_cast<float>(u);
}

void blas_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* A, int lda, const float* B, int ldb,
               float beta, float* C, int ldc) {
  cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, A, lda,
              B, ldb, beta, C, ldc);
}
void blas_gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* A, int lda, const double* B,
               int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, A, lda,
              B, ldb, beta, C, ldc);
}

// Checks that `count` batches of an operand (rows x cols, leading dimension ld,
// batch stride) lie inside one device allocation.
template <class T>
bool operand_in_device_memory(const char* call, const char* name, const T* p, int rows, int cols, int ld,
                              long long stride, int batch, std::string* detail) {
  if (rows == 0 || cols == 0 || batch == 0) return true;
  const long long extent = static_cast<long long>(cols - 1) * ld + rows;
  const long long lo = stride < 0 ? (batch - 1) * stride : 0;
  const long long hi = (stride > 0 ? (batch - 1) * stride : 0) + extent;
  tcn::emu::Region r;
  if (tcn::emu::find_region(p + lo, static_cast<size_t>(hi - lo) * sizeof(T), &r) && r.kind == 1) return true;
  std::ostringstream o;
  o << call << ": " << name << " (" << rows << " x " << cols << ", ld " << ld;
  if (batch > 1) o << ", " << batch << " batches " << stride << " apart";
  o << ") at " << static_cast<const void*>(p) << " is not inside one device allocation";
  *detail = o.str();
  return false;
}

// In: the type of A and B (T, or bfloat16 with T float: cublasGemmEx's mixed
// precision); T: C's, alpha's and beta's, and the accumulation's.
template <class T, class In = T>
cublasStatus_t gemm(const char* call, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, const T* alpha, const In* A, int lda, long long sa, const In* B, int ldb, long long sb,
                    const T* beta, T* C, int ldc, long long sc, int batch) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto op_ok = [](cublasOperation_t o) { return o == CUBLAS_OP_N || o == CUBLAS_OP_T || o == CUBLAS_OP_C; };
  std::ostringstream args;
  args << call << "(transa " << ta << ", transb " << tb << ", m " << m << ", n " << n << ", k " << k << ", lda " << lda
       << ", ldb " << ldb << ", ldc " << ldc << ")";
  if (!op_ok(ta) || !op_ok(tb)) return invalid(args.str() + ": unknown operation");
  if (m < 0 || n < 0 || k < 0 || batch < 0) return invalid(args.str() + ": a negative size");
  const bool at = ta != CUBLAS_OP_N, bt = tb != CUBLAS_OP_N;  // real types: C is T
  const int ra = at ? k : m, ca = at ? m : k, rb = bt ? n : k, cb = bt ? k : n;
  if (lda < std::max(1, ra)) return invalid(args.str() + ": lda < max(1, rows of A)");
  if (ldb < std::max(1, rb)) return invalid(args.str() + ": ldb < max(1, rows of B)");
  if (ldc < std::max(1, m)) return invalid(args.str() + ": ldc < max(1, m)");
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  std::string detail;
  if (!operand_in_device_memory(call, "A", A, ra, ca, lda, sa, batch, &detail) ||
      !operand_in_device_memory(call, "B", B, rb, cb, ldb, sb, batch, &detail) ||
      !operand_in_device_memory(call, "C", static_cast<const T*>(C), m, n, ldc, sc, batch, &detail))
    return invalid(detail);
  // Host pointer mode reads alpha and beta now; device mode when the GEMM runs.
  const bool device_scalars = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  const T a_now = device_scalars ? T(0) : *alpha, b_now = device_scalars ? T(0) : *beta;
  const bool tf32 = std::is_same_v<T, float> && (h->math & 0xF) == CUBLAS_TF32_TENSOR_OP_MATH;
  cudaError_t e = tcn::emu::enqueue(h->stream, call, [=] {
    tcn::emu::count_cublas_call();  // when it runs: a graph's GEMMs count at every replay
    const T a = device_scalars ? *alpha : a_now, b = device_scalars ? *beta : b_now;
    for (int i = 0; i < batch; ++i) {
      if constexpr (!std::is_same_v<In, T>) {  // bf16 operands: exact in float, multiplied and summed in float
        const size_t na = k > 0 ? static_cast<size_t>(ca - 1) * lda + ra : 0;
        const size_t nb = k > 0 ? static_cast<size_t>(cb - 1) * ldb + rb : 0;
        const std::vector<T> wa(A + i * sa, A + i * sa + na), wb(B + i * sb, B + i * sb + nb);
        blas_gemm(at, bt, m, n, k, a, wa.data(), lda, wb.data(), ldb, b, C + i * sc, ldc);
        continue;
      } else {
      const T* Ai = A + i * sa;
      const T* Bi = B + i * sb;
      std::vector<T> ra32, rb32;
      if (tf32 && k > 0) {  // tensor cores read TF32: round the inputs, accumulate in FP32
        const size_t na = static_cast<size_t>(ca - 1) * lda + ra, nb = static_cast<size_t>(cb - 1) * ldb + rb;
        ra32.assign(Ai, Ai + na);
        rb32.assign(Bi, Bi + nb);
        for (T& v : ra32) v = static_cast<T>(round_to_tf32(static_cast<float>(v)));
        for (T& v : rb32) v = static_cast<T>(round_to_tf32(static_cast<float>(v)));
        Ai = ra32.data();
        Bi = rb32.data();
      }
      blas_gemm(at, bt, m, n, k, a, Ai, lda, Bi, ldb, b, C + i * sc, ldc);
      }
    }
  });
  if (e != cudaSuccess) {
    tl_status_detail = std::string(call) + ": " + cudaGetErrorString(e);
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  tcn::emu::count_cublas_issue(h->stream);
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

const char* cublasGetStatusString(cublasStatus_t status) {
  const char* base = "CUBLAS_STATUS_UNKNOWN";
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: base = "CUBLAS_STATUS_NOT_INITIALIZED"; break;
    case CUBLAS_STATUS_ALLOC_FAILED: base = "CUBLAS_STATUS_ALLOC_FAILED"; break;
    case CUBLAS_STATUS_INVALID_VALUE: base = "CUBLAS_STATUS_INVALID_VALUE"; break;
    case CUBLAS_STATUS_ARCH_MISMATCH: base = "CUBLAS_STATUS_ARCH_MISMATCH"; break;
    case CUBLAS_STATUS_MAPPING_ERROR: base = "CUBLAS_STATUS_MAPPING_ERROR"; break;
    case CUBLAS_STATUS_EXECUTION_FAILED: base = "CUBLAS_STATUS_EXECUTION_FAILED"; break;
    case CUBLAS_STATUS_INTERNAL_ERROR: base = "CUBLAS_STATUS_INTERNAL_ERROR"; break;
    case CUBLAS_STATUS_NOT_SUPPORTED: base = "CUBLAS_STATUS_NOT_SUPPORTED"; break;
  }
  if (tl_status_detail.empty()) return base;
  tl_status_message = std::string(base) + " [emulated device: " + tl_status_detail + "]";
  return tl_status_message.c_str();
}

// Live handles stay reachable (as the library's own would), so a handle kept
// until exit, as tcn keeps one per device, is not reported as a leak.
std::mutex& handles_mutex() {
  static std::mutex mu;
  return mu;
}
std::set<cublasHandle_t>& handles() {
  static auto* h = new std::set<cublasHandle_t>;
  return *h;
}

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext;
  std::lock_guard<std::mutex> lock(handles_mutex());
  handles().insert(*handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  std::lock_guard<std::mutex> lock(handles_mutex());
  if (!handles().erase(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t* s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  *s = h->stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t* mode) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  *mode = h->math;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetPointerMode(cublasHandle_t h, cublasPointerMode_t mode) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetPointerMode(cublasHandle_t h, cublasPointerMode_t* mode) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  *mode = h->pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void*, size_t) {
  return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                           float* C, int ldc) {
  tl_status_detail.clear();
  return gemm("cublasSgemm", h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}
cublasStatus_t cublasDgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const double* alpha, const double* A, int lda, const double* B, int ldb, const double* beta,
                           double* C, int ldc) {
  tl_status_detail.clear();
  return gemm("cublasDgemm", h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float* alpha, const float* A, int lda, long long sa,
                                         const float* B, int ldb, long long sb, const float* beta, float* C, int ldc,
                                         long long sc, int batch) {
  tl_status_detail.clear();
  return gemm("cublasSgemmStridedBatched", h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc,
              batch);
}
cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const double* alpha, const double* A, int lda, long long sa,
                                         const double* B, int ldb, long long sb, const double* beta, double* C,
                                         int ldc, long long sc, int batch) {
  tl_status_detail.clear();
  return gemm("cublasDgemmStridedBatched", h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc,
              batch);
}

namespace {

// The mixed-precision GEMMs tcn asks cublasGemmEx for: bf16 A and B, float32 C
// and scalars, float32 compute. Anything else is refused, saying what came.
cublasStatus_t gemm_ex(const char* call, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                       int k, const void* alpha, const void* A, cudaDataType_t at, int lda, long long sa,
                       const void* B, cudaDataType_t bt, int ldb, long long sb, const void* beta, void* C,
                       cudaDataType_t ct, int ldc, long long sc, int batch, cublasComputeType_t compute,
                       cublasGemmAlgo_t algo) {
  tl_status_detail.clear();
  if (at != CUDA_R_16BF || bt != CUDA_R_16BF || ct != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F) {
    std::ostringstream o;
    o << call << ": the emulated cuBLAS supports A and B CUDA_R_16BF (14), C CUDA_R_32F (0), compute "
      << "CUBLAS_COMPUTE_32F (68); got A " << at << ", B " << bt << ", C " << ct << ", compute " << compute;
    tl_status_detail = o.str();
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (algo != CUBLAS_GEMM_DEFAULT) return invalid(std::string(call) + ": only CUBLAS_GEMM_DEFAULT is emulated");
  return gemm<float, tcn::bfloat16>(call, h, ta, tb, m, n, k, static_cast<const float*>(alpha),
                                    static_cast<const tcn::bfloat16*>(A), lda, sa, static_cast<const tcn::bfloat16*>(B),
                                    ldb, sb, static_cast<const float*>(beta), static_cast<float*>(C), ldc, sc, batch);
}

}  // namespace

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType_t at, int lda, const void* B,
                            cudaDataType_t bt, int ldb, const void* beta, void* C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  return gemm_ex("cublasGemmEx", h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1,
                 compute, algo);
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* A, cudaDataType_t at, int lda,
                                          long long sa, const void* B, cudaDataType_t bt, int ldb, long long sb,
                                          const void* beta, void* C, cudaDataType_t ct, int ldc, long long sc,
                                          int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  return gemm_ex("cublasGemmStridedBatchedEx", h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct,
                 ldc, sc, batch, compute, algo);
}
