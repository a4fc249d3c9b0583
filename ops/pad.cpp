// pad: constant padding along one dim (the causal left padding of a conv).
#include "cuda/kernels.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace tcn {

Tensor pad(const Tensor& x, int64_t dim_in, int64_t left, int64_t right, double value) {
  const profile::Op range("pad");
  check_defined("pad", x);
  int64_t dim = wrap_dim(dim_in, x.dim(), "pad");
  TCN_CHECK(left >= 0 && right >= 0, "pad: negative padding (", left, ", ", right, ") on shape ", x.shape());
  Shape out_shape = x.shape();
  out_shape[dim] += left + right;
  Tensor out;
  if (x.device().is_cuda() && value == 0.0 && (x.dtype() == DType::F32 || x.dtype() == DType::F64) &&
      (x.is_contiguous() || (x.dim() == 3 && dim == 1))) {
    // One kernel for the zeros and the copy (as conv1d's padding): x seen as
    // [outer, n, inner] rows, placed at rows [left, left + n). This is also
    // narrow's backward, three per TCN block.
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
    for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
    out = empty(out_shape, x.options());
    const Tensor x3 = x.is_contiguous() ? x.detach().view({outer, x.size(dim), inner}) : x.detach();
    TCN_CUDA_OP("pad", cuda::pad_rows(out.view({outer, out_shape[dim], inner}), x3, left));
    profile::add_bytes(nbytes(x) + nbytes(out));  // the fallback's fill and copy count their own
  } else {
    out = full(out_shape, value, x.options());
    copy_(out.detach().narrow(dim, left, x.size(dim)), x.detach());
  }
  if (autograd::needs_grad({x}))
    autograd::record("pad", {x}, {out}, [dim, left, n = x.size(dim)](const TensorList& g) {
      return TensorList{g[0].narrow(dim, left, n)};
    });
  return out;
}

}  // namespace tcn
