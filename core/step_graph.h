// StepGraph: a training step (forward, backward, clipping, optimizer) captured
// once as a CUDA graph and then replayed as one launch, with no kernel launches
// from the host and no host synchronisation. See docs/gpu_step.md.
//
//   StepGraph graph(GraphMode::Auto, device, model.parameters());
//   for (...) {
//     copy_(static_inp, batch);               // the graph reads fixed addresses
//     Tensor loss = graph.run(key, [&] {      // key: the step's shapes (see run)
//       opt.zero_grad();
//       Tensor l = cross_entropy(model.forward(static_inp), static_tgt);
//       l.backward();
//       opt.step();
//       return l;
//     });
//   }
//
// How a step becomes a graph:
//  1. The first step runs eagerly: optimizer state, device scalars and the
//     caching allocator's blocks come into being.
//  2. The second runs eagerly with the allocator serving a private pool
//     (core/caching_allocator.h), which it fills with the step's blocks.
//  3. The third is captured with every request served from that pool (a
//     capture may not call cudaMalloc), then replayed at once; later steps are
//     replays. A replay writes into the addresses the capture used, which the
//     pool keeps reserved for the graph.
//
// A replay runs no host code, so anything an op decides on the host per step
// must either be the same every step or be read by its kernel from device
// memory. Where an op also keeps host state, it registers what each replay must
// do to it while the step is being captured (StepGraph::capturing()):
//  - dropout draws Philox counters from a device-side base per generator
//    (philox() below), which the graph's last kernel advances; each replay then
//    advances the host Generator by the same amount (ops/dropout.cpp);
//  - the optimizers read the learning rate from a device scalar, refreshed
//    before a replay when it changed (nn/optim.cpp);
//  - LossWatch counts its steps on the device (nn/optim.cpp).
// An op that cannot run inside a graph (it reads a value back, or allocates
// outside the pool) makes the capture fail; with GraphMode::Auto the step then
// runs eagerly from there on, and status() says why.
//
// On the CPU, and with GraphMode::Off, run() just calls the body; so it does
// while a profiler records (core/profile.h): profiled steps run eagerly.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/tensor.h"

namespace tcn {

enum class GraphMode { Off, Auto, On };
// "off", "auto" or "on" (the --cuda_graph flag); anything else is an error naming `flag`.
GraphMode parse_graph_mode(const std::string& value, const std::string& flag = "--cuda_graph");

class StepGraph {
 public:
  // params: the parameters whose gradients the step computes; after each replay
  // their .grad() is the replay's gradient again (an eager step in between may
  // have replaced it).
  StepGraph(GraphMode mode, Device device, std::vector<Tensor> params = {});
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Runs one step and returns what `body` returns (on a replay: the tensor the
  // capture returned, which the replay has rewritten). `key` stands for what the
  // captured launches depend on besides device memory: the shapes, and which
  // static input buffers the body reads. The graph is captured for the key of
  // the first steady step; a step with another key runs eagerly.
  Tensor run(int64_t key, const std::function<Tensor()>& body);

  bool enabled() const { return mode_ != GraphMode::Off; }  // a CUDA device and a mode other than off
  bool replaying() const;        // a graph is captured and in use
  // Warm-up over: steps with the captured key are replays, or stay eager for good.
  bool settled() const { return !enabled() || failed_ || replaying(); }
  const std::string& status() const { return status_; }  // one line: captured (how big) or why eager
  size_t graph_nodes() const;    // the captured graph's kernels, copies and GEMMs (0 before)

  // ---- for ops with per-step host state ------------------------------------------------
  // The StepGraph whose step is being captured on this thread, or nullptr.
  static StepGraph* capturing();
  // Host work to do before and after each replay (registered during the capture;
  // whatever they touch must outlive this StepGraph's replays).
  void before_replay(std::function<void()> f);
  void after_replay(std::function<void()> f);
  // Dropout inside a captured step: the kernel draws counters *base + rel ..
  // for `n` values, base being a float64 device scalar that holds gen's offset
  // at the start of each replay. The host Generator is not advanced during the
  // capture; each replay advances it by what the step drew.
  struct Philox {
    Tensor base;  // float64 [1] on the device (exact up to 2^53 counters)
    uint64_t rel;
  };
  Philox philox(Generator& gen, uint64_t n);

 private:
  struct Draws;
  // The device arithmetic on the Philox bases, the only ops the step graph
  // runs. The ops stand above core (docs/design.md, the layers), so these are
  // defined with them (ops/random.cpp).
  static void advance_bases(const Tensor& slots, const Tensor& incr);  // slots += incr: the graph's last kernel
  static void set_increments(const Tensor& incr, const std::vector<double>& values);  // once, after a capture
  static void set_base(const Tensor& slot, double value);  // a generator's base that moved on eagerly
  Tensor replay();
  Tensor eager_in_pool(const std::function<Tensor()>& body);
  Tensor capture(const std::function<Tensor()>& body);
  void fail(const std::string& why);

  GraphMode mode_;
  Device device_;
  std::vector<Tensor> params_;
  std::unique_ptr<Draws> draws_;
  std::vector<std::function<void()>> before_, after_;
  std::vector<Tensor> grads_;  // the parameters' gradients as the capture left them
  Tensor out_;                 // what the captured body returned
  int64_t key_ = 0;
  bool keyed_ = false, failed_ = false;
  int eager_steps_ = 0, attempts_ = 0;
  uint64_t pool_ = 0;
  std::string status_;
  struct GraphHolder;
  std::unique_ptr<GraphHolder> graph_;
};

}  // namespace tcn
