// The tape: a tape-based reverse-mode autograd.
//
// Every differentiable op that runs while grad mode is on and that has an input
// requiring grad appends one Node to the tape, in execution order. The node keeps
// the autograd slots of its inputs and outputs and a backward closure that
// captures only what backward needs (after flashlight's autograd/Functions.cpp):
//
//   Tensor y = relu_kernel(x);
//   autograd::record("relu", {x}, {y}, [yd = y.detach()](const TensorList& g) {
//     return TensorList{relu_backward_kernel(g[0], yd)};
//   });
//
// backward(loss) seeds d loss / d loss = 1 and sweeps the tape once in reverse:
// each node turns the gradients of its outputs into gradients of its inputs,
// which are summed into the inputs' slots. Leaf tensors that require grad keep
// their sum in .grad(); other slots are released as soon as they are consumed.
// After the sweep the whole tape is freed (saved tensors included); calling
// backward again on a tensor from that tape is an error that says so.
//
// Backward closures run with grad mode off, so they can use ordinary ops, and
// with the autocast precision that was in force when the op was recorded
// (core/autocast.h), so mixed precision covers the gradient GEMMs too.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace tcn {
using TensorList = std::vector<Tensor>;
}

namespace tcn::autograd {

// Receives one gradient per output (zeros where an output got none) and returns
// one gradient per input (an undefined Tensor where an input needs none).
using BackwardFn = std::function<TensorList(const TensorList& grad_outputs)>;

// True while ops record onto the tape (the default). See NoGrad.
bool grad_enabled();

// RAII guard: ops run inside it record nothing (evaluation, optimizer updates).
class NoGrad {
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool prev_;
};

// True when grad mode is on and any of `inputs` requires grad: the op must record.
bool needs_grad(std::initializer_list<Tensor> inputs);
bool needs_grad(const TensorList& inputs);

// Appends a node; marks `outputs` as requiring grad and produced by it. Call it
// only when needs_grad(inputs) is true.
void record(const char* name, const TensorList& inputs, const TensorList& outputs, BackwardFn backward);

// Backpropagates from `root`. Without `grad`, root must have one element and is
// seeded with 1. Frees the tape.
void backward(const Tensor& root, const Tensor& grad = Tensor());

// Calls `hook` during every later backward() in which `leaf` gets a gradient,
// as soon as that gradient is complete: after the last node (in the reverse
// sweep) that has the leaf as an input. Data-parallel training uses it to
// start all-reducing a bucket of gradients while backward goes on
// (nn/distributed.h). An empty hook removes it.
void set_grad_ready_hook(const Tensor& leaf, std::function<void()> hook);

// The arithmetic the sweep sums gradients with. The ops record onto the tape,
// so they stand above it (docs/design.md, the layers); these are ops, declared
// here for the sweep and defined with the other ops (ops/copy.cpp,
// ops/inplace.cpp, ops/binary.cpp).
Tensor gradient_copy(const Tensor& g);                      // clone(g): contiguous storage of its own
void gradient_add_(const Tensor& into, const Tensor& g);   // add_(into, g), in place
Tensor gradient_sum(const Tensor& a, const Tensor& b);     // add(a, b), a new tensor

// Drops every recorded node without running backward (e.g. after a forward
// pass whose result is not differentiated).
void clear_tape();
// Number of nodes currently on the tape (for tests and diagnostics).
size_t tape_size();

}  // namespace tcn::autograd
