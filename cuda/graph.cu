// cuda::Graph (core/devices.h): stream capture of one device's stream into a
// CUDA graph, and its launch.
#include "cuda/context.cuh"
#include "core/devices.h"

namespace tcn::cuda {

Graph::~Graph() { reset(); }

void Graph::reset() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  exec_ = graph_ = nullptr;
  nodes_ = 0;
  kernels_ = gemms_ = 0;
}

void Graph::begin_capture(int device) {
  reset();
  device_ = device;
  // Global mode: an unsafe call from any thread (a cudaMalloc, a synchronous
  // copy) fails the capture instead of silently escaping it.
  CUDA_CHECK(cudaStreamBeginCapture(stream(device), cudaStreamCaptureModeGlobal));
  site::begin_capture();
}

std::string Graph::end_capture() {
  cudaGraph_t g = nullptr;
  cudaError_t e = cudaStreamEndCapture(stream(device_), &g);
  const auto [kernels, gemms] = site::end_capture();
  if (e != cudaSuccess) {
    std::string why = cudaGetErrorString(e);
    cudaGetLastError();  // not sticky: the device is usable
    if (g) cudaGraphDestroy(g);
    return why;
  }
  graph_ = g;
  size_t n = 0;
  CUDA_CHECK(cudaGraphGetNodes(g, nullptr, &n));
  nodes_ = n;
  cudaGraphExec_t exec = nullptr;
  e = cudaGraphInstantiate(&exec, g, 0);
  if (e != cudaSuccess) {
    std::string why = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(e);
    cudaGetLastError();
    reset();
    return why;
  }
  exec_ = exec;
  kernels_ = kernels;
  gemms_ = gemms;
  return "";
}

void Graph::launch() {
  TCN_CHECK(exec_, "cuda::Graph::launch: no graph captured");
  CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), stream(device_)));
  site::graph_launch(kernels_, gemms_);
}

}  // namespace tcn::cuda
