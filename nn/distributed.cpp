// Data parallelism: the processes (MPI), their all-reduce (MPI on host
// memory, NCCL on device memory) and the bucketed gradient reducer. See
// nn/distributed.h.
#include "nn/distributed.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "autograd/tape.h"
#include "ops/ops.h"

#if TCN_WITH_MPI
#include <mpi.h>
#endif
#if TCN_WITH_NCCL
#include <dlfcn.h>
#include <nccl.h>

#include "cuda/context.cuh"
#endif

namespace tcn::dist {

bool built_with_mpi() { return TCN_WITH_MPI != 0; }
bool built_with_nccl() { return TCN_WITH_NCCL != 0; }

namespace {

// The number of processes a launcher says it started, and its name; 0 when
// none did. Open MPI (mpirun), MPICH/Hydra and PMI-2/PMIx (mpiexec, srun).
int launched_size(std::string& launcher) {
  auto env_int = [](const char* name) {
    const char* v = std::getenv(name);
    return v && *v ? std::atoi(v) : 0;
  };
  if (int n = env_int("OMPI_COMM_WORLD_SIZE")) return launcher = "mpirun", n;
  if (int n = env_int("PMI_SIZE")) return launcher = "mpiexec", n;
  if (int n = env_int("PMIX_SIZE")) return launcher = "mpiexec", n;
  if (std::getenv("PMIX_RANK") != nullptr) return launcher = "mpiexec", 1;  // PMIx without a size variable
  if (int n = env_int("SLURM_NTASKS"); n > 0 && std::getenv("SLURM_PROCID")) return launcher = "srun", n;
  return 0;
}

#if TCN_WITH_MPI
MPI_Datatype mpi_type(DType d) {
  if (d == DType::F32) return MPI_FLOAT;
  if (d == DType::F64) return MPI_DOUBLE;
  TCN_FAIL("all_reduce: float32 or float64 tensors only, got ", d);
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}
#endif

#if TCN_WITH_NCCL
// NCCL is compiled against (nccl.h: the types and signatures) and loaded at its
// first use, not at program start: libnccl.so.2 is large (200+ MB) and only a
// multi-GPU run needs it, so every other program (and the device bundle) runs
// without it. A missing library is an error naming it when a run needs it.
struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id;
  decltype(&ncclCommInitRank) comm_init_rank;
  decltype(&ncclAllReduce) all_reduce;
  decltype(&ncclGetErrorString) error_string;
};

const NcclApi& nccl() {
  static const NcclApi api = [] {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    TCN_CHECK(lib != nullptr, "NCCL: cannot load libnccl.so.2 (", dlerror(),
              "); install NCCL or put its folder on LD_LIBRARY_PATH");
    auto sym = [lib](const char* name) {
      void* f = dlsym(lib, name);
      TCN_CHECK(f != nullptr, "NCCL: libnccl.so.2 has no ", name);
      return f;
    };
    return NcclApi{reinterpret_cast<decltype(&ncclGetUniqueId)>(sym("ncclGetUniqueId")),
                   reinterpret_cast<decltype(&ncclCommInitRank)>(sym("ncclCommInitRank")),
                   reinterpret_cast<decltype(&ncclAllReduce)>(sym("ncclAllReduce")),
                   reinterpret_cast<decltype(&ncclGetErrorString)>(sym("ncclGetErrorString"))};
  }();
  return api;
}

#define NCCL_CHECK(call)                                                                                 \
  do {                                                                                                   \
    const ncclResult_t r_ = (call);                                                                      \
    TCN_CHECK(r_ == ncclSuccess, #call, " failed: ", nccl().error_string(r_), " (", __FILE__, ":", __LINE__, \
              ")");                                                                                      \
  } while (0)

// One NCCL communicator per process (one GPU per rank), made on first use:
// rank 0's unique id reaches the others through MPI.
ncclComm_t nccl_comm(const Comm& comm, int device) {
  static ncclComm_t c = nullptr;
  static int c_device = -1;
  if (c) {
    TCN_CHECK(device == c_device, "NCCL: this process all-reduces on cuda:", c_device, ", not cuda:", device,
              " (one GPU per rank)");
    return c;
  }
  ncclUniqueId id;
  if (comm.rank() == 0) NCCL_CHECK(nccl().get_unique_id(&id));
#if TCN_WITH_MPI
  if (comm.size() > 1) MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
#endif
  CUDA_CHECK(cudaSetDevice(device));
  NCCL_CHECK(nccl().comm_init_rank(&c, comm.size(), id, comm.rank()));
  c_device = device;
  return c;
}
#endif

}  // namespace

