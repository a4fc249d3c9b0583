#include "core/step_graph.h"

#include "core/profile.h"
#include "core/devices.h"

namespace tcn {

namespace {
thread_local StepGraph* tl_capturing = nullptr;
constexpr int kMaxGenerators = 16;  // dropout generators one captured step may draw from
constexpr int kMaxAttempts = 3;     // captures that may run out of pool before giving up
}  // namespace

GraphMode parse_graph_mode(const std::string& v, const std::string& flag) {
  if (v == "off") return GraphMode::Off;
  if (v == "auto") return GraphMode::Auto;
  if (v == "on") return GraphMode::On;
  TCN_FAIL(flag, " ", v, ": expected auto, on or off");
}

struct StepGraph::GraphHolder {
  cuda::Graph graph;
};

// The generators the captured step draws from. slots holds, per generator, its
// offset at the start of a replay; the graph's last kernel adds `drawn` to it.
struct StepGraph::Draws {
  struct Entry {
    Generator* gen;
    uint64_t seed;
    uint64_t drawn = 0;       // counters the step draws from it
    double on_device = -1.0;  // what slots[k] holds as far as the host knows (-1: never set)
  };
  std::vector<Entry> entries;
  Tensor slots, incr;  // float64 [kMaxGenerators] on the device
};

StepGraph::StepGraph(GraphMode mode, Device device, std::vector<Tensor> params)
    : mode_(mode), device_(device), params_(std::move(params)), draws_(std::make_unique<Draws>()),
      graph_(std::make_unique<GraphHolder>()) {
  if (!device_.is_cuda()) mode_ = GraphMode::Off;  // nothing to capture on a CPU
  if (mode_ == GraphMode::Off) {
    status_ = mode == GraphMode::Off ? "eager (--cuda_graph off)" : "eager (CUDA graphs are for CUDA devices)";
    return;
  }
  draws_->slots = zeros({kMaxGenerators}, {DType::F64, device_});
  draws_->incr = zeros({kMaxGenerators}, {DType::F64, device_});
  pool_ = cuda::caching_allocator(device_.index)->new_pool();
  status_ = "eager until captured (warm-up)";
}

StepGraph::~StepGraph() {
  graph_->graph.reset();
  if (pool_) {
    out_ = Tensor();
    grads_.clear();
    cuda::caching_allocator(device_.index)->release_pool(pool_);
  }
}

StepGraph* StepGraph::capturing() { return tl_capturing; }
bool StepGraph::replaying() const { return graph_->graph.ready(); }
size_t StepGraph::graph_nodes() const { return graph_->graph.nodes(); }
void StepGraph::before_replay(std::function<void()> f) { before_.push_back(std::move(f)); }
void StepGraph::after_replay(std::function<void()> f) { after_.push_back(std::move(f)); }

StepGraph::Philox StepGraph::philox(Generator& gen, uint64_t n) {
  TCN_CHECK(tl_capturing == this, "StepGraph::philox: only while this step is being captured");
  TCN_CHECK(gen.shard_world() == 1, "StepGraph: a dropout generator shared across processes (Generator::set_shard) "
            "cannot be captured yet; run the step eagerly");
  auto& es = draws_->entries;
  size_t k = 0;
  while (k < es.size() && es[k].gen != &gen) ++k;
  if (k == es.size()) {
    TCN_CHECK(es.size() < kMaxGenerators, "StepGraph: a captured step may draw from at most ", kMaxGenerators,
              " generators");
    es.push_back({&gen, gen.seed()});
  }
  const uint64_t rel = es[k].drawn;
  es[k].drawn += (n + 3) / 4;  // as Generator::reserve
  return {draws_->slots.narrow(0, static_cast<int64_t>(k), 1), rel};
}

Tensor StepGraph::run(int64_t key, const std::function<Tensor()>& body) {
  if (mode_ == GraphMode::Off || failed_) return body();
  // A profiled step runs eagerly: the profiler times each op between its own
  // launches, which a graph replays as one. The warm-up does not count it.
  if (profile::active()) return body();
  if (replaying()) return key == key_ ? replay() : body();
  if (++eager_steps_ == 1) return body();  // optimizer state and device scalars made outside the pool
  if (!keyed_) {
    key_ = key;
    keyed_ = true;
  }
  if (key != key_) return body();
  if (eager_steps_ == 2) return eager_in_pool(body);  // fills the pool
  return capture(body);
}

Tensor StepGraph::eager_in_pool(const std::function<Tensor()>& body) {
  CachingAllocator* alloc = cuda::caching_allocator(device_.index);
  alloc->use_pool(pool_, true);
  try {
    Tensor out = body();
    alloc->use_pool(0);
    return out;
  } catch (...) {
    alloc->use_pool(0);
    throw;
  }
}

Tensor StepGraph::capture(const std::function<Tensor()>& body) {
  CachingAllocator* alloc = cuda::caching_allocator(device_.index);
  ++attempts_;  // hooks and draws are empty: a failed attempt cleared its own
  cuda::synchronize();  // a pending device-side error belongs to the steps before, not to the capture
  std::string error;
  bool exhausted = false;
  Tensor out;
  alloc->use_pool(pool_, false);  // every request from the pool: no cudaMalloc during a capture
  tl_capturing = this;
  graph_->graph.begin_capture(device_.index);
  try {
    out = body();
    if (!draws_->entries.empty()) advance_bases(draws_->slots, draws_->incr);  // the graph's last kernel: next step's bases
  } catch (const PoolExhausted& e) {
    exhausted = true;
    error = e.what();
  } catch (const std::exception& e) {
    error = e.what();
  }
  tl_capturing = nullptr;
  const std::string why = graph_->graph.end_capture();
  alloc->use_pool(0);
  if (error.empty() && why.empty()) {
    std::vector<double> incr(kMaxGenerators, 0.0);
    for (size_t k = 0; k < draws_->entries.size(); ++k) incr[k] = static_cast<double>(draws_->entries[k].drawn);
    set_increments(draws_->incr, incr);  // once; the replays read it
    out_ = out;
    grads_.clear();
    for (const Tensor& p : params_) grads_.push_back(p.grad());
    status_ = "one CUDA graph per step (" + std::to_string(graph_nodes()) + " nodes)";
    return replay();  // the captured step has not run yet: run it
  }
  graph_->graph.reset();
  before_.clear();
  after_.clear();
  draws_->entries.clear();
  out = Tensor();
  if (exhausted && attempts_ < kMaxAttempts) return eager_in_pool(body);  // grows the pool; capture again next step
  fail(error.empty() ? why : error + (why.empty() ? "" : " (" + why + ")"));
  return body();
}

void StepGraph::fail(const std::string& why) {
  TCN_CHECK(mode_ != GraphMode::On, "--cuda_graph on: the training step could not be captured as a CUDA graph: ", why);
  failed_ = true;
  status_ = "eager: the step could not be captured as a CUDA graph: " + why;
}

Tensor StepGraph::replay() {
  for (auto& e : draws_->entries) {  // each generator's base: what the host holds, if it moved on eagerly since
    TCN_CHECK(e.gen->seed() == e.seed, "StepGraph: a generator was reseeded after the step was captured (seed ",
              e.seed, " -> ", e.gen->seed(), "); make a new StepGraph");
    const double offset = static_cast<double>(e.gen->offset());
    TCN_CHECK(offset < 9007199254740992.0, "StepGraph: Philox offset ", e.gen->offset(), " is past 2^53");
    if (e.on_device != offset) {
      const size_t k = static_cast<size_t>(&e - draws_->entries.data());
      set_base(draws_->slots.narrow(0, static_cast<int64_t>(k), 1), offset);
      e.on_device = offset;
    }
  }
  for (auto& f : before_) f();
  graph_->graph.launch();
  for (auto& e : draws_->entries) {
    e.gen->skip(e.drawn);
    e.on_device += static_cast<double>(e.drawn);
  }
  for (auto& f : after_) f();
  for (size_t i = 0; i < params_.size(); ++i)  // an eager step in between may have replaced them
    if (grads_[i].defined()) {
      const Tensor now = params_[i].grad();
      if (!now.defined() || now.raw_data() != grads_[i].raw_data()) params_[i].adopt_grad(grads_[i]);
    }
  return out_;
}

}  // namespace tcn
