#include "core/tensor.h"

// The tensor itself: shapes, strides, views, leaves and their gradients, the
// factories. What needs an op is defined beside the op: Tensor::set_grad and
// Tensor::backward in autograd/tape.cpp, full() in ops/inplace.cpp (fill_),
// the view and copy methods in ops/view.cpp and ops/copy.cpp.

#include <cstring>


namespace tcn {

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  char* base = static_cast<char*>(storage()->data());
  return base + offset() * static_cast<int64_t>(dtype_size(dtype()));
}

double Tensor::item() const {
  TCN_CHECK(numel() == 1, "item(): tensor has ", numel(), " elements (shape ", shape(),
            "), expected exactly one");
  return to_vector<double>()[0];
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = detach().to(Device::cpu()).contiguous();
  std::vector<T> out(c.numel());
  dispatch_all(c.dtype(), [&]<class S>() {
    const S* p = static_cast<const S*>(c.raw_data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(p[i]);
  });
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;

Tensor& Tensor::requires_grad_(bool on) {
  TCN_CHECK(is_leaf(), "requires_grad_(): only leaf tensors can change requires_grad; "
            "use detach() to get a leaf from a computed tensor");
  if (on) {
    TCN_CHECK(is_floating(dtype()), "requires_grad_(): only floating-point tensors can require "
              "grad, this one is ", dtype_name(dtype()));
    if (!impl().autograd) impl().autograd = std::make_shared<AutogradMeta>();
  } else {
    impl().autograd.reset();
  }
  return *this;
}

bool Tensor::is_leaf() const { return !impl().autograd || impl().autograd->is_leaf; }

Tensor Tensor::grad() const {
  if (!impl().autograd || !impl().autograd->is_leaf) return Tensor();
  return impl().autograd->grad;
}

void Tensor::adopt_grad(const Tensor& g) const {
  TCN_CHECK(requires_grad() && is_leaf(), "adopt_grad(): tensor is not a leaf that requires grad");
  TCN_CHECK(g.shape() == shape() && g.dtype() == dtype() && g.device() == device() && g.is_contiguous(),
            "adopt_grad(): gradient ", g.dtype(), " ", g.shape(), " on ", g.device(),
            " is not a contiguous match for the tensor, ", dtype(), " ", shape(), " on ", device());
  impl().autograd->grad = g.detach();
}

void Tensor::zero_grad() const {
  if (impl().autograd) impl().autograd->grad = Tensor();
}

Tensor Tensor::detach() const { return make_view(*this, shape(), strides(), offset()); }

// ---- factories --------------------------------------------------------------

Tensor make_view(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.storage();
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = t.dtype();
  return Tensor(std::move(impl));
}

Tensor empty(const Shape& shape, TensorOptions opts) {
  for (int64_t d : shape) TCN_CHECK(d >= 0, "empty: negative dimension in shape ", shape);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(numel_of(shape) * dtype_size(opts.dtype), opts.device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = opts.dtype;
  return Tensor(std::move(impl));
}

Tensor zeros(const Shape& shape, TensorOptions opts) { return full(shape, 0.0, opts); }
Tensor ones(const Shape& shape, TensorOptions opts) { return full(shape, 1.0, opts); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.options()); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.options()); }

template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  TCN_CHECK(static_cast<int64_t>(values.size()) == numel_of(shape), "from_vector: ", values.size(),
            " values do not fill shape ", shape, " (", numel_of(shape), " elements)");
  Tensor t = empty(shape, {dtype_of<T>(), Device::cpu()});
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return device.is_cpu() ? t : t.to(device);
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&, Device);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, Device);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, Device);

Tensor tensor(const std::vector<double>& values, const Shape& shape, TensorOptions opts) {
  return from_vector(values, shape, opts.device).to(opts.dtype);
}

Tensor scalar_tensor(double value, TensorOptions opts) { return full({}, value, opts); }

}  // namespace tcn
