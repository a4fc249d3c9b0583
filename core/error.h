// Errors: every user mistake becomes a tcn::Error with a message that names the
// op and the offending shapes, dtypes or devices. Never an abort.
//
//   TCN_CHECK(x.dim() == 3, "conv1d: input must be [B, T, C], got ", x.shape());
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tcn {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <class T>
void put(std::ostream& os, const T& v) {
  os << v;
}
// Vectors (shapes, strides, lists of dims) print as [2, 3, 4].
template <class T>
void put(std::ostream& os, const std::vector<T>& v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) os << ", ";
    put(os, v[i]);
  }
  os << ']';
}
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (put(os, args), ...);
  return os.str();
}
}  // namespace detail

}  // namespace tcn

#define TCN_CHECK(cond, ...)                                   \
  do {                                                         \
    if (!(cond)) throw ::tcn::Error(::tcn::detail::concat(__VA_ARGS__)); \
  } while (0)

#define TCN_FAIL(...) throw ::tcn::Error(::tcn::detail::concat(__VA_ARGS__))