// ---- Comm -----------------------------------------------------------------------------------------
struct Comm::Request {
#if TCN_WITH_MPI
  MPI_Request mpi = MPI_REQUEST_NULL;
#endif
  Tensor host;    // what MPI reduces: the tensor itself, or a host copy of a device tensor (no NCCL)
  Tensor device;  // the device tensor a host copy goes back to
  bool done = false;
};

Comm::Comm() {
  const int n = launched_size(launcher_);
  launched_ = n > 0;
  if (!launched_) return;
#if TCN_WITH_MPI
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  std::atexit(finalize_at_exit);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_free(&local);
#else
  TCN_CHECK(n == 1, launcher_, " started ", n, " processes, but this build of tcn has no MPI (Debian: "
            "libopenmpi-dev, then configure again): each would train alone");
#endif
}

namespace {
Comm* made = nullptr;
}

Comm& Comm::world() {
  static Comm c;
  made = &c;
  return c;
}

Comm* Comm::existing() { return made; }

std::shared_ptr<Comm::Request> Comm::start_all_reduce_sum(const Tensor& t) {
  TCN_CHECK(t.is_contiguous(), "all_reduce: the tensor must be contiguous, got strides ", t.strides());
  auto r = std::make_shared<Request>();
  // One process: the sum is the tensor itself, except that NCCL is used for
  // device tensors even then (a one-rank communicator), which is how a single
  // GPU checks the NCCL path (tests/test_distributed.cpp).
  if (!launched_ && !(TCN_WITH_NCCL && t.device().is_cuda())) {
    r->done = true;
    return r;
  }
  if (t.device().is_cuda()) {
#if TCN_WITH_NCCL
    TCN_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64, "all_reduce: float32 or float64 tensors only, got ",
              t.dtype());
    // Queued on the device's stream after the kernels that made t, before those that read it.
    NCCL_CHECK(nccl().all_reduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                             t.dtype() == DType::F32 ? ncclFloat : ncclDouble, ncclSum,
                             nccl_comm(*this, t.device().index), cuda::stream(t.device().index)));
    r->done = true;
    return r;
#else
    // No NCCL (a CPU-only or emulated-device build): through host memory.
    r->device = t;
    r->host = t.to(Device::cpu());
#endif
  } else {
    r->host = t;
  }
#if TCN_WITH_MPI
  MPI_Iallreduce(MPI_IN_PLACE, r->host.raw_data(), static_cast<int>(r->host.numel()), mpi_type(r->host.dtype()),
                 MPI_SUM, MPI_COMM_WORLD, &r->mpi);
#endif
  return r;
}

void Comm::wait(Request& r) {
  if (r.done) return;
#if TCN_WITH_MPI
  MPI_Wait(&r.mpi, MPI_STATUS_IGNORE);
#endif
  if (r.device.defined()) {
    autograd::NoGrad ng;
    copy_(r.device, r.host);
  }
  r.done = true;
}

void Comm::progress(std::vector<std::shared_ptr<Request>>& pending) {
#if TCN_WITH_MPI
  // Open MPI moves a non-blocking collective on only inside MPI calls: a test
  // now and then (at each gradient hook) lets it run alongside backward.
  for (auto& r : pending)
    if (!r->done && r->mpi != MPI_REQUEST_NULL) {
      int flag = 0;
      MPI_Test(&r->mpi, &flag, MPI_STATUS_IGNORE);
      if (flag && !r->device.defined()) r->done = true;
      if (flag) r->mpi = MPI_REQUEST_NULL;
    }
#else
  (void)pending;
#endif
}

void Comm::all_reduce_sum(const Tensor& t) {
  auto r = start_all_reduce_sum(t);
  wait(*r);
}

