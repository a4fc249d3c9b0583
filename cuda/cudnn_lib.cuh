// What the cuDNN paths share (cuda/cudnn.cu, conv1d_cudnn.cu, lstm_cudnn.cu):
// the table of cuDNN functions, filled from libcudnn.so.9 at first use, the
// error check, one handle per device bound to tcn's stream, and scratch memory
// from tcn's allocator. Private to cuda/; built only with TCN_WITH_CUDNN=1.
#pragma once

#if TCN_WITH_CUDNN
#include <cudnn.h>

#include <cstddef>
#include <sstream>
#include <string>

#include "core/tensor.h"

namespace tcn::cuda::cudnn_lib {

// ---- the library ---------------------------------------------------------------------------------
// Every cuDNN function tcn calls, looked up by name in libcudnn.so.9 (which
// forwards to cuDNN's sub-libraries). The signatures come from cudnn.h.
#define TCN_CUDNN_FUNCTIONS(X)                                                                                 \
  X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnCreate) X(cudnnSetStream)                                    \
  X(cudnnCreateTensorDescriptor) X(cudnnDestroyTensorDescriptor) X(cudnnSetTensor4dDescriptor)                 \
  X(cudnnSetTensorNdDescriptor) X(cudnnGetTensorNdDescriptor) X(cudnnCreateFilterDescriptor)                   \
  X(cudnnSetFilter4dDescriptor) X(cudnnCreateConvolutionDescriptor) X(cudnnSetConvolution2dDescriptor)          \
  X(cudnnSetConvolutionMathType) X(cudnnGetConvolution2dForwardOutputDim)                                       \
  X(cudnnFindConvolutionForwardAlgorithmEx) X(cudnnFindConvolutionBackwardDataAlgorithmEx)                      \
  X(cudnnFindConvolutionBackwardFilterAlgorithmEx) X(cudnnConvolutionForward) X(cudnnConvolutionBackwardData)   \
  X(cudnnConvolutionBackwardFilter) X(cudnnCreateDropoutDescriptor) X(cudnnSetDropoutDescriptor)                \
  X(cudnnCreateRNNDescriptor) X(cudnnSetRNNDescriptor_v8) X(cudnnGetRNNWeightSpaceSize)                         \
  X(cudnnGetRNNWeightParams) X(cudnnGetRNNTempSpaceSizes) X(cudnnCreateRNNDataDescriptor)                       \
  X(cudnnSetRNNDataDescriptor) X(cudnnRNNForward) X(cudnnRNNBackwardData_v8) X(cudnnRNNBackwardWeights_v8)

struct CudnnApi {
#define TCN_CUDNN_MEMBER(f) decltype(&::f) f = nullptr;
  TCN_CUDNN_FUNCTIONS(TCN_CUDNN_MEMBER)
#undef TCN_CUDNN_MEMBER
};

// The table (throws, saying why, when libcudnn.so.9 cannot be loaded).
const CudnnApi& dnn();

// A failing call throws, naming the call, cuDNN's status and `where` (the
// layer and its shapes).
#define CUDNN_CHECK(where, call)                                                                              \
  do {                                                                                                        \
    const cudnnStatus_t st_ = (call);                                                                         \
    if (st_ != CUDNN_STATUS_SUCCESS)                                                                          \
      TCN_FAIL("cuDNN error: ", dnn().cudnnGetErrorString(st_), " in ", #call, " for ", (where), " at ", __FILE__, \
               ":", __LINE__);                                                                                \
  } while (0)

// One cuDNN handle per device, bound to tcn's stream of that device.
cudnnHandle_t handle(int device);
// cuDNN's name for a tensor's dtype (float32 or bfloat16; anything else throws).
cudnnDataType_t data_type(DType d);
// A device buffer of at least `bytes` from tcn's allocator (so it is stream-ordered
// and comes from a captured step's private pool), as a float32 tensor.
Tensor scratch(size_t bytes, int device);
// Whether tcn's stream of `device` is capturing a graph.
bool capturing(int device);

template <class... A>
std::string describe(const A&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

}  // namespace tcn::cuda::cudnn_lib
#endif  // TCN_WITH_CUDNN
