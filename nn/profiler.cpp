#include "nn/profiler.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/files.h"
#include "core/devices.h"

namespace tcn::nn {

using profile::Kind;
using profile::Range;

Profiler::Profiler(const Module& model, Device device) : device_(device) {
  profile::start(device);
  std::map<std::string, const Module*> by_path;
  for (const auto& [path, m] : model.named_modules()) {  // depth first: a parent before its children
    const size_t dot = path.rfind('.');
    const Module* parent = path.empty() ? nullptr : by_path[dot == std::string::npos ? "" : path.substr(0, dot)];
    profile::name_module(m, path.empty() ? profile::class_label(typeid(*m)) : path, parent);
    by_path[path] = m;
  }
}

Profiler::~Profiler() {
  if (!recording_) return;
  try {
    (void)profile::stop();  // no report wanted: dropped
  } catch (...) {  // a failing device: nothing to report, and never throw from a destructor
  }
}

Profiler::Step::Step(Profiler* p) : p_(p), unwinding_(std::uncaught_exceptions()) {
  if (!p) return;
  TCN_CHECK(p->recording_, "Profiler::Step: the profiler has finished");
  range_.emplace();
  ++p->steps_;  // counted as its range is (a step that throws is still a recorded step)
}

Profiler::Step::~Step() noexcept(false) {
  // The step ends when its device work does; while an exception unwinds the
  // step, that one is the error to report.
  if (p_ && p_->device_.is_cuda() && std::uncaught_exceptions() == unwinding_) cuda::synchronize();
}

void Profiler::step(const std::function<void()>& body) {
  const Step step(this);
  body();
}

const ProfileReport& Profiler::finish() {
  if (recording_) {
    recording_ = false;
    rec_ = profile::stop();
    rec_.steps = steps_;
    report_ = make_report(rec_);
  }
  return report_;
}

void Profiler::write_trace(const std::string& path) const {
  TCN_CHECK(!recording_, "Profiler::write_trace: call finish() first");
  const std::string json = trace_json(rec_);
  write_file_atomic(path, {json}, "--trace: ", /*make_parents=*/true);  // whole or not at all
}

namespace {

double host_ms(const Range& r) { return static_cast<double>(r.host_end_ns - r.host_begin_ns) / 1e6; }
double dev_ms(const Range& r) { return r.dev_end_ms - r.dev_begin_ms; }

// Which ranges lie inside a step (parents begin before their children).
std::vector<bool> in_steps(const profile::Recording& rec) {
  std::vector<bool> in(rec.ranges.size(), false);
  for (size_t i = 0; i < rec.ranges.size(); ++i) {
    const Range& r = rec.ranges[i];
    in[i] = r.kind == Kind::Step || (r.parent >= 0 && in[static_cast<size_t>(r.parent)]);
  }
  return in;
}

}  // namespace

namespace {

// Each range's own time and launches: its span less its children's.
struct SelfTimes {
  std::vector<double> host, dev;
  std::vector<int64_t> launches;
};
SelfTimes self_times(const profile::Recording& rec) {
  const size_t n = rec.ranges.size();
  SelfTimes t{std::vector<double>(n), std::vector<double>(n), std::vector<int64_t>(n)};
  for (size_t i = 0; i < n; ++i) {
    t.host[i] += host_ms(rec.ranges[i]);
    t.dev[i] += dev_ms(rec.ranges[i]);
    t.launches[i] += rec.ranges[i].launches;
    if (const int32_t p = rec.ranges[i].parent; p >= 0) {
      t.host[static_cast<size_t>(p)] -= host_ms(rec.ranges[i]);
      t.dev[static_cast<size_t>(p)] -= dev_ms(rec.ranges[i]);
      t.launches[static_cast<size_t>(p)] -= rec.ranges[i].launches;
    }
  }
  return t;
}

using RowKey = std::tuple<std::string, std::string, int>;  // op, module, phase

// The rows per step, slowest first, into the report.
void add_rows_per_step(std::map<RowKey, ProfileRow>& rows, double steps, ProfileReport& rep) {
  for (auto& [key, row] : rows) {
    row.calls /= steps;
    row.ms /= steps;
    row.host_ms /= steps;
    row.flops /= steps;
    row.bytes /= steps;
    row.launches /= steps;
    rep.ops.push_back(row);
  }
  std::stable_sort(rep.ops.begin(), rep.ops.end(), [](const ProfileRow& a, const ProfileRow& b) { return a.ms > b.ms; });
}

// Modules with their sub-modules, per step: each module's own time (forward,
// backward, other) added to it and to every module above it; then "-", the
// time outside every module.
void add_module_rows(const profile::Recording& rec, const std::vector<std::array<double, 3>>& module_ms,
                     const std::array<double, 3>& outside_ms, double steps, ProfileReport& rep) {
  std::vector<std::array<double, 3>> incl(rec.modules.size(), {0, 0, 0});
  for (size_t m = 0; m < rec.modules.size(); ++m)
    for (int32_t a = static_cast<int32_t>(m); a >= 0; a = rec.module_parents[static_cast<size_t>(a)])
      for (size_t c = 0; c < 3; ++c) incl[static_cast<size_t>(a)][c] += module_ms[m][c];
  for (size_t m = 0; m < rec.modules.size(); ++m)
    rep.modules.push_back({rec.modules[m], incl[m][0] / steps, incl[m][1] / steps, incl[m][2] / steps});
  rep.modules.push_back({"-", outside_ms[0] / steps, outside_ms[1] / steps, outside_ms[2] / steps});
}

}  // namespace

ProfileReport make_report(const profile::Recording& rec) {
  ProfileReport rep;
  rep.device = rec.device.str();
  rep.device_timed = rec.device_timed;
  rep.emulated = rec.emulated;
  rep.launches_counted = rec.launches_counted;
  rep.peak_bytes = rec.peak_bytes;
  const SelfTimes self = self_times(rec);
  const std::vector<bool> in = in_steps(rec);
  std::map<RowKey, ProfileRow> rows;
  // Per module id: its own ms by phase (forward, backward, other).
  std::vector<std::array<double, 3>> module_ms(rec.modules.size(), {0, 0, 0});
  std::array<double, 3> outside_ms{0, 0, 0};
  for (size_t i = 0; i < rec.ranges.size(); ++i) {
    if (!in[i]) continue;
    const Range& r = rec.ranges[i];
    // A step's own time (outside its phases and ops) is a row of its own.
    const bool step = r.kind == Kind::Step;
    if (step) {
      ++rep.steps;
      rep.step_ms += host_ms(r);
      rep.step_device_ms += dev_ms(r);
      rep.step_launches += static_cast<double>(r.launches);
    }
    const double ms = rec.device_timed ? self.dev[i] : self.host[i];
    const std::string op = r.kind == Kind::Op ? rec.names[static_cast<size_t>(r.name)]
                           : step             ? "(step itself)"
                                              : "(between ops)";
    const std::string mod = r.module >= 0 && !step ? rec.modules[static_cast<size_t>(r.module)] : "-";
    const profile::Phase phase = step ? profile::Phase::Other : r.phase;
    ProfileRow& row = rows[{op, mod, static_cast<int>(phase)}];
    row.op = op;
    row.module = mod;
    row.phase = phase;
    row.calls += r.kind == Kind::Op ? 1 : 0;
    row.ms += ms;
    row.host_ms += self.host[i];
    row.flops += r.flops;
    row.bytes += r.bytes;
    row.launches += static_cast<double>(self.launches[i]);
    rep.phase_ms[static_cast<int>(phase)] += ms;
    const int col = phase == profile::Phase::Forward ? 0 : phase == profile::Phase::Backward ? 1 : 2;
    (r.module >= 0 && !step ? module_ms[static_cast<size_t>(r.module)] : outside_ms)[static_cast<size_t>(col)] += ms;
  }
  const double steps = rep.steps > 0 ? static_cast<double>(rep.steps) : 1.0;
  add_rows_per_step(rows, steps, rep);
  rep.step_ms /= steps;
  rep.step_device_ms /= steps;
  rep.step_launches /= steps;
  for (double& p : rep.phase_ms) p /= steps;
  add_module_rows(rec, module_ms, outside_ms, steps, rep);
  return rep;
}

namespace {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string ms_str(double ms) { return ms >= 100 ? fmt("%.1f", ms) : ms >= 1 ? fmt("%.2f", ms) : fmt("%.3f", ms); }

}  // namespace

std::string ProfileReport::table(size_t max_rows) const {
  std::string s;
  const double total = timed_ms() > 0 ? timed_ms() : 1;
  const char* clock = !device_timed ? "host clock" : emulated ? "EMULATED device clock" : "GPU clock (CUDA events)";
  s += "profile: " + std::to_string(steps) + " step(s) on " + device + ", " + ms_str(step_ms) + " ms per step (wall)";
  if (device_timed) s += ", " + ms_str(step_device_ms) + " ms per step on the device's stream";
  s += "; peak memory in use " + fmt("%.1f", static_cast<double>(peak_bytes) / (1 << 20)) + " MiB\n";
  s += std::string("times are per step, on the ") + clock + "; each op's own time (nested ops in their own rows)";
  if (device_timed) s += "; host ms is the time the host spent in the op (launching it)";
  s += "\n";
  if (emulated)
    s += "EMULATED device: its times are those of the CPU running the emulator, a check of attribution, never a GPU's speed\n";
  if (device_timed)
    s += "(step itself): the step's time outside its ops; its host ms is mostly the wait for the device at the step's end\n";
  if (device_timed) s += "profiled steps ran eagerly (a CUDA graph, when on, replays a step as one launch outside profiling)\n";
  if (launches_counted)
    s += "launches: kernels and cuBLAS GEMMs the op launched itself, " + fmt("%.0f", step_launches) + " per step in all\n";
  s += "\n| op | module | phase | calls | " + std::string(device_timed ? "device ms" : "ms") + " | % step |" +
       (device_timed ? " host ms |" : "") + (launches_counted ? " launches |" : "") + " GFLOP/s | GB/s |\n";
  s += std::string("|---|---|---|---|---|---|") + (device_timed ? "---|" : "") + (launches_counted ? "---|" : "") +
       "---|---|\n";
  size_t shown = 0;
  double rest_ms = 0, rest_launches = 0;
  size_t rest = 0;
  for (const ProfileRow& r : ops) {
    if (shown >= max_rows || r.ms / total < 0.0005) {
      rest_ms += r.ms;
      rest_launches += r.launches;
      ++rest;
      continue;
    }
    ++shown;
    s += "| " + r.op + " | " + r.module + " | " + profile::phase_name(r.phase) + " | " + fmt("%.0f", r.calls) + " | " +
         ms_str(r.ms) + " | " + fmt("%.1f", 100 * r.ms / total) + " |" + (device_timed ? " " + ms_str(r.host_ms) + " |" : "") +
         (launches_counted ? " " + fmt("%.0f", r.launches) + " |" : "") + " " +
         (r.gflops() > 0 ? fmt("%.1f", r.gflops()) : "-") + " | " +
         (r.gflops() == 0 && r.gbytes() > 0 ? fmt("%.1f", r.gbytes()) : "-") + " |\n";
  }
  if (rest > 0)
    s += "| (" + std::to_string(rest) + " more rows) | | | | " + ms_str(rest_ms) + " | " + fmt("%.1f", 100 * rest_ms / total) +
         " |" + (device_timed ? " |" : "") + (launches_counted ? " " + fmt("%.0f", rest_launches) + " |" : "") + " | |\n";
  s += "\n| module (with its sub-modules) | forward ms | backward ms | other ms | total ms | % step |\n|---|---|---|---|---|---|\n";
  for (const ProfileModuleRow& m : modules) {
    if (m.total_ms() == 0) continue;
    s += "| " + m.module + " | " + ms_str(m.forward_ms) + " | " + ms_str(m.backward_ms) + " | " + ms_str(m.other_ms) + " | " +
         ms_str(m.total_ms()) + " | " + fmt("%.1f", 100 * m.total_ms() / total) + " |\n";
  }
  s += "\n| phase | ms | % step |\n|---|---|---|\n";
  for (int p = 0; p < profile::kPhases; ++p)
    s += std::string("| ") + profile::phase_name(static_cast<profile::Phase>(p)) + " | " + ms_str(phase_ms[p]) + " | " +
         fmt("%.1f", 100 * phase_ms[p] / total) + " |\n";
  return s;
}

std::string trace_json(const profile::Recording& rec) {
  using nlohmann::json;
  json events = json::array();
  const int tracks = rec.device_timed ? 2 : 1;
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", "tcn"}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1}, {"args", {{"name", "host"}}}});
  if (rec.device_timed)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 2},
                      {"args", {{"name", rec.device.str() + " stream" + (rec.emulated ? " (EMULATED)" : "")}}}});
  // The name a range shows: an op's, a module's path, "step N", a phase's.
  std::vector<std::string> names(rec.ranges.size());
  int64_t step = 0;
  for (size_t i = 0; i < rec.ranges.size(); ++i) {
    const Range& r = rec.ranges[i];
    names[i] = r.kind == Kind::Module ? rec.modules[static_cast<size_t>(r.module)]
               : r.kind == Kind::Step ? "step " + std::to_string(++step)
                                      : rec.names[static_cast<size_t>(r.name)];
  }
  // Begin and end events, per track, in the order of a depth-first walk of the
  // range tree: each range's end comes before the next range that is not inside it.
  for (int tid = 1; tid <= tracks; ++tid) {
    auto ts = [&](const Range& r, bool end) {
      return tid == 1 ? static_cast<double>(end ? r.host_end_ns : r.host_begin_ns) / 1e3
                      : (end ? r.dev_end_ms : r.dev_begin_ms) * 1e3;
    };
    std::vector<int32_t> open;
    auto close_to = [&](int32_t parent) {
      while (!open.empty() && open.back() != parent) {
        const Range& r = rec.ranges[static_cast<size_t>(open.back())];
        events.push_back({{"name", names[static_cast<size_t>(open.back())]}, {"ph", "E"}, {"pid", 1}, {"tid", tid},
                          {"ts", ts(r, true)}});
        open.pop_back();
      }
    };
    for (size_t i = 0; i < rec.ranges.size(); ++i) {
      const Range& r = rec.ranges[i];
      close_to(r.parent);
      json args = {{"phase", profile::phase_name(r.phase)},
                   {"module", r.module >= 0 ? rec.modules[static_cast<size_t>(r.module)] : "-"}};
      if (r.flops > 0) args["flops"] = r.flops;
      if (r.bytes > 0) args["bytes"] = r.bytes;
      const char* cat = r.kind == Kind::Op ? "op" : r.kind == Kind::Module ? "module" : r.kind == Kind::Step ? "step" : "phase";
      events.push_back({{"name", names[i]}, {"cat", cat}, {"ph", "B"}, {"pid", 1}, {"tid", tid}, {"ts", ts(r, false)},
                        {"args", args}});
      open.push_back(static_cast<int32_t>(i));
    }
    close_to(-1);
  }
  return json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

}  // namespace tcn::nn
