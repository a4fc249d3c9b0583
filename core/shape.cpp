#include "core/shape.h"

#include <algorithm>

#include "core/device.h"

namespace tcn {

int64_t wrap_dim(int64_t dim, int64_t rank, const char* op) {
  TCN_CHECK(rank > 0, op, ": a 0-dim tensor has no dim ", dim);
  TCN_CHECK(dim >= -rank && dim < rank, op, ": dim ", dim, " is out of range for a tensor of rank ", rank);
  return dim < 0 ? dim + rank : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TCN_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
              " cannot be broadcast together (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda") return Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    std::string idx = s.substr(5);
    if (!idx.empty() && std::all_of(idx.begin(), idx.end(), ::isdigit)) return Device::cuda(std::stoi(idx));
  }
  TCN_FAIL("unknown device '", s, "': expected cpu, cuda or cuda:N");
}

}  // namespace tcn
