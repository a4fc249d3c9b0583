#include "nn/module.h"

#include <cmath>
#include <algorithm>

namespace tcn::nn {

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  TCN_CHECK(t.defined(), "register_parameter: '", name, "' is undefined");
  for (const auto& [n, p] : params_) TCN_CHECK(n != name, "register_parameter: '", name, "' registered twice");
  t.requires_grad_(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  TCN_CHECK(t.defined(), "register_buffer: '", name, "' is undefined");
  for (const auto& [n, b] : buffers_) TCN_CHECK(n != name, "register_buffer: '", name, "' registered twice");
  for (const auto& [n, p] : params_) TCN_CHECK(n != name, "register_buffer: '", name, "' is already a parameter");
  TCN_CHECK(!t.requires_grad(), "register_buffer: '", name, "' requires grad: make it a parameter");
  buffers_.emplace_back(name, t);
  return t;
}

void Module::register_shared_parameter(const std::string& name, const Tensor& t) {
  TCN_CHECK(t.defined() && t.requires_grad() && t.is_leaf(), "register_shared_parameter: '", name,
            "' must be an existing parameter");
  params_.emplace_back(name, t);
}

void Module::collect(const std::string& prefix, NamedTensors& out, std::vector<const TensorImpl*>& seen,
                     bool buffers) const {
  for (const auto& [name, t] : buffers ? buffers_ : params_) {
    const TensorImpl* id = t.impl_ptr().get();
    if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
    seen.push_back(id);
    out.emplace_back(prefix + name, t);
  }
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out, seen, buffers);
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out{{"", this}};
  for (const auto& [name, child] : children_)
    for (auto& [path, m] : child->named_modules()) out.emplace_back(path.empty() ? name : name + "." + path, m);
  return out;
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  std::vector<const TensorImpl*> seen;
  collect("", out, seen, false);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  std::vector<const TensorImpl*> seen;
  collect("", out, seen, true);
  return out;
}

NamedTensors Module::named_state() const {
  NamedTensors out = named_parameters(), buffers = named_buffers();
  out.insert(out.end(), buffers.begin(), buffers.end());
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  on_train(on);
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() const {
  for (auto& [name, t] : named_parameters()) t.zero_grad();
}

void Module::repoint(const std::function<Tensor(const Tensor&)>& convert) {
  autograd::NoGrad ng;
  for (auto& [name, t] : named_state()) {
    Tensor moved = convert(t.detach());
    if (moved.shares_storage(t)) continue;
    // Repoint the shared TensorImpl, so every holder of this parameter sees the new storage.
    TensorImpl& impl = t.impl();
    impl.storage = moved.storage();
    impl.strides = moved.strides();
    impl.offset = moved.offset();
    impl.dtype = moved.dtype();
    t.zero_grad();
  }
}

void Module::to(Device device) {
  repoint([device](const Tensor& t) { return t.to(device); });
}

void Module::to(DType dtype) {
  TCN_CHECK(is_floating(dtype), "Module::to: parameters must stay floating point, got ", dtype);
  // An integer buffer (a counter) keeps its dtype: returned as is, it is left alone.
  repoint([dtype](const Tensor& t) { return is_floating(t.dtype()) ? t.to(dtype) : t; });
}

void check_finite_state(const Module& m, const std::string& where) {
  for (const auto& [name, t] : m.named_state()) {
    if (!is_floating(t.dtype())) continue;
    const std::vector<double> v = t.detach().to(Device::cpu()).to(DType::F64).contiguous().to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i)
      TCN_CHECK(std::isfinite(v[i]), where, ": tensor '", name, "' holds a non-finite value (", v[i], " at element ",
                i, " of ", t.shape(), "): the model is broken, refusing to use it");
  }
}

}  // namespace tcn::nn
