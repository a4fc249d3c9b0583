// Tensor: a cheap handle (one shared_ptr) to a TensorImpl, which is a strided
// view (shape, strides, offset, dtype) into a shared Storage.
//
// Views are free: reshape, transpose, permute, narrow and expand make a new
// TensorImpl over the same Storage; contiguous() is the one copy. Writes through
// a view are seen by every tensor that shares the storage.
//
// A tensor that requires grad carries an AutogradMeta: its accumulated .grad()
// when it is a leaf, and the place of the op that produced it on the tape when
// it is not (see autograd/tape.h).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/storage.h"

namespace tcn {

struct AutogradMeta;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::F32;
  std::shared_ptr<AutogradMeta> autograd;  // null unless the tensor requires grad
};

struct TensorOptions {
  DType dtype = DType::F32;
  Device device = Device::cpu();
  TensorOptions& with(DType t) { dtype = t; return *this; }
  TensorOptions& with(Device d) { device = d; return *this; }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Strides& strides() const { return impl().strides; }
  int64_t offset() const { return impl().offset; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t numel() const { return numel_of(impl().shape); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  TensorOptions options() const { return {dtype(), device()}; }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  bool shares_storage(const Tensor& o) const { return storage() == o.storage(); }

  // Pointer to the first element (at offset), on the tensor's device.
  void* raw_data() const;
  template <class T>
  T* data() const {
    TCN_CHECK(dtype() == dtype_of<T>(), "data<", dtype_name(dtype_of<T>()), ">() called on a ",
              dtype_name(dtype()), " tensor");
    return static_cast<T*>(raw_data());
  }

  // The single value of a one-element tensor, as a double (copied from the device).
  double item() const;
  // Elements in row-major order, copied to the host and converted to T.
  template <class T>
  std::vector<T> to_vector() const;

  // ---- autograd ---------------------------------------------------------
  bool requires_grad() const { return impl().autograd != nullptr; }
  // Makes a leaf tensor a parameter-like tensor whose .grad() is accumulated.
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const;
  // The accumulated gradient of a leaf (undefined before the first backward).
  Tensor grad() const;
  // Sets the gradient to a copy of g.
  void set_grad(const Tensor& g) const;
  // Makes g itself, not a copy, the gradient: a contiguous tensor of this
  // shape that nothing else writes (how a replayed CUDA graph hands back the
  // gradients it wrote, core/step_graph.h).
  void adopt_grad(const Tensor& g) const;
  // Drops the gradient (PyTorch's zero_grad(set_to_none=True)).
  void zero_grad() const;
  // Same data, no autograd history.
  Tensor detach() const;
  // Backpropagates from this one-element tensor through the tape (autograd/tape.h).
  void backward() const;

  // ---- differentiable views and copies (defined in ops/) ---------------
  Tensor reshape(const Shape& shape) const;  // a view when the layout allows, else a copy
  Tensor view(const Shape& shape) const;     // always a view; throws when impossible
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor expand(const Shape& shape) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor contiguous() const;
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor t() const { return transpose(0, 1); }

  TensorImpl& impl() const {
    TCN_CHECK(impl_ != nullptr, "operation on an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

struct AutogradMeta {
  Tensor grad;              // leaf: accumulated gradient; non-leaf: gradient in flight during backward
  bool is_leaf = true;
  int64_t node = -1;        // index of the producing node on the tape (non-leaf only)
  uint64_t tape_epoch = 0;  // which recording of the tape that node belongs to
  // Leaf only, optional: called during backward() as soon as this leaf's
  // gradient for the sweep is complete (after the last node that feeds it),
  // e.g. to start reducing it across processes (nn/distributed.h).
  std::function<void()> on_grad_ready;
};

// ---- factories ------------------------------------------------------------
Tensor empty(const Shape& shape, TensorOptions opts = {});
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, double value, TensorOptions opts = {});
Tensor zeros_like(const Tensor& t);
Tensor empty_like(const Tensor& t);  // contiguous, same shape, dtype, device
// A tensor of T's dtype holding `values` (row-major); values.size() must match the shape.
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu());
// The same from doubles, converted to opts.dtype.
Tensor tensor(const std::vector<double>& values, const Shape& shape, TensorOptions opts = {});
Tensor scalar_tensor(double value, TensorOptions opts = {});
// A new TensorImpl over t's storage with the given geometry; no autograd history.
Tensor make_view(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset);

}  // namespace tcn
