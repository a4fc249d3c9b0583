// The umbrella header: everything a program that trains models with tcn needs.
//
//   #include <tcn/tcn.h>
//
// Tensors (tcn::Tensor, core/tensor.h), the ops and their autograd
// (ops/ops.h, autograd/tape.h), the layers, models, optimizers, checkpoints,
// the profiler and the training step (nn/...), and the version
// (core/version.h: tcn::version(), TCN_VERSION_STRING). Each header can also
// be included on its own. Inside this repository a header is included by its
// path from the repository root ("nn/layers.h"); a program built on the
// library includes it under the prefix tcn/ (<tcn/nn/layers.h>), as the build
// stages and installs it (CMakeLists.txt, "the headers"). cuda/ holds the
// CUDA kernels (internal).
#pragma once

#include "core/version.h"

#include "core/autocast.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/shape.h"
#include "core/step_graph.h"
#include "core/tensor.h"
#include "core/threads.h"

#include "autograd/tape.h"
#include "core/devices.h"
#include "ops/ops.h"

#include "nn/checkpoint.h"
#include "nn/distributed.h"
#include "nn/layers.h"
#include "nn/models.h"
#include "nn/module.h"
#include "nn/optim.h"
#include "nn/profiler.h"
#include "nn/safetensors.h"
#include "nn/trainer.h"
