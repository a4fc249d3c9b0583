#include "core/profile.h"

#include <atomic>

#include <cxxabi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <unordered_map>

#include "core/allocator.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/devices.h"

namespace tcn::profile {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::Optimizer: return "optimizer";
    case Phase::Data: return "data";
    case Phase::Other: return "other";
  }
  return "?";
}

std::string class_label(const std::type_info& type) {
  int status = 0;
  char* d = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  const std::string full = status == 0 && d ? d : type.name();
  std::free(d);
  const size_t colon = full.rfind("::");
  std::string label = "(";
  label.append(full, colon == std::string::npos ? 0 : colon + 2);
  label += ')';
  return label;
}

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<uint32_t> g_recordings{0};  // recordings started, process-wide (tags name theirs)

}  // namespace

class Recorder {
 public:
  explicit Recorder(Device device) : t0_(Clock::now()) {
    rec.device = device;
    if (device.is_cuda()) {
      timer_ = std::make_unique<cuda::EventTimer>(device.index);
      rec.device_timed = true;
      rec.emulated = cuda::emulated();
      rec.launches_counted = cuda::counters_available();
    }
    id = ++g_recordings;
  }

  int32_t begin(Kind kind, int32_t name, Phase phase, int32_t module) {
    Range r;
    r.kind = kind;
    r.phase = phase;
    r.name = name;
    r.module = module;
    r.parent = stack_.empty() ? -1 : stack_.back();
    if (timer_) {
      r.ev_begin = timer_->mark();
      // NVTX shows a module by its path, everything else by its name (as the trace does).
      const bool mod = kind == Kind::Module && module >= 0;
      cuda::nvtx_push((mod ? rec.modules[static_cast<size_t>(module)] : rec.names[static_cast<size_t>(name)]).c_str());
    }
    if (rec.launches_counted) r.launches = -launches_so_far();
    r.host_begin_ns = now_ns();
    rec.ranges.push_back(r);
    const auto idx = static_cast<int32_t>(rec.ranges.size() - 1);
    stack_.push_back(idx);
    return idx;
  }

  void end(int32_t idx) {
    // Scopes end in reverse order of their start (RAII, also when unwinding);
    // anything above idx still open (a range leaked by misuse) ends with it.
    if (std::find(stack_.begin(), stack_.end(), idx) == stack_.end()) return;  // ended already
    while (!stack_.empty()) {
      const int32_t top = stack_.back();
      stack_.pop_back();
      Range& r = rec.ranges[static_cast<size_t>(top)];
      r.host_end_ns = now_ns();
      if (timer_) {
        r.ev_end = timer_->mark();
        cuda::nvtx_pop();
      }
      if (rec.launches_counted) r.launches += launches_so_far();
      if (top == idx) break;
    }
  }

  int32_t name_id(const char* name) {
    auto it = name_ids_.find(name);
    if (it != name_ids_.end()) return it->second;
    rec.names.emplace_back(name);
    const auto id_ = static_cast<int32_t>(rec.names.size() - 1);
    name_ids_.emplace(name, id_);
    return id_;
  }

  int32_t module_id(const void* key, const std::type_info* type) {
    auto it = module_ids_.find(key);
    if (it != module_ids_.end()) return it->second;
    rec.modules.push_back(type ? class_label(*type) : "(unnamed)");
    rec.module_parents.push_back(-1);
    const auto id_ = static_cast<int32_t>(rec.modules.size() - 1);
    module_ids_.emplace(key, id_);
    return id_;
  }
  void name_module(const void* key, const std::string& path, const void* parent) {
    auto p = parent ? module_ids_.find(parent) : module_ids_.end();
    const int32_t parent_id = p != module_ids_.end() ? p->second : -1;
    auto it = module_ids_.find(key);
    if (it == module_ids_.end()) {
      rec.modules.emplace_back();
      rec.module_parents.push_back(-1);
      it = module_ids_.emplace(key, static_cast<int32_t>(rec.modules.size() - 1)).first;
    }
    rec.modules[static_cast<size_t>(it->second)] = path;
    rec.module_parents[static_cast<size_t>(it->second)] = parent_id;
  }

  // The phase and module in force: those of the innermost open range.
  Phase phase() const { return stack_.empty() ? Phase::Forward : rec.ranges[static_cast<size_t>(stack_.back())].phase; }
  int32_t module() const { return stack_.empty() ? -1 : rec.ranges[static_cast<size_t>(stack_.back())].module; }
  int32_t top() const { return stack_.empty() ? -1 : stack_.back(); }

  Recording finish() {
    while (!stack_.empty()) end(stack_.back());
    if (timer_) {
      timer_->collect();
      for (Range& r : rec.ranges) {
        r.dev_begin_ms = timer_->ms(r.ev_begin);
        r.dev_end_ms = timer_->ms(r.ev_end);
      }
    }
    rec.peak_bytes = memory_stats(rec.device).peak_in_use;
    return std::move(rec);
  }

  Recording rec;
  uint32_t id = 0;

 private:
  static int64_t launches_so_far() {
    const cuda::DeviceCounters c = cuda::counters();
    return c.launches + c.gemm_launches;
  }
  int64_t now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0_).count();
  }
  Clock::time_point t0_;
  std::unique_ptr<cuda::EventTimer> timer_;
  std::vector<int32_t> stack_;
  std::unordered_map<const char*, int32_t> name_ids_;  // by address: literals of one name may differ, the report merges them
  std::unordered_map<const void*, int32_t> module_ids_;
};

namespace detail {

thread_local Recorder* t_recorder = nullptr;

uint32_t recording() { return t_recorder ? t_recorder->id : 0; }

int32_t begin(Kind kind, const char* name) {
  Recorder& r = *t_recorder;
  return r.begin(kind, r.name_id(name), r.phase(), r.module());
}

int32_t begin_phase(Phase phase) {
  Recorder& r = *t_recorder;
  return r.begin(Kind::Phase, r.name_id(phase_name(phase)), phase, r.module());
}

int32_t begin_module(const void* key, const std::type_info& type) {
  Recorder& r = *t_recorder;
  const int32_t m = r.module_id(key, &type);
  return r.begin(Kind::Module, r.name_id("module"), r.phase(), m);
}

int32_t begin_module_id(uint32_t recording, int32_t module) {
  Recorder& r = *t_recorder;
  if (recording != r.id || module >= static_cast<int32_t>(r.rec.modules.size())) return -1;
  return r.begin(Kind::Module, r.name_id("module"), r.phase(), module);
}

void end(uint32_t recording, int32_t range) {
  if (t_recorder && t_recorder->id == recording) t_recorder->end(range);
}

void add_work(double flops, double bytes) {
  Recorder& r = *t_recorder;
  const int32_t top = r.top();
  if (top < 0) return;
  Range& range = r.rec.ranges[static_cast<size_t>(top)];
  range.flops += flops;
  range.bytes += bytes;
}

}  // namespace detail

void start(Device device) {
  TCN_CHECK(!active(), "profiler: already recording on this thread (one profile at a time)");
  reset_peak_memory(device);
  detail::t_recorder = new Recorder(device);
}

Recording stop() {
  TCN_CHECK(active(), "profiler: not recording");
  std::unique_ptr<Recorder> r(detail::t_recorder);
  detail::t_recorder = nullptr;
  return r->finish();
}

void name_module(const void* key, const std::string& path, const void* parent) {
  if (active()) detail::t_recorder->name_module(key, path, parent);
}

ModuleTag current_module() {
  if (!active()) return {};
  return {detail::t_recorder->id, detail::t_recorder->module()};
}

}  // namespace tcn::profile
