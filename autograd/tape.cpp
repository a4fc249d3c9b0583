#include "autograd/tape.h"

#include <unordered_set>

#include "core/autocast.h"
#include "core/profile.h"

namespace tcn::autograd {

namespace {

struct Slot {
  std::shared_ptr<AutogradMeta> meta;  // null: this input needs no gradient
  Shape shape;
  TensorOptions options;
};

struct Node {
  const char* name;
  std::vector<Slot> inputs;
  std::vector<Slot> outputs;
  BackwardFn backward;
  Precision precision;  // the autocast setting at record time; backward runs under it
  profile::ModuleTag module;  // where it was recorded, while a profiler records: its backward is charged there
};

struct Tape {
  std::vector<Node> nodes;
  uint64_t epoch = 1;  // bumped each time the tape is freed
  bool grad_enabled = true;
};

Tape& tape() {
  thread_local Tape t;
  return t;
}

Slot slot_of(const Tensor& t) {
  return Slot{t.impl().autograd, t.shape(), t.options()};
}

// Sums g into a slot. A leaf's .grad() must be a tensor the leaf owns alone
// (optimizers and clipping update it in place), so the first gradient stored
// there is copied unless nothing else holds it.
void accumulate(AutogradMeta& meta, Tensor g) {
  if (!meta.grad.defined()) {
    bool exclusive = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 &&
                     g.is_contiguous() && g.offset() == 0;
    meta.grad = (meta.is_leaf && !exclusive) ? gradient_copy(g) : std::move(g);
  } else if (meta.is_leaf) {
    gradient_add_(meta.grad, g);
  } else {
    meta.grad = gradient_sum(meta.grad, g);
  }
}

}  // namespace

bool grad_enabled() { return tape().grad_enabled; }

NoGrad::NoGrad() : prev_(tape().grad_enabled) { tape().grad_enabled = false; }
NoGrad::~NoGrad() { tape().grad_enabled = prev_; }

bool needs_grad(const TensorList& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}
bool needs_grad(std::initializer_list<Tensor> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(const char* name, const TensorList& inputs, const TensorList& outputs, BackwardFn backward) {
  Tape& tp = tape();
  Node node{name, {}, {}, std::move(backward), autocast_precision(), profile::current_module()};
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (t.defined() && t.requires_grad() && !t.is_leaf())
      TCN_CHECK(t.impl().autograd->tape_epoch == tp.epoch, name, ": input ", i, " (shape ", t.shape(),
                ") was computed before the last backward(), which freed its graph; its gradient could not flow. "
                "Recompute it, or detach() it to use it as a constant");
    node.inputs.push_back(t.defined() ? slot_of(t) : Slot{});
  }
  for (const Tensor& t : outputs) {
    TCN_CHECK(!t.requires_grad(), name, ": an output already has autograd history");
    auto meta = std::make_shared<AutogradMeta>();
    meta->is_leaf = false;
    meta->node = static_cast<int64_t>(tp.nodes.size());
    meta->tape_epoch = tp.epoch;
    t.impl().autograd = meta;
    node.outputs.push_back(slot_of(t));
  }
  tp.nodes.push_back(std::move(node));
}

void clear_tape() {
  Tape& tp = tape();
  tp.nodes.clear();
  tp.epoch++;
}

size_t tape_size() { return tape().nodes.size(); }

void set_grad_ready_hook(const Tensor& leaf, std::function<void()> hook) {
  TCN_CHECK(leaf.requires_grad() && leaf.is_leaf(), "set_grad_ready_hook: the tensor must be a leaf that requires grad");
  leaf.impl().autograd->on_grad_ready = std::move(hook);
}

namespace {

// The gradient the sweep starts from: `grad`, or 1 for a one-element root.
Tensor seed_gradient(const Tensor& root, const Tensor& grad) {
  TCN_CHECK(root.requires_grad(), "backward: the tensor does not require grad (no input of the "
            "ops that made it requires grad, or it was computed under NoGrad)");
  Tensor seed = grad;
  if (!seed.defined()) {
    TCN_CHECK(root.numel() == 1, "backward: a gradient can be created implicitly only for a "
              "one-element tensor, this one has shape ", root.shape());
    seed = ones(root.shape(), root.options());
  }
  TCN_CHECK(seed.shape() == root.shape(), "backward: gradient shape ", seed.shape(),
            " does not match tensor shape ", root.shape());
  return seed;
}

// If a backward function throws (out of memory, say), the tape is dropped with
// every gradient in flight, so nothing stale leaks into a later backward().
struct ClearOnError {
  Tape& tp;
  bool done = false;
  ~ClearOnError() {
    if (done) return;
    for (Node& n : tp.nodes)
      for (Slot& sl : n.outputs)
        if (sl.meta) sl.meta->grad = Tensor();
    clear_tape();
  }
};

// Leaves with a grad-ready hook (set_grad_ready_hook): each fires after the
// earliest-recorded node that feeds it, which is the last one the reverse
// sweep reaches. Entry i lists the leaves due after node i (empty: no hooks).
std::vector<std::vector<AutogradMeta*>> plan_grad_ready_hooks(Tape& tp, int64_t last) {
  std::vector<std::vector<AutogradMeta*>> ready_after;
  std::unordered_set<AutogradMeta*> seen;
  for (int64_t i = 0; i <= last; ++i)
    for (Slot& s : tp.nodes[i].inputs)
      if (s.meta && s.meta->is_leaf && s.meta->on_grad_ready && seen.insert(s.meta.get()).second) {
        if (ready_after.empty()) ready_after.resize(static_cast<size_t>(last) + 1);
        ready_after[static_cast<size_t>(i)].push_back(s.meta.get());
      }
  return ready_after;
}

// The node's outputs' gradients, taken out of their slots; zeros for an output
// that got none. Empty when none got one: nothing flows through the node.
TensorList take_output_grads(Node& node) {
  TensorList grad_out;
  bool any = false;
  for (Slot& s : node.outputs) {
    grad_out.push_back(std::move(s.meta->grad));
    s.meta->grad = Tensor();
    any = any || grad_out.back().defined();
  }
  if (!any) return {};
  for (size_t k = 0; k < grad_out.size(); ++k)
    if (!grad_out[k].defined()) grad_out[k] = zeros(node.outputs[k].shape, node.outputs[k].options);
  return grad_out;
}

// Runs the node's backward function, under the precision it was recorded with
// and charged to its module in a profile; then frees what the function saved.
TensorList run_backward(Node& node, TensorList grad_out) {
  TensorList grad_in;
  {
    Autocast precision(node.precision);
    const profile::ModuleScope module(node.module);
    const profile::Op op(node.name);
    grad_in = node.backward(grad_out);
  }
  node.backward = nullptr;  // frees the saved tensors now
  return grad_in;
}

// Adds the gradients a backward function returned into its inputs' slots,
// checking that each has its input's shape and dtype.
void accumulate_input_grads(Node& node, TensorList grad_in) {
  TCN_CHECK(grad_in.size() == node.inputs.size(), "backward of ", node.name, " returned ", grad_in.size(),
            " gradients for ", node.inputs.size(), " inputs");
  for (size_t k = 0; k < grad_in.size(); ++k) {
    Slot& s = node.inputs[k];
    if (!s.meta || !grad_in[k].defined()) continue;
    TCN_CHECK(grad_in[k].shape() == s.shape, "backward of ", node.name, " returned a gradient of shape ",
              grad_in[k].shape(), " for input ", k, " of shape ", s.shape);
    TCN_CHECK(grad_in[k].dtype() == s.options.dtype, "backward of ", node.name, " returned a ", grad_in[k].dtype(),
              " gradient for a ", s.options.dtype, " input ", k);
    accumulate(*s.meta, std::move(grad_in[k]));
  }
}

}  // namespace

// One reverse sweep: from the root's node back to the first, each node turns
// its outputs' gradients into its inputs'; then the tape is freed.
void backward(const Tensor& root, const Tensor& grad) {
  const Tensor seed = seed_gradient(root, grad);
  AutogradMeta& root_meta = *root.impl().autograd;
  NoGrad no_grad;  // backward functions record nothing
  const profile::PhaseScope phase(profile::Phase::Backward);
  if (root_meta.is_leaf) return accumulate(root_meta, seed);
  Tape& tp = tape();
  TCN_CHECK(root_meta.tape_epoch == tp.epoch && root_meta.node < static_cast<int64_t>(tp.nodes.size()),
            "backward: the graph of this tensor was already freed by an earlier backward() "
            "(or clear_tape()); run the forward pass again");
  accumulate(root_meta, seed);
  ClearOnError guard{tp};
  const auto ready_after = plan_grad_ready_hooks(tp, root_meta.node);
  for (int64_t i = root_meta.node; i >= 0; --i) {
    Node& node = tp.nodes[i];
    TensorList grad_out = take_output_grads(node);
    if (grad_out.empty()) {
      node.backward = nullptr;
      continue;
    }
    accumulate_input_grads(node, run_backward(node, std::move(grad_out)));
    if (!ready_after.empty())
      for (AutogradMeta* m : ready_after[static_cast<size_t>(i)])
        if (m->grad.defined()) m->on_grad_ready();
  }
  guard.done = true;
  clear_tape();
}

}  // namespace tcn::autograd

namespace tcn {

// The Tensor method that runs the sweep (declared in core/tensor.h).
void Tensor::backward() const { autograd::backward(*this); }

}  // namespace tcn

