// cat: joins tensors along one dim by copying each into its slice of the output.
#include <functional>
#include <vector>

#include "ops/dispatch.h"
#include "ops/ops.h"

namespace tcn {

// cat's backward: the output's gradient cut back into the inputs' pieces along `dim`.
static TensorList cat_backward(int64_t dim, const std::vector<int64_t>& sizes, const TensorList& grad_outputs) {
  TensorList grads;
  int64_t start = 0;
  for (int64_t n : sizes) {
    grads.push_back(grad_outputs[0].narrow(dim, start, n));
    start += n;
  }
  return grads;
}

Tensor cat(const TensorList& xs, int64_t dim_in) {
  const profile::Op range("cat");
  TCN_CHECK(!xs.empty(), "cat: needs at least one tensor");
  for (const Tensor& x : xs) check_defined("cat", x);
  const Tensor& first = xs[0];
  int64_t dim = wrap_dim(dim_in, first.dim(), "cat");
  Shape out_shape = first.shape();
  out_shape[dim] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    check_same_dtype("cat", first, x);
    check_same_device("cat", first, x);
    bool same = x.dim() == first.dim();
    for (int64_t d = 0; same && d < x.dim(); ++d) same = d == dim || x.size(d) == first.size(d);
    TCN_CHECK(same, "cat: tensor ", i, " has shape ", x.shape(), ", which does not match ", first.shape(),
              " outside dim ", dim);
    out_shape[dim] += x.size(dim);
  }
  Tensor out = empty(out_shape, first.options());
  std::vector<int64_t> sizes;
  int64_t at = 0;
  for (const Tensor& x : xs) {
    copy_(out.detach().narrow(dim, at, x.size(dim)), x.detach());
    sizes.push_back(x.size(dim));
    at += x.size(dim);
  }
  if (autograd::needs_grad(xs))
    autograd::record("cat", xs, {out}, std::bind_front(cat_backward, dim, sizes));
  return out;
}

Tensor stack(const TensorList& xs, int64_t dim) {
  const profile::Op range("stack");
  TCN_CHECK(!xs.empty(), "stack: needs at least one tensor");
  int64_t d = wrap_dim(dim, xs[0].dim() + 1, "stack");
  TensorList parts;
  for (const Tensor& x : xs) {
    check_defined("stack", x);
    TCN_CHECK(x.shape() == xs[0].shape(), "stack: shapes differ, ", xs[0].shape(), " vs ", x.shape());
    parts.push_back(x.unsqueeze(d));
  }
  return cat(parts, d);
}

}  // namespace tcn
