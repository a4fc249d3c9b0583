#include "core/version.h"

// TCN_BUILD_CONFIG is defined for this file alone by CMakeLists.txt, from what
// the build found (CUDA, oneDNN, MPI, NCCL, cuDNN).
#ifndef TCN_BUILD_CONFIG
#error "TCN_BUILD_CONFIG: core/version.cpp is compiled by CMakeLists.txt, which defines it"
#endif

namespace tcn {

const char* version() { return TCN_VERSION_STRING; }
const char* build_config() { return TCN_BUILD_CONFIG; }

}  // namespace tcn
