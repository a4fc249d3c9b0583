// Number of CPU threads used by tcn's loops (OpenMP) and by OpenBLAS.
#pragma once

namespace tcn {
void set_num_threads(int n);
int num_threads();
}  // namespace tcn
