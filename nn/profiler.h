// Where does my step go? A profiler for anyone's training loop:
//
//   nn::Profiler prof(*model, device);          // records from here on (this thread)
//   for (int i = 0; i < 5; ++i)
//     prof.step([&] { train_step(); });         // one profiled step
//   const nn::ProfileReport& r = prof.finish();
//   std::cout << r.table();                     // per op, per module, per phase
//   prof.write_trace("step.json");              // Chrome trace: Perfetto, chrome://tracing
//
// Every op's time is charged to the op itself: on the CPU with the host clock
// around it; on CUDA with events recorded on the stream around its own
// launches, read after the step (core/profile.h says why a host clock cannot
// do that). Profiled steps run eagerly, never as a CUDA graph (core/step_graph.h).
//
// The table's rows are keyed by (op, module, phase). An op's time is its own:
// what ops nested inside it took (the parts of a composed op, the ops of a
// backward closure) is in their rows, and "(between ops)" is the time in a
// module or phase outside any op, so the rows add up to the step. The module
// is the PyTorch path of the innermost module the op ran in (a backward op:
// the module its forward ran in), "-" outside the model (the loss, the optimizer).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/profile.h"
#include "nn/module.h"

namespace tcn::nn {

struct ProfileRow {
  std::string op, module;
  profile::Phase phase = profile::Phase::Forward;
  double calls = 0;     // per step
  double ms = 0;        // per step: device time on CUDA, host time on the CPU (its own, nested ops excluded)
  double host_ms = 0;   // per step: host time (on CUDA: launching, not running)
  double flops = 0;     // per step: GEMM FLOPs
  double bytes = 0;     // per step: bytes read and written (memory-bound ops)
  double launches = 0;  // per step: kernels and GEMMs it launched itself (where the device counts them)
  double gflops() const { return ms > 0 && flops > 0 ? flops / (ms * 1e6) : 0; }
  double gbytes() const { return ms > 0 && bytes > 0 ? bytes / (ms * 1e6) : 0; }
};

struct ProfileModuleRow {
  std::string module;            // path; "-": ops outside the model
  double forward_ms = 0, backward_ms = 0, other_ms = 0;  // per step, with its sub-modules
  double total_ms() const { return forward_ms + backward_ms + other_ms; }
};

struct ProfileReport {
  std::string device;       // "cpu", "cuda:0"
  bool device_timed = false;  // ms are the device's clock (CUDA)
  bool emulated = false;      // ... the emulated device's: not a GPU's time
  bool launches_counted = false;  // ProfileRow::launches filled (the emulated device counts launches)
  double step_launches = 0;       // per step, kernels and GEMMs launched (where counted)
  int64_t steps = 0;
  double step_ms = 0;         // per step, wall clock on the host (the device's work included)
  double step_device_ms = 0;  // per step, device time from the step's first to its last event (CUDA)
  double timed_ms() const { return device_timed ? step_device_ms : step_ms; }  // what the rows add up to
  std::vector<ProfileRow> ops;  // sorted by ms, largest first
  std::vector<ProfileModuleRow> modules;  // depth first, as the model registers them
  double phase_ms[profile::kPhases] = {};  // per step, by profile::Phase
  size_t peak_bytes = 0;                  // memory in use at its highest while recording
  // The report as text: a header, the op table (rows under 0.05% of the step
  // folded into one line), the module and phase summaries.
  std::string table(size_t max_rows = 40) const;
};

class Profiler {
 public:
  // Starts recording on this thread; `model`'s modules are named by their paths
  // (the root as its class). Ops on `device` are timed on its clock.
  Profiler(const Module& model, Device device);
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // One profiled step, as a scope: the step is what runs while it lives, and
  // its end waits for the device, so the step's time includes all of its
  // device work. A Step of no profiler (nullptr) records nothing.
  //   { const nn::Profiler::Step s(&prof); train_step(); }
  class [[nodiscard]] Step {
   public:
    explicit Step(Profiler* p);
    ~Step() noexcept(false);  // the wait reports a device error (not while an exception unwinds)
    Step(const Step&) = delete;
    Step& operator=(const Step&) = delete;

   private:
    Profiler* p_;
    int unwinding_;                        // exceptions in flight at the start
    std::optional<profile::Step> range_;   // ends after the destructor's wait
  };
  // The same for a callable: `body` as one profiled step.
  void step(const std::function<void()>& body);
  // Stops recording (once) and builds the report.
  const ProfileReport& finish();
  // The recording as Chrome trace-event JSON (after finish): a track for the
  // host and one for the device's stream, ranges nested step > phase > module > op.
  void write_trace(const std::string& path) const;
  const profile::Recording& recording() const { return rec_; }

 private:
  Device device_;
  bool recording_ = true;
  int64_t steps_ = 0;
  profile::Recording rec_;
  ProfileReport report_;
};

// The report of a finished recording (what Profiler::finish builds).
ProfileReport make_report(const profile::Recording& rec);
// The Chrome trace-event JSON of a recording.
std::string trace_json(const profile::Recording& rec);

}  // namespace tcn::nn
