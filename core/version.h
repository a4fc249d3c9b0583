// The library's version: the one place it is written. CMakeLists.txt reads
// these three numbers for project(tcn VERSION ...), so the CMake package and
// the headers always agree.
#pragma once

#define TCN_VERSION_MAJOR 0
#define TCN_VERSION_MINOR 1
#define TCN_VERSION_PATCH 0
#define TCN_VERSION_STRING "0.1.0"

namespace tcn {
// The version of the library linked in (TCN_VERSION_STRING is that of the
// headers compiled against; the two differ only if a program mixes the headers
// of one install with the library of another).
const char* version();
// How the linked library was built: "cpu", "cpu+cuda" or "cpu+cuda-emulated",
// then in parentheses what else is built in: oneDNN (the CPU GEMMs), MPI and
// NCCL (data-parallel training), cuDNN, e.g. "cpu+cuda (oneDNN, MPI, NCCL, cuDNN)".
const char* build_config();
}  // namespace tcn
