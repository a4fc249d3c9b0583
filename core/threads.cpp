#include "core/threads.h"

#include <cblas.h>
#include <omp.h>

#include "core/error.h"

namespace tcn {

void set_num_threads(int n) {
  TCN_CHECK(n >= 1, "set_num_threads: need at least one thread, got ", n);
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace tcn
