// The CUDA device runtime as the rest of tcn sees it. Plain C++ declarations:
// the implementation is cuda/runtime.cu when built with CUDA, and
// cuda/nocuda/runtime.cpp otherwise (where every device call explains that tcn
// was built without CUDA).
//
// "No GPU" is a normal state, never a crash: device_count() is 0 and
// unavailable_reason() says why (no device, driver too old, built without CUDA).
#pragma once

#include <cstddef>
#include <string>

#include "core/allocator.h"
#include "core/caching_allocator.h"

namespace tcn::cuda {

bool built_with_cuda();
// Whether the CUDA device is the emulated one (TCN_CUDA=EMU): kernels run on
// the CPU, to check their logic; never a measure of speed, never a GPU.
bool emulated();
// Number of usable CUDA devices (respects CUDA_VISIBLE_DEVICES); 0 when none.
int device_count();
inline bool is_available() { return device_count() > 0; }
// Whether this build's CUDA kernels have passed the CPU-vs-CUDA tests on a real
// GPU (set by hand once tools/device_check.sh has run clean). Until then
// `--device auto` stays on the CPU, and an explicit `--device cuda` warns.
bool verified_on_gpu();
// Why no device is usable ("" when one is).
std::string unavailable_reason();

// The allocator for device `index`; throws tcn::Error naming the reason when the
// device is not usable.
Allocator* allocator(int index);
// The caching allocator's statistics for device `index` (zeros when unused).
MemoryStats memory_stats(int index);

// Copies between host and device memory: synchronous cudaMemcpy on the legacy
// default stream, which orders them with tcn's streams (created blocking).
void copy_host_to_device(void* dst, const void* src, size_t nbytes);
void copy_device_to_host(void* dst, const void* src, size_t nbytes);
void copy_device_to_device(void* dst, const void* src, size_t nbytes);
void synchronize();

}  // namespace tcn::cuda
