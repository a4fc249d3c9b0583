// The umbrella header: everything a program that trains models with tcn needs.
//
//   #include <tcn/tcn.h>
//
// Tensors (tcn::Tensor, tcn/core/tensor.h), the ops and their autograd
// (tcn/ops/ops.h, tcn/autograd/tape.h), the layers, models, optimizers,
// checkpoints and the profiler (tcn/nn/...), and the version
// (tcn::version(), TCN_VERSION_STRING). Each header can also be included on
// its own, always by its path under tcn/. In the source tree this file is
// tcn.h at the top; the headers are the folders core/, autograd/, ops/, nn/
// and cuda/ (CUDA kernels, internal).
#pragma once

#include "tcn/version.h"

#include "tcn/core/autocast.h"
#include "tcn/core/device.h"
#include "tcn/core/dtype.h"
#include "tcn/core/error.h"
#include "tcn/core/generator.h"
#include "tcn/core/shape.h"
#include "tcn/core/step_graph.h"
#include "tcn/core/tensor.h"
#include "tcn/core/threads.h"

#include "tcn/autograd/tape.h"
#include "tcn/cuda/devices.h"
#include "tcn/ops/ops.h"

#include "tcn/nn/checkpoint.h"
#include "tcn/nn/distributed.h"
#include "tcn/nn/layers.h"
#include "tcn/nn/models.h"
#include "tcn/nn/module.h"
#include "tcn/nn/optim.h"
#include "tcn/nn/profiler.h"
#include "tcn/nn/safetensors.h"
