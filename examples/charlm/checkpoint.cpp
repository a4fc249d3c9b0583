#include "checkpoint.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "flags.h"

namespace charlm {

using namespace tcn;
using nlohmann::json;

json TrainState::to_json(const Generator& g) const {
  return {{"epoch", epoch},           {"next_batch", next_batch}, {"step", step},
          {"lr", lr},                 {"best_vloss", std::isfinite(best_vloss) ? json(best_vloss) : json(nullptr)},
          {"vlosses", vlosses},       {"dropout_seed", g.seed()}, {"dropout_offset", g.offset()}};
}

MetricsLog::MetricsLog(const std::string& path, bool append, Tokens kind) : path_(path), kind_(kind) {
  if (path.empty()) return;
  auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  TCN_CHECK(!ec, "--metrics ", path, ": cannot create ", parent.string(), " (", ec.message(), ")");
  bool fresh = !append || !std::filesystem::exists(path);
  f_.open(path, fresh ? std::ios::trunc : std::ios::app);
  TCN_CHECK(f_.good(), "--metrics ", path, ": cannot open for writing (", std::strerror(errno), ")");
  if (fresh)
    f_ << "event,epoch,step,lr,loss," << score_name(kind) << ",ms_per_batch," << rate_unit(kind) << "_per_sec,elapsed_s\n";
  flush();
}

void MetricsLog::row(const char* event, int64_t epoch, int64_t step, double lr, double loss, double ms, double cps,
                     double elapsed) {
  if (!f_.is_open()) return;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s,%lld,%lld,%.6g,%.6f,%.6f,%.2f,%.1f,%.1f\n", event, static_cast<long long>(epoch),
                static_cast<long long>(step), lr, loss, score(kind_, loss), ms, cps, elapsed);
  f_ << buf;
  flush();
}

void MetricsLog::close() {
  if (!f_.is_open()) return;
  f_.close();
  TCN_CHECK(!f_.fail(), "--metrics ", path_, ": closing failed (", std::strerror(errno), ")");
}

void MetricsLog::flush() {
  errno = 0;
  f_.flush();
  TCN_CHECK(f_.good(), "--metrics ", path_, ": write failed (", errno ? std::strerror(errno) : "I/O error", ")");
}

std::string last_path(const std::string& save) {
  const std::string ext = ".safetensors";
  std::string stem = save.size() > ext.size() && save.compare(save.size() - ext.size(), ext.size(), ext) == 0
                         ? save.substr(0, save.size() - ext.size())
                         : save;
  return stem + ".last.safetensors";
}

void save_checkpoint(const std::string& path, const nn::CharLM& model, const Vocab& vocab, const nn::Optimizer& opt,
                     const TrainState& st, const Generator& g, const TrainOptions& o,
                     const nn::NamedTensors& carried) {
  json options{{"optim", o.optim}, {"batch_size", o.batch_size}, {"seq_len", o.seq_len},
               {"validseqlen", o.validseqlen}, {"clip", o.clip}, {"seed", o.seed}};
  if (o.model == "lstm") options["lstm_state"] = o.lstm_state;
  nn::Metadata meta{{"train_state", st.to_json(g).dump()}, {"train_options", options.dump()},
                    {"tokens", tokens_name(vocab.kind)}};
  nn::NamedTensors extra = carried;
  for (auto& [name, t] : opt.state()) extra.emplace_back("optim." + name, t);
  nn::save_char_lm(path, model, vocab.tokens, meta, extra);
}

namespace {

// Checked reads of a checkpoint's train_state / train_options JSON: a missing
// key, a wrong type or a value out of range is an error naming the file, the
// key and the range, never a wild index or an exception from deep inside.
struct JsonReader {
  std::string what;  // e.g. "--resume m.last.safetensors: train_state"
  json js;
  JsonReader(const std::string& w, const nn::Metadata& meta, const std::string& key) : what(w + ": " + key) {
    auto it = meta.find(key);
    TCN_CHECK(it != meta.end(), w, ": the checkpoint has no ", key,
              " (not a checkpoint written by charlm train --save; to start from its weights only, use --init)");
    try {
      js = json::parse(it->second);
    } catch (const std::exception&) {
      TCN_FAIL(what, " is not valid JSON");
    }
    TCN_CHECK(js.is_object(), what, " is not a JSON object");
  }
  const json& at(const char* key) const {
    TCN_CHECK(js.contains(key), what, " has no \"", key, "\"");
    return js.at(key);
  }
  int64_t integer(const char* key, int64_t lo, int64_t hi) const {
    const json& v = at(key);
    TCN_CHECK(v.is_number_integer(), what, ".", key, " must be an integer, got ", v.dump());
    TCN_CHECK(!(v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) && v.get<int64_t>() >= lo &&
                  v.get<int64_t>() <= hi,
              what, ".", key, " must be in ", limits::range(lo, hi), ", got ", v.dump());
    return v.get<int64_t>();
  }
  uint64_t unsigned_integer(const char* key) const {
    const json& v = at(key);
    TCN_CHECK(v.is_number_unsigned(), what, ".", key, " must be an integer in [0, 2^64 - 1], got ", v.dump());
    return v.get<uint64_t>();
  }
  static bool finite_number(const json& v, double lo) {
    return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= lo;
  }
  double real(const char* key, double lo, double hi, bool lo_open) const {
    const json& v = at(key);
    const double x = v.is_number() ? v.get<double>() : std::nan("");
    TCN_CHECK(v.is_number() && std::isfinite(x) && (lo_open ? x > lo : x >= lo) && x <= hi, what, ".", key,
              " must be a number in ", lo_open ? "(" : "[", lo, ", ", hi, "], got ", v.dump());
    return x;
  }
  std::string string(const char* key) const {
    const json& v = at(key);
    TCN_CHECK(v.is_string(), what, ".", key, " must be a string, got ", v.dump());
    return v.get<std::string>();
  }
};

}  // namespace

