// Views: new shape/strides/offset over the same storage, no copy. Each is
// differentiable; its backward undoes the geometry change on the gradient.
#include <algorithm>
#include <numeric>
#include <optional>

#include "ops/dispatch.h"
#include "ops/ops.h"

namespace tcn {

namespace {

// Resolves one -1 in a requested shape against numel.
Shape infer_shape(const Shape& req, int64_t numel, const Shape& from, const char* op) {
  Shape s = req;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      TCN_CHECK(infer < 0, op, ": more than one -1 in shape ", req);
      infer = static_cast<int64_t>(i);
    } else {
      TCN_CHECK(s[i] >= 0, op, ": invalid size ", s[i], " in shape ", req);
      known *= s[i];
    }
  }
  if (infer >= 0) {
    TCN_CHECK(known > 0 && numel % known == 0, op, ": shape ", req, " is invalid for ", numel,
              " elements (input shape ", from, ")");
    s[infer] = numel / known;
  }
  TCN_CHECK(numel_of(s) == numel, op, ": shape ", req, " is invalid for ", numel, " elements (input shape ", from,
            ")");
  return s;
}

// Strides that present (shape, strides) as new_shape without moving data, or
// nullopt when impossible. Walks both shapes from the right, matching each run
// of old dims that is contiguous in memory with a run of new dims of the same size.
std::optional<Strides> view_strides(const Shape& shape, const Strides& strides, const Shape& new_shape) {
  if (numel_of(shape) <= 1) return contiguous_strides(new_shape);
  Strides out(new_shape.size(), 1);
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    bool chunk_ends = d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
      out[view_d] = view_numel * chunk_stride;
      view_numel *= new_shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_stride = strides[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// Makes a view of x with the given geometry and records `backward` for it.
template <class Backward>
Tensor make_differentiable_view(const char* op, const Tensor& x, const Shape& shape, const Strides& strides,
                                int64_t offset, Backward backward) {
  Tensor out = make_view(x, shape, strides, offset);
  if (autograd::needs_grad({x}))
    autograd::record(op, {x}, {out}, [backward](const TensorList& g) { return TensorList{backward(g[0])}; });
  return out;
}

}  // namespace

Tensor view(const Tensor& x, const Shape& shape_req) {
  check_defined("view", x);
  Shape shape = infer_shape(shape_req, x.numel(), x.shape(), "view");
  auto st = view_strides(x.shape(), x.strides(), shape);
  TCN_CHECK(st.has_value(), "view: shape ", shape_req, " is incompatible with the layout of the input (shape ",
            x.shape(), ", strides ", x.strides(), "); use reshape(), which copies");
  return make_differentiable_view("view", x, shape, *st, x.offset(),
                                  [xs = x.shape()](const Tensor& g) { return g.reshape(xs); });
}

Tensor reshape(const Tensor& x, const Shape& shape_req) {
  check_defined("reshape", x);
  Shape shape = infer_shape(shape_req, x.numel(), x.shape(), "reshape");
  if (view_strides(x.shape(), x.strides(), shape)) return view(x, shape);
  return view(contiguous(x), shape);
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  check_defined("permute", x);
  TCN_CHECK(static_cast<int64_t>(dims.size()) == x.dim(), "permute: ", dims.size(), " dims given for a tensor of rank ",
            x.dim(), " (shape ", x.shape(), ")");
  std::vector<int64_t> perm(dims.size()), inverse(dims.size());
  std::vector<bool> seen(dims.size(), false);
  Shape shape(dims.size());
  Strides strides(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], x.dim(), "permute");
    TCN_CHECK(!seen[d], "permute: dim ", d, " repeated in ", dims);
    seen[d] = true;
    perm[i] = d;
    inverse[d] = static_cast<int64_t>(i);
    shape[i] = x.size(d);
    strides[i] = x.stride(d);
  }
  return make_differentiable_view("permute", x, shape, strides, x.offset(),
                                  [inverse](const Tensor& g) { return g.permute(inverse); });
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  check_defined("transpose", x);
  std::vector<int64_t> dims(x.dim());
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[wrap_dim(d0, x.dim(), "transpose")], dims[wrap_dim(d1, x.dim(), "transpose")]);
  return permute(x, dims);
}

