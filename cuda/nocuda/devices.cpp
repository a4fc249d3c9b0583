// The CUDA runtime of a build without CUDA (TCN_CUDA=OFF, or no nvcc found):
// no devices, and every device call says why.
#include "core/devices.h"
#include "cuda/cudnn.h"

#include "core/error.h"

namespace tcn::cuda {

namespace {
constexpr const char* kWhy = "tcn was built without CUDA (TCN_CUDA=OFF or nvcc not found)";
[[noreturn]] void fail() { TCN_FAIL("CUDA requested but ", kWhy); }
}  // namespace

bool built_with_cuda() { return false; }
bool emulated() { return false; }
bool verified_on_gpu() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return kWhy; }
std::string cudnn_unavailable_reason() { return kWhy; }
int64_t cudnn_version() { return 0; }
Allocator* allocator(int index) { TCN_FAIL("cuda:", index, " requested but ", kWhy); }
MemoryStats memory_stats(int) { return {}; }
CachingAllocator* caching_allocator(int index) { TCN_FAIL("cuda:", index, " requested but ", kWhy); }
Graph::~Graph() = default;
void Graph::begin_capture(int) { fail(); }
std::string Graph::end_capture() { fail(); }
void Graph::launch() { fail(); }
void Graph::reset() {}
EventTimer::EventTimer(int) { fail(); }
EventTimer::~EventTimer() = default;
int32_t EventTimer::mark() { fail(); }
void EventTimer::collect() {}
void nvtx_push(const char*) {}
void nvtx_pop() {}
void copy_host_to_device(void*, const void*, size_t) { fail(); }
void copy_device_to_host(void*, const void*, size_t) { fail(); }
void copy_device_to_device(void*, const void*, size_t) { fail(); }
void synchronize() {}
void raise_device_errors() {}
bool counters_available() { return false; }
DeviceCounters counters() { return {}; }
DeviceCounters call_site_counters() { return {}; }

}  // namespace tcn::cuda
