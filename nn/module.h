// Module: a named tree of parameters and sub-modules, with PyTorch's dotted
// names ("tcn.network.0.conv1.weight_v"), train/eval mode and zero_grad.
//
// A layer registers its parameters and children in its constructor:
//
//   struct Linear : Module {
//     Tensor weight, bias;
//     Linear(int64_t in, int64_t out) {
//       weight = register_parameter("weight", empty({out, in}));
//       bias = register_parameter("bias", zeros({out}));
//     }
//   };
//
// A buffer is state that is not trained but belongs to the model, saved and
// moved with it (a batch norm's running statistics): register_buffer, listed
// by named_buffers() and, after the parameters, by named_state().
//
// A parameter is a leaf tensor that requires grad. Tensors are handles, so a
// parameter shared by two modules (a tied weight) is the same tensor in both;
// named_parameters() lists it once, under the first name met.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/profile.h"
#include "ops/ops.h"

namespace tcn::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // This module and every sub-module, depth first, with dotted paths ("" for
  // this one, then "tcn", "tcn.network", "tcn.network.0", ...).
  std::vector<std::pair<std::string, const Module*>> named_modules() const;
  // Every parameter once, in registration order (depth first), with dotted names.
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;
  // Every buffer, depth first, with dotted names; and what a checkpoint holds:
  // the parameters, then the buffers (PyTorch's state_dict names).
  NamedTensors named_buffers() const;
  NamedTensors named_state() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad() const;
  // Moves every parameter and buffer to `device`, or converts every parameter and
  // floating-point buffer to `dtype`, in place: the same handles (tied ones
  // included) now refer to the new storage. Grads are dropped.
  void to(Device device);
  void to(DType dtype);

 protected:
  // Opened first thing in every forward, so that a profiler (nn/profiler.h)
  // charges the ops inside, and their backward, to this module:
  //   Tensor forward(const Tensor& x) const { const auto scope = profile_scope(); ... }
  profile::ModuleScope profile_scope() const { return profile::ModuleScope(this, typeid(*this)); }
  Tensor register_parameter(const std::string& name, Tensor t);
  Tensor register_buffer(const std::string& name, Tensor t);
  // Registers a parameter owned by another module (weight tying); not re-initialised, listed once.
  void register_shared_parameter(const std::string& name, const Tensor& t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }
  virtual void on_train(bool /*on*/) {}

 private:
  void repoint(const std::function<Tensor(const Tensor&)>& convert);
  void collect(const std::string& prefix, NamedTensors& out, std::vector<const TensorImpl*>& seen,
               bool buffers) const;
  std::vector<std::pair<std::string, Tensor>> params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// Fails, naming the tensor, the first element and its value, when a parameter or a
// floating-point buffer of `m` holds a NaN or an infinity. Called where a model is
// loaded to be used (charlm eval, generate, train --init): a broken file is refused
// before it can evaluate to a plausible number. `where` starts the message.
void check_finite_state(const Module& m, const std::string& where);

}  // namespace tcn::nn