// The resuming run must train as the checkpoint's did: the same streams, windows and optimizer.
void check_train_options(const TrainOptions& o, const nn::Metadata& meta) {
  JsonReader r("--resume " + o.resume, meta, "train_options");
  const std::string optim = r.string("optim");
  TCN_CHECK(optim == o.optim, "--resume ", o.resume, ": the checkpoint was trained with --optim ", optim,
            ", this run has --optim ", o.optim);
  auto same = [&](const char* key, const char* flag, int64_t mine) {
    const int64_t theirs = r.integer(key, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
    TCN_CHECK(theirs == mine, "--resume ", o.resume, ": the checkpoint was trained with ", flag, " ", theirs,
              ", this run has ", flag, " ", mine);
  };
  // The protocol first: it decides the windows' default lengths, checked next.
  if (o.model == "lstm") {
    const std::string theirs = r.js.contains("lstm_state") ? r.string("lstm_state") : "reset";
    TCN_CHECK(theirs == o.lstm_state, "--resume ", o.resume, ": the checkpoint was trained with --lstm_state ", theirs,
              ", this run has --lstm_state ", o.lstm_state,
              theirs == "reset" && !r.js.contains("lstm_state") ? " (it predates the flag: the LSTM then always reset)"
                                                              : "");
  }
  same("batch_size", "--batch_size", o.batch_size);
  same("seq_len", "--seq_len", o.seq_len);
  same("validseqlen", "--validseqlen", o.validseqlen);
}

std::string trained_lstm_state(const nn::Metadata& meta, const std::string& what) {
  if (meta.find("train_options") == meta.end()) return "carry";  // not ours (a PyTorch state_dict): PyTorch's protocol
  JsonReader r(what, meta, "train_options");
  if (!r.js.contains("lstm_state")) return "reset";
  const std::string s = r.string("lstm_state");
  TCN_CHECK(s == "carry" || s == "reset", r.what, ".lstm_state must be carry or reset, got \"", s, "\"");
  return s;
}

TrainState read_train_state(const TrainOptions& o, const nn::Metadata& meta, size_t windows_per_epoch,
                            uint64_t& dropout_seed, uint64_t& dropout_offset) {
  JsonReader r("--resume " + o.resume, meta, "train_state");
  TrainState st;
  st.epoch = r.integer("epoch", 1, limits::kMaxEpochs + 1);
  st.next_batch = r.integer("next_batch", 0, static_cast<int64_t>(windows_per_epoch));
  st.step = r.integer("step", 0, limits::kMaxCount);
  st.lr = r.real("lr", 0, limits::kMaxLr, true);
  const json& best = r.at("best_vloss");
  TCN_CHECK(best.is_null() || JsonReader::finite_number(best, 0), r.what,
            ".best_vloss must be null or a finite number >= 0, got ", best.dump());
  if (!best.is_null()) st.best_vloss = best.get<double>();
  const json& vl = r.at("vlosses");
  TCN_CHECK(vl.is_array(), r.what, ".vlosses must be an array, got ", vl.dump());
  for (const json& v : vl) {
    TCN_CHECK(JsonReader::finite_number(v, 0), r.what, ".vlosses must hold finite numbers >= 0, got ", v.dump());
    st.vlosses.push_back(v.get<double>());
  }
  TCN_CHECK(static_cast<int64_t>(st.vlosses.size()) < st.epoch, r.what, ".vlosses holds ", st.vlosses.size(),
            " epochs' losses but the checkpoint is at epoch ", st.epoch);
  dropout_seed = r.unsigned_integer("dropout_seed");
  dropout_offset = r.unsigned_integer("dropout_offset");
  return st;
}

void check_resume_metadata(const TrainOptions& o, const nn::Metadata& meta, size_t windows_per_epoch) {
  uint64_t seed = 0, offset = 0;
  check_train_options(o, meta);
  read_train_state(o, meta, windows_per_epoch, seed, offset);
}

}  // namespace charlm
