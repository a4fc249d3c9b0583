// sum / mean / max over dims. The CPU kernel computes each output element in
// its own loop over the reduced dims (parallel over outputs), accumulating in
// double so float32 sums do not drift with the reduction length; reductions of
// leading dims add whole rows instead. Either way the summation order does not
// depend on the number of threads.
#include <algorithm>
#include <functional>
#include <vector>

#include "cuda/kernels.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace tcn {

namespace {

// Splits x's dims into kept and reduced, each with shape and strides.
struct ReducePlan {
  Shape kept_shape, red_shape;
  Strides kept_strides, red_strides;
  Shape out_shape;       // with keepdim
  Shape out_shape_kd;    // keepdim=true version
  std::vector<bool> reduced;  // per dim of x
};

ReducePlan plan_reduce(const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim, const char* op) {
  std::vector<bool> red(x.dim(), dims_in.empty());
  for (int64_t d : dims_in) {
    int64_t w = wrap_dim(d, x.dim(), op);
    TCN_CHECK(!red[w] || dims_in.empty(), op, ": dim ", d, " listed twice in ", dims_in);
    red[w] = true;
  }
  ReducePlan p;
  p.reduced = red;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (red[d]) {
      p.red_shape.push_back(x.size(d));
      p.red_strides.push_back(x.stride(d));
      p.out_shape_kd.push_back(1);
      if (keepdim) p.out_shape.push_back(1);
    } else {
      p.kept_shape.push_back(x.size(d));
      p.kept_strides.push_back(x.stride(d));
      p.out_shape_kd.push_back(x.size(d));
      p.out_shape.push_back(x.size(d));
    }
  }
  return p;
}

