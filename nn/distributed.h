// Data-parallel training across processes: MPI between CPU processes, NCCL
// between GPUs (one per process), as PyTorch's DistributedDataParallel does.
//
//   mpirun -np 4 build/charlm train ...      (or srun)
//
// Every process (a rank) holds the whole model and trains on its share of the
// global batch. After backward() the gradients are averaged over the ranks,
// so every rank applies the same update and the parameters stay identical;
// with equal shares the average is the gradient of the whole batch's loss.
//
// GradReducer does the averaging the way DDP does: the parameters are grouped
// into buckets of about 2 MiB (in reverse order, the order backward produces
// their gradients); a hook on each parameter (autograd::set_grad_ready_hook)
// notices when its gradient is complete, and when a bucket's last gradient is,
// the bucket is packed into one flat buffer and its all-reduce is started
// (MPI_Iallreduce on the CPU, ncclAllReduce on the device's stream) while
// backward goes on. finish() waits for the rest and writes the averages back.
// Buckets start in the same order on every rank, as collectives must.
//
// Built without MPI, or started without a launcher, a program is rank 0 of 1
// and nothing here communicates. docs/scaling.md has the numbers and the plan
// past one machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tcn::dist {

// True when this build can run across processes (found MPI at configure time).
bool built_with_mpi();
// True when this build can all-reduce CUDA tensors (NCCL, real CUDA builds).
bool built_with_nccl();

// The processes of this run. The first call initialises MPI when the program
// was started by an MPI launcher (mpirun, mpiexec or srun: recognised by the
// environment they set) and registers MPI_Finalize at exit.
class Comm {
 public:
  static Comm& world();
  // The world if a first call to world() made it, else null (for error paths,
  // which must not start MPI).
  static Comm* existing();

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The rank among the processes on this machine: which GPU to take.
  int local_rank() const { return local_rank_; }
  // Started by a launcher (size() may still be 1: `mpirun -np 1`).
  bool launched() const { return launched_; }
  // Which launcher, for messages: "mpirun", "srun" or "none".
  const std::string& launcher() const { return launcher_; }

  // Sums over all ranks, blocking. t is contiguous float32 or float64, on the
  // CPU (MPI) or a CUDA device (NCCL; also with one process, not launched, where
  // the sum is t itself); every rank passes the same shape.
  void all_reduce_sum(const Tensor& t);
  double all_reduce_sum(double v);
  // The value of rank 0 on every rank.
  double broadcast(double v);
  void barrier();
  // Ends every process of the run with `code` (after an error on this rank,
  // so that the others do not wait for it forever). Returns only when this
  // process is not part of a multi-process run.
  void abort(int code);

  // The asynchronous all-reduce GradReducer starts (implementation detail).
  struct Request;
  std::shared_ptr<Request> start_all_reduce_sum(const Tensor& t);
  void wait(Request& r);
  void progress(std::vector<std::shared_ptr<Request>>& pending);

 private:
  Comm();
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  bool launched_ = false;
  std::string launcher_ = "none";
};

// Averages the gradients of `params` over comm's ranks, bucket by bucket,
// overlapped with backward (see the top of this file). Use:
//
//   GradReducer reducer(Comm::world(), model.parameters());
//   loss.backward();        // buckets start as their gradients complete
//   reducer.finish();       // every .grad() now holds the average over the ranks
//
// The parameters must be float32 or float64, all of one dtype and on one
// device. Hooks are removed when the reducer is destroyed.
class GradReducer {
 public:
  GradReducer(Comm& comm, std::vector<Tensor> params, size_t bucket_bytes = size_t{2} << 20);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  void finish();

  // How the last finish() went: buckets in all, and how many had started
  // during backward (the rest started in finish(): their gradients came last,
  // or never came).
  struct Stats {
    int64_t buckets = 0, started_in_backward = 0;
  };
  Stats last() const { return last_; }
  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  struct Bucket {
    std::vector<size_t> params;    // indices into params_
    std::vector<int64_t> offsets;  // element offset of each in flat
    Tensor flat;
    int64_t waiting = 0;           // gradients not complete yet this step
    std::shared_ptr<Comm::Request> request;
  };
  void on_ready(size_t bucket);
  void start(size_t bucket);

  Comm& comm_;
  std::vector<Tensor> params_;
  std::vector<Bucket> buckets_;
  size_t next_ = 0;  // buckets start in index order on every rank
  std::vector<std::shared_ptr<Comm::Request>> pending_;
  Stats last_, now_;
};

}  // namespace tcn::dist
