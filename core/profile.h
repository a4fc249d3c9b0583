// The profiler's recorder: the ranges that ops, modules and phases open while a
// profiler records on this thread. nn/profiler.h is the user's side of it (the
// table and the trace); this file is what the rest of the library calls.
//
//   Tensor relu(const Tensor& x) {
//     profile::Op range("relu");                         // the op's time, host and device
//     ...
//     profile::add_bytes(nbytes(x) + nbytes(y));         // for its GB/s
//   }
//
// GEMMs report their FLOPs themselves (ops/cpu_blas.cpp, cuda/gemm.cu), so
// every op that runs one gets a GFLOP/s, forward and backward. A module's
// forward opens a profile::ModuleScope (nn::Module::profile_scope), autograd's
// backward opens, for each node it runs, the module the node was recorded in
// and an op range with the node's name; optimizers open Phase::Optimizer.
//
// When nothing records (always, outside a profiled step) each of these is one
// test of a thread-local pointer: profiling off costs nothing measurable.
//
// Why device time needs events: a CUDA op returns as soon as its kernels are
// queued, so a host clock around it measures the launch, not the work; the
// work is charged to whichever later op makes the host wait. On CUDA each range
// also records an event on the device's stream at its start and end, and the
// profiler reads the GPU's own clock from them once the step is done.
#pragma once

#include <cstdint>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/device.h"

namespace tcn::profile {

// Other: a step's own time, outside every op, module and phase (on CUDA most
// of its host time is the wait for the device at the step's end); reports
// give it its own row, nothing records in it.
enum class Phase : uint8_t { Forward, Backward, Optimizer, Data, Other };
inline constexpr int kPhases = 5;
const char* phase_name(Phase p);

enum class Kind : uint8_t { Step, Phase, Module, Op };

// One range as recorded: a node of the tree step > phase > module > op (ops
// may nest in ops: a composed op's parts, a backward closure's ops).
struct Range {
  Kind kind;
  Phase phase;           // the phase in force where it ran
  int32_t name;          // into Recording::names
  int32_t module;        // innermost module, into Recording::modules (-1: none)
  int32_t parent;        // enclosing range (-1: none)
  int64_t host_begin_ns = 0, host_end_ns = 0;  // host clock, from the start of the recording
  double dev_begin_ms = 0, dev_end_ms = 0;     // device clock (CUDA only), from the start
  double flops = 0, bytes = 0;                 // its own work (GEMM FLOPs, bytes moved), children's not included
  int64_t launches = 0;  // kernels and GEMMs it launched, children's included (where counters_launches)
  int32_t ev_begin = -1, ev_end = -1;          // device timing marks (internal)
};

// What a finished recording hands to the report (nn/profiler.h).
struct Recording {
  Device device;
  bool device_timed = false;  // device clock read from events (a CUDA device)
  bool emulated = false;      // ... of the emulated device: its clock times the CPU emulating it
  bool launches_counted = false;  // Range::launches is filled (the device counts launches: the emulated one)
  std::vector<Range> ranges;  // in the order they began
  std::vector<std::string> names;
  std::vector<std::string> modules;     // by id: its path, or "(Class)" when not named
  std::vector<int32_t> module_parents;  // by id: the enclosing module (-1: none known)
  int64_t steps = 0;
  size_t peak_bytes = 0;  // peak memory in use on `device` while recording
};

class Recorder;
namespace detail {
extern thread_local Recorder* t_recorder;
uint32_t recording();  // the id of this thread's recording (0: none)
int32_t begin(Kind kind, const char* name);
int32_t begin_phase(Phase phase);
int32_t begin_module(const void* key, const std::type_info& type);
int32_t begin_module_id(uint32_t recording, int32_t module);
void end(uint32_t recording, int32_t range);
void add_work(double flops, double bytes);
}  // namespace detail

// True while a profiler records on this thread.
inline bool active() { return detail::t_recorder != nullptr; }

// Starts recording on this thread: ranges on `device` are timed on its clock.
// A second start while one records is an error. Clears the peak-memory mark.
void start(Device device);
// Stops, waits for the device, reads its clock and returns what was recorded.
Recording stop();
// Names a module (its PyTorch path), and the module it is part of (null for
// the root; named before), before its forward opens a range. A module not
// named shows as its class, in parentheses.
void name_module(const void* key, const std::string& path, const void* parent);

// "tcn::nn::Conv1d" -> "(Conv1d)": how a module without a path is shown.
std::string class_label(const std::type_info& type);

// RAII ranges: each a no-op when nothing records.
class [[nodiscard]] Scope {
 public:
  Scope(Kind kind, const char* name) : Scope(active() ? detail::begin(kind, name) : -1) {}
  ~Scope() {
    if (range_ < 0) return;
    try {
      detail::end(recording_, range_);
    } catch (...) {  // a failing device (its error is raised by the op's own next call): never from a destructor
    }
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 protected:
  explicit Scope(int32_t range) : range_(range), recording_(range >= 0 ? detail::recording() : 0) {}

 private:
  int32_t range_;
  uint32_t recording_;  // a scope outliving its recording ends nothing in the next one
};

// An op: `name` must outlive the recording (a string literal).
class [[nodiscard]] Op : public Scope {
 public:
  explicit Op(const char* name) : Scope(Kind::Op, name) {}
};

// A step of training (the profiler opens it; see nn::Profiler::step).
class [[nodiscard]] Step : public Scope {
 public:
  Step() : Scope(Kind::Step, "step") {}
};

// A phase: every range inside it is charged to it. Ops outside any are forward.
class [[nodiscard]] PhaseScope : public Scope {
 public:
  explicit PhaseScope(Phase p) : Scope(active() ? detail::begin_phase(p) : -1) {}
};

// Where a tape node was recorded: the module it ran in, in which recording.
struct ModuleTag {
  uint32_t recording = 0;  // 0: none
  int32_t module = -1;
};
ModuleTag current_module();

// A module's forward; or, from a tag, the module a backward node belongs to.
class [[nodiscard]] ModuleScope : public Scope {
 public:
  ModuleScope(const void* module, const std::type_info& type)
      : Scope(active() ? detail::begin_module(module, type) : -1) {}
  explicit ModuleScope(ModuleTag tag)
      : Scope(active() && tag.module >= 0 ? detail::begin_module_id(tag.recording, tag.module) : -1) {}
};

// Work done by the innermost open range: GEMM FLOPs, bytes read and written.
inline void add_flops(double flops) {
  if (active()) detail::add_work(flops, 0);
}
inline void add_bytes(double bytes) {
  if (active()) detail::add_work(0, bytes);
}

}  // namespace tcn::profile
