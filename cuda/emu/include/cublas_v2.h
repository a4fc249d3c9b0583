// TCN_CUDA=EMU: <cublas_v2.h> is the emulated device's cuBLAS (cuda/emu/cublas_api.h).
#pragma once
#include "../cublas_api.h"