Tensor narrow(const Tensor& x, int64_t dim_in, int64_t start, int64_t length) {
  check_defined("narrow", x);
  TCN_CHECK(x.dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  int64_t dim = wrap_dim(dim_in, x.dim(), "narrow");
  TCN_CHECK(start >= 0 && length >= 0 && start + length <= x.size(dim), "narrow: range [", start, ", ",
            start + length, ") is out of bounds for dim ", dim, " of shape ", x.shape());
  Shape shape = x.shape();
  shape[dim] = length;
  int64_t size = x.size(dim);
  return make_differentiable_view("narrow", x, shape, x.strides(), x.offset() + start * x.stride(dim),
                                  [dim, start, length, size](const Tensor& g) {
                                    return pad(g, dim, start, size - start - length);
                                  });
}

Tensor expand(const Tensor& x, const Shape& shape_req) {
  check_defined("expand", x);
  TCN_CHECK(shape_req.size() >= x.shape().size(), "expand: cannot expand shape ", x.shape(), " to the lower rank ",
            shape_req);
  size_t lead = shape_req.size() - x.shape().size();
  Shape shape = shape_req;
  Strides strides(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      TCN_CHECK(shape[i] >= 0, "expand: invalid size ", shape[i], " in ", shape_req);
      continue;
    }
    int64_t have = x.size(static_cast<int64_t>(i - lead));
    if (shape[i] == -1) shape[i] = have;
    TCN_CHECK(have == shape[i] || have == 1, "expand: shape ", x.shape(), " cannot be expanded to ", shape_req,
              " (dim ", i, ": ", have, " vs ", shape[i], ")");
    strides[i] = have == shape[i] ? x.stride(static_cast<int64_t>(i - lead)) : 0;
  }
  if (shape == x.shape()) return x;
  return make_differentiable_view("expand", x, shape, strides, x.offset(),
                                  [xs = x.shape()](const Tensor& g) { return sum_to(g, xs); });
}

Tensor unsqueeze(const Tensor& x, int64_t dim_in) {
  check_defined("unsqueeze", x);
  int64_t dim = wrap_dim(dim_in, x.dim() + 1, "unsqueeze");
  Shape shape = x.shape();
  Strides strides = x.strides();
  int64_t st = dim < x.dim() ? x.stride(dim) * x.size(dim) : 1;
  shape.insert(shape.begin() + dim, 1);
  strides.insert(strides.begin() + dim, st);
  return make_differentiable_view("unsqueeze", x, shape, strides, x.offset(),
                                  [dim](const Tensor& g) { return g.squeeze(dim); });
}

Tensor squeeze(const Tensor& x, int64_t dim_in) {
  check_defined("squeeze", x);
  int64_t dim = wrap_dim(dim_in, x.dim(), "squeeze");
  TCN_CHECK(x.size(dim) == 1, "squeeze: dim ", dim, " of shape ", x.shape(), " has size ", x.size(dim),
            ", not 1");
  Shape shape = x.shape();
  Strides strides = x.strides();
  shape.erase(shape.begin() + dim);
  strides.erase(strides.begin() + dim);
  return make_differentiable_view("squeeze", x, shape, strides, x.offset(),
                                  [dim](const Tensor& g) { return g.unsqueeze(dim); });
}

TensorList unbind(const Tensor& x, int64_t dim_in) {
  check_defined("unbind", x);
  int64_t dim = wrap_dim(dim_in, x.dim(), "unbind");
  Shape shape = x.shape();
  Strides strides = x.strides();
  shape.erase(shape.begin() + dim);
  strides.erase(strides.begin() + dim);
  TensorList out;
  for (int64_t i = 0; i < x.size(dim); ++i) out.push_back(make_view(x, shape, strides, x.offset() + i * x.stride(dim)));
  if (autograd::needs_grad({x}) && !out.empty())
    autograd::record("unbind", {x}, out, [dim](const TensorList& g) { return TensorList{stack(g, dim)}; });
  return out;
}

// ---- Tensor methods -------------------------------------------------------------
Tensor Tensor::reshape(const Shape& s) const { return tcn::reshape(*this, s); }
Tensor Tensor::view(const Shape& s) const { return tcn::view(*this, s); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return tcn::transpose(*this, d0, d1); }
Tensor Tensor::permute(const std::vector<int64_t>& dims) const { return tcn::permute(*this, dims); }
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const { return tcn::narrow(*this, dim, start, length); }
Tensor Tensor::expand(const Shape& s) const { return tcn::expand(*this, s); }
Tensor Tensor::unsqueeze(int64_t dim) const { return tcn::unsqueeze(*this, dim); }
Tensor Tensor::squeeze(int64_t dim) const { return tcn::squeeze(*this, dim); }
Tensor Tensor::contiguous() const { return tcn::contiguous(*this); }
Tensor Tensor::to(Device device) const { return tcn::to_device(*this, device); }
Tensor Tensor::to(DType dtype) const { return tcn::to_dtype(*this, dtype); }

}  // namespace tcn