double Comm::all_reduce_sum(double v) {
#if TCN_WITH_MPI
  if (launched_) MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
#endif
  return v;
}

double Comm::broadcast(double v) {
#if TCN_WITH_MPI
  if (launched_) MPI_Bcast(&v, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
#endif
  return v;
}

void Comm::barrier() {
#if TCN_WITH_MPI
  if (launched_) MPI_Barrier(MPI_COMM_WORLD);
#endif
}

void Comm::abort(int code) {
#if TCN_WITH_MPI
  if (launched_ && size_ > 1) {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
  }
#endif
  (void)code;
}

// ---- GradReducer ------------------------------------------------------------------------------------
GradReducer::GradReducer(Comm& comm, std::vector<Tensor> params, size_t bucket_bytes)
    : comm_(comm), params_(std::move(params)) {
  TCN_CHECK(!params_.empty(), "GradReducer: no parameters");
  const TensorOptions opts = params_[0].options();
  TCN_CHECK(opts.dtype == DType::F32 || opts.dtype == DType::F64, "GradReducer: float32 or float64 parameters only, got ",
            opts.dtype);
  for (const Tensor& p : params_)
    TCN_CHECK(p.dtype() == opts.dtype && p.device() == opts.device, "GradReducer: parameters must share one dtype and "
              "device: ", p.dtype(), " on ", p.device(), " vs ", opts.dtype, " on ", opts.device);
  // Reverse order: the last parameters' gradients are complete first.
  const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(bucket_bytes / dtype_size(opts.dtype)));
  int64_t filled = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    if (buckets_.empty() || filled >= cap) {
      buckets_.emplace_back();
      filled = 0;
    }
    Bucket& b = buckets_.back();
    b.params.push_back(k);
    b.offsets.push_back(filled);
    filled += params_[k].numel();
  }
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    Bucket& b = buckets_[bi];
    b.flat = empty({b.offsets.back() + params_[b.params.back()].numel()}, opts);
    b.waiting = static_cast<int64_t>(b.params.size());
    for (size_t k : b.params) autograd::set_grad_ready_hook(params_[k], [this, bi] { on_ready(bi); });
  }
}

GradReducer::~GradReducer() {
  for (const Tensor& p : params_) autograd::set_grad_ready_hook(p, nullptr);
}

void GradReducer::on_ready(size_t bucket) {
  if (--buckets_[bucket].waiting == 0)
    while (next_ < buckets_.size() && buckets_[next_].waiting == 0) {
      start(next_++);
      ++now_.started_in_backward;
    }
  comm_.progress(pending_);
}

void GradReducer::start(size_t bucket) {
  Bucket& b = buckets_[bucket];
  autograd::NoGrad ng;
  for (size_t i = 0; i < b.params.size(); ++i) {
    const Tensor& p = params_[b.params[i]];
    Tensor slot = b.flat.narrow(0, b.offsets[i], p.numel()).view(p.shape());
    // A parameter without a gradient this step (unused) adds zeros, on every rank alike.
    if (p.grad().defined()) {
      copy_(slot, p.grad());
    } else {
      zero_(slot);
    }
  }
  b.request = comm_.start_all_reduce_sum(b.flat);
  pending_.push_back(b.request);
}

void GradReducer::finish() {
  while (next_ < buckets_.size()) start(next_++);  // gradients that never came, or came last
  const double scale = 1.0 / comm_.size();
  autograd::NoGrad ng;
  for (Bucket& b : buckets_) {
    comm_.wait(*b.request);
    if (comm_.size() > 1) mul_(b.flat, scale);
    for (size_t i = 0; i < b.params.size(); ++i) {
      const Tensor& p = params_[b.params[i]];
      if (!p.grad().defined()) continue;  // unused on every rank: stays without a gradient
      copy_(p.grad(), b.flat.narrow(0, b.offsets[i], p.numel()).view(p.shape()));
    }
    b.request.reset();
    b.waiting = static_cast<int64_t>(b.params.size());
  }
  pending_.clear();
  next_ = 0;
  now_.buckets = static_cast<int64_t>(buckets_.size());
  last_ = now_;
  now_ = Stats{};
}

}  // namespace tcn::dist
