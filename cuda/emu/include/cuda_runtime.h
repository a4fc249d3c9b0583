// TCN_CUDA=EMU: <cuda_runtime.h> is the emulated device (cuda/emu/).
#pragma once
#include "../emu.h"