// Element offset of linear index i over (shape, strides), row-major.
inline int64_t offset_of(int64_t i, const Shape& shape, const Strides& strides) {
  int64_t off = 0;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

// Reducing the leading dims of a tensor whose kept dims are one contiguous
// trailing block (a bias gradient: [B, T, C] -> [C]): add whole rows, which
// vectorises. Rows are cut into chunks whose boundaries do not depend on the
// thread count; each chunk's partial sums (double) are added in chunk order, so
// the result is the same on 2 or 16 threads.
template <class T>
bool sum_leading_rows_cpu(const Tensor& x, const ReducePlan& p, T* out) {
  if (!x.is_contiguous() || p.kept_shape.empty()) return false;
  const int64_t rank = x.dim(), kept = static_cast<int64_t>(p.kept_shape.size());
  for (int64_t d = 0; d < rank; ++d)  // kept dims must be exactly the last `kept` dims
    if ((d >= rank - kept) != (p.out_shape_kd[d] != 1 || x.size(d) == 1)) return false;
  const int64_t C = numel_of(p.kept_shape), R = x.numel() / std::max<int64_t>(C, 1);
  const int64_t chunk = std::max<int64_t>(64, (R + 63) / 64), nchunks = (R + chunk - 1) / chunk;
  const T* in = x.data<T>();
  std::vector<double> partial(static_cast<size_t>(nchunks * C), 0.0);
#pragma omp parallel for schedule(static) if (R * C >= (1 << 15))
  for (int64_t k = 0; k < nchunks; ++k) {
    double* acc = partial.data() + k * C;
    for (int64_t r = k * chunk; r < std::min(R, (k + 1) * chunk); ++r) {
      const T* row = in + r * C;
      for (int64_t c = 0; c < C; ++c) acc[c] += row[c];
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    double total = 0;
    for (int64_t k = 0; k < nchunks; ++k) total += partial[k * C + c];
    out[c] = static_cast<T>(total);
  }
  return true;
}

template <class T>
void sum_cpu(const Tensor& x, const ReducePlan& p, T* out) {
  if (sum_leading_rows_cpu(x, p, out)) return;
  const T* in = x.data<T>();
  const int64_t n_out = numel_of(p.kept_shape), n_red = numel_of(p.red_shape);
  const int64_t inner = p.red_shape.empty() ? 1 : p.red_shape.back();
  const int64_t inner_stride = p.red_shape.empty() ? 0 : p.red_strides.back();
  Shape outer_red(p.red_shape.begin(), p.red_shape.end() - (p.red_shape.empty() ? 0 : 1));
  Strides outer_red_st(p.red_strides.begin(), p.red_strides.end() - (p.red_strides.empty() ? 0 : 1));
  const int64_t n_outer_red = inner ? n_red / inner : 0;
  // One reduced row: float64 lanes when it is contiguous (the order of the
  // additions is fixed by the build, not by the thread count).
  auto row_sum = [&](const T* row) {
    double a = 0;
    if (inner_stride == 1) {
#pragma omp simd reduction(+ : a)
      for (int64_t i = 0; i < inner; ++i) a += static_cast<double>(row[i]);
    } else {
      for (int64_t i = 0; i < inner; ++i) a += static_cast<double>(row[i * inner_stride]);
    }
    return a;
  };
  if (n_out == 1 && n_red >= (1 << 15)) {
    // A whole tensor (a loss) into one value: the rows' sums in parallel, then
    // added up in row order, so the result does not depend on the threads.
    std::vector<double> rows(static_cast<size_t>(n_outer_red));
    const T* base = in + offset_of(0, p.kept_shape, p.kept_strides);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n_outer_red; ++r) rows[r] = row_sum(base + offset_of(r, outer_red, outer_red_st));
    double acc = 0;
    for (double v : rows) acc += v;
    out[0] = static_cast<T>(acc);
    return;
  }
#pragma omp parallel for schedule(static) if (n_out * n_red >= (1 << 15) && n_out > 1)
  for (int64_t o = 0; o < n_out; ++o) {
    const T* base = in + offset_of(o, p.kept_shape, p.kept_strides);
    double acc = 0;
    for (int64_t r = 0; r < n_outer_red; ++r) acc += row_sum(base + offset_of(r, outer_red, outer_red_st));
    out[o] = static_cast<T>(acc);
  }
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const profile::Op range("sum");
  check_defined("sum", x);
  check_float("sum", x);
  profile::add_bytes(nbytes(x));
  ReducePlan p = plan_reduce(x, dims, keepdim, "sum");
  Tensor out = empty(p.out_shape, x.options());
  if (x.device().is_cuda()) {
    TCN_CUDA_OP("sum", cuda::sum(out, x, p.reduced));
  } else {
    dispatch_float(x.dtype(), "sum", [&]<class T>() { sum_cpu<T>(x, p, out.data<T>()); });
  }
  if (autograd::needs_grad({x}))
    autograd::record("sum", {x}, {out}, [kd = p.out_shape_kd, xs = x.shape()](const TensorList& g) {
      return TensorList{g[0].reshape(kd).expand(xs)};
    });
  return out;
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const profile::Op range("mean");
  check_defined("mean", x);
  ReducePlan p = plan_reduce(x, dims, keepdim, "mean");
  int64_t count = numel_of(p.red_shape);
  TCN_CHECK(count > 0, "mean: reducing over zero elements (shape ", x.shape(), ")");
  return mul(sum(x, dims, keepdim), 1.0 / static_cast<double>(count));
}

// max's backward: each output gradient routed to the position of its maximum
// (on the host: max is not on any training path, so its GPU backward is a round trip).
static TensorList max_backward(const Tensor& indices, const ReducePlan& p, int64_t dim, const Shape& xs,
                               const TensorList& grad_outputs) {
  const Tensor& g = grad_outputs[0];
  const Device dev = g.device();
  Tensor gx = zeros(xs, g.options().with(Device::cpu()));
  Tensor gc = g.to(Device::cpu()).contiguous();
  Tensor ix_host = indices.to(Device::cpu());
  dispatch_float(gx.dtype(), "max backward", [&]<class T>() {
    T* out = gx.data<T>();
    const T* gi = gc.data<T>();
    const int64_t* ix = ix_host.data<int64_t>();
    const int64_t st = gx.stride(dim);
    Strides kept_st;
    for (int64_t d = 0; d < gx.dim(); ++d)
      if (d != dim) kept_st.push_back(gx.stride(d));
    for (int64_t o = 0; o < numel_of(p.kept_shape); ++o) out[offset_of(o, p.kept_shape, kept_st) + ix[o] * st] += gi[o];
  });
  return {gx.to(dev)};
}

std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim_in, bool keepdim) {
  const profile::Op range("max");
  check_defined("max", x);
  check_float("max", x);
  TCN_CHECK(x.dim() > 0, "max: needs a tensor with at least one dim");
  int64_t dim = wrap_dim(dim_in, x.dim(), "max");
  TCN_CHECK(x.size(dim) > 0, "max: dim ", dim, " of shape ", x.shape(), " is empty");
  ReducePlan p = plan_reduce(x, {dim}, keepdim, "max");
  Tensor values = empty(p.out_shape, x.options());
  Tensor indices = empty(p.out_shape, {DType::I64, x.device()});
  const int64_t n = x.size(dim), st = x.stride(dim);
  if (x.device().is_cuda()) TCN_CUDA_OP("max", cuda::max_along(values, indices, x.detach(), dim));
  else dispatch_float(x.dtype(), "max", [&]<class T>() {
    const T* in = x.data<T>();
    T* v = values.data<T>();
    int64_t* ix = indices.data<int64_t>();
    const int64_t n_out = numel_of(p.kept_shape);
#pragma omp parallel for schedule(static) if (n_out * n >= (1 << 15))
    for (int64_t o = 0; o < n_out; ++o) {
      const T* base = in + offset_of(o, p.kept_shape, p.kept_strides);
      int64_t best = 0;
      for (int64_t i = 1; i < n; ++i)
        if (base[i * st] > base[best * st]) best = i;
      v[o] = base[best * st];
      ix[o] = best;
    }
  });
  if (autograd::needs_grad({x}))
    autograd::record("max", {x}, {values}, std::bind_front(max_backward, indices, p, dim, x.shape()));
  return {values, indices};
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  TCN_CHECK(x.dim() >= static_cast<int64_t>(shape.size()), "sum_to: cannot reduce shape ", x.shape(),
            " to the larger rank shape ", shape);
  int64_t lead = x.dim() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < lead) {
      dims.push_back(d);
    } else if (shape[d - lead] == 1 && x.size(d) != 1) {
      dims.push_back(d);
    } else {
      TCN_CHECK(shape[d - lead] == x.size(d), "sum_to: shape ", x.shape(), " does not broadcast to ", shape);
    }
  }
  if (dims.empty()) return x.reshape(shape);
  return sum(x, dims, true).reshape(shape);
}

}  // namespace tcn
