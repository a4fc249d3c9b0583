// pad: constant padding along one dim (the causal left padding of a conv).
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace tcn {

Tensor pad(const Tensor& x, int64_t dim_in, int64_t left, int64_t right, double value) {
  const profile::Op range("pad");
  profile::add_bytes(2 * nbytes(x));
  check_defined("pad", x);
  int64_t dim = wrap_dim(dim_in, x.dim(), "pad");
  TCN_CHECK(left >= 0 && right >= 0, "pad: negative padding (", left, ", ", right, ") on shape ", x.shape());
  Shape out_shape = x.shape();
  out_shape[dim] += left + right;
  Tensor out = full(out_shape, value, x.options());
  copy_(out.detach().narrow(dim, left, x.size(dim)), x.detach());
  if (autograd::needs_grad({x}))
    autograd::record("pad", {x}, {out}, [dim, left, n = x.size(dim)](const TensorList& g) {
      return TensorList{g[0].narrow(dim, left, n)};
    });
  return out;
}

}  // namespace tcn
