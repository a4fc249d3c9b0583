// TCN_CUDA=EMU: <cublas_v2.h> is the emulated device's cuBLAS (cuda/emu/cublas_api.h).
#pragma once
#include "tcn/cuda/emu/cublas_api.h"
