// The char-LM trainer: data preparation as the reference, exact resume,
// incremental generation against full recompute, and every bad input.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "examples/charlm/bench.h"
#include "examples/charlm/carry.h"
#include "examples/charlm/checkpoint.h"
#include "examples/charlm/data.h"
#include "examples/charlm/generate.h"
#include "helpers.h"
#include "examples/charlm/train.h"

using namespace tcn;
using namespace charlm;
namespace fs = std::filesystem;
using tcn::test::close_ratio;
using tcn::test::synthetic_text;
using tcn::test::TempDir;

namespace {

void write(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

void write_corpus(const TempDir& d, size_t train = 6000, size_t other = 1500) {
  tcn::test::write_corpus(d.str(), train, other);
}

TrainOptions small_options(const TempDir& d) {
  TrainOptions o;
  o.model = "tcn";
  o.batch_size = 4;
  o.seq_len = 40;
  o.validseqlen = 30;
  o.emsize = 8;
  o.nhid = 12;
  o.levels = 2;
  o.ksize = 3;
  o.lr = 0.5;
  o.log_interval = 1;
  o.device = "cpu";
  o.data = d.str();
  o.eval_batch_size = 2;
  o.quiet = true;
  return o;
}

// "train,epoch,step,lr,loss": the row without the timing columns.
std::vector<std::string> loss_rows(const std::string& csv) {
  std::ifstream f(csv);
  std::vector<std::string> rows;
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("train,", 0) != 0) continue;
    std::stringstream ss(line);
    std::string field, kept;
    for (int i = 0; i < 5 && std::getline(ss, field, ','); ++i) kept += field + ",";
    rows.push_back(kept);
  }
  return rows;
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Copies the safetensors file `src` to `dst` with its __metadata__ edited by
// `edit` (the header format of nn/safetensors.h: 8-byte little-endian length,
// JSON, data; the data offsets are relative to the data, so they stay valid).
void rewrite_metadata(const std::string& src, const std::string& dst,
                      const std::function<void(nlohmann::json& meta)>& edit) {
  const std::string bytes = read_bytes(src);
  REQUIRE(bytes.size() >= 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  REQUIRE(8 + n <= bytes.size());
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  edit(header["__metadata__"]);
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  write(dst, out + h + bytes.substr(8 + n));
}

// The same, editing one field of the JSON held in metadata[key].
void rewrite_field(const std::string& src, const std::string& dst, const std::string& key,
                   const std::string& field, const nlohmann::json& value) {
  rewrite_metadata(src, dst, [&](nlohmann::json& meta) {
    nlohmann::json j = nlohmann::json::parse(meta.at(key).get<std::string>());
    if (value.is_discarded()) j.erase(field);
    else j[field] = value;
    meta[key] = j.dump();
  });
}

// Trains `full` (full.* in `d`), then the same run stopped after `stop` steps (part.*) and
// resumed from part.last.safetensors to full.max_steps. The two must agree bit for bit: the
// losses, and every tensor of their last checkpoints (the parameters, the optimizer's state,
// a carrying LSTM's state). Returns the uninterrupted run's loss rows.
std::vector<std::string> check_exact_resume(TrainOptions full, int64_t stop, const TempDir& d) {
  full.save = d.file("full.safetensors");
  full.metrics = d.file("full.csv");
  REQUIRE(run_train(full) == 0);
  TrainOptions part = full;
  part.max_steps = stop;
  part.save = d.file("part.safetensors");
  part.metrics = d.file("part.csv");
  REQUIRE(run_train(part) == 0);
  part.max_steps = full.max_steps;
  part.resume = d.file("part.last.safetensors");
  REQUIRE(run_train(part) == 0);
  const std::vector<std::string> rows = loss_rows(full.metrics);
  REQUIRE(rows.size() == static_cast<size_t>(full.max_steps));
  CHECK(loss_rows(part.metrics) == rows);  // the resumed run appended its steps to the same CSV
  const nn::SafetensorsContents a = nn::load_safetensors(d.file("full.last.safetensors"));
  const nn::SafetensorsContents b = nn::load_safetensors(d.file("part.last.safetensors"));
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (const auto& entry : a.tensors) {
    const std::string& name = entry.first;  // (CHECK_MESSAGE captures it: no structured binding for clang 14)
    CHECK_MESSAGE(entry.second.to_vector<double>() == b.at(name).to_vector<double>(), name);
  }
  return rows;
}

}  // namespace

TEST_SUITE("charlm") {

TEST_CASE("windows, batches and vocabulary follow the reference") {
  // L = 1000, seq_len 400, validseqlen 320: starts 0, 320, 640 (len 359); 960 is skipped.
  auto w = windows(1000, 400, 320);
  REQUIRE(w.size() == 3);
  CHECK(w[0].start == 0);
  CHECK(w[0].len == 400);
  CHECK(w[1].start == 320);
  CHECK(w[2].start == 640);
  CHECK(w[2].len == 359);
  std::vector<int64_t> data(23);
  for (int i = 0; i < 23; ++i) data[i] = i;
  Tensor src = batchify(data, 3, 5, "x");  // 7 per stream, the last 2 dropped
  CHECK(src.shape() == Shape{3, 7});
  CHECK(src.narrow(0, 1, 1).to_vector<int64_t>() == std::vector<int64_t>{7, 8, 9, 10, 11, 12, 13});
  auto [inp, tgt] = get_batch(src, {2, 3});
  CHECK(inp.narrow(0, 0, 1).to_vector<int64_t>() == std::vector<int64_t>{2, 3, 4});
  CHECK(tgt.narrow(0, 0, 1).to_vector<int64_t>() == std::vector<int64_t>{3, 4, 5});
  TempDir d;
  write(d.file("ptb.train.txt"), "cab");
  write(d.file("ptb.valid.txt"), "b a");
  write(d.file("ptb.test.txt"), "abc\n");
  Corpus c = load_corpus(d.str());
  CHECK(c.vocab.tokens == std::vector<std::string>{"\n", " ", "a", "b", "c"});  // sorted
  CHECK(c.vocab.encode("cab", "t") == std::vector<int64_t>{4, 2, 3});
}

TEST_CASE("words: <eos> after every line, vocabulary in order of first appearance, unknown words named") {
  CHECK(split_words("a  b\n\nc\td") == std::vector<std::string>{"a", "b", kEos, kEos, "c", "d", kEos});
  CHECK(split_words("x") == std::vector<std::string>{"x", kEos});  // a last line without its newline
  TempDir d;
  write(d.file("ptb.train.txt"), " the cat\n sat\n");
  write(d.file("ptb.valid.txt"), " a cat\n");
  write(d.file("ptb.test.txt"), " the mat\n");
  Corpus c = load_corpus(d.str(), Tokens::Words);
  CHECK(c.vocab.tokens == std::vector<std::string>{"the", "cat", kEos, "sat", "a", "mat"});
  CHECK(c.vocab.encode(c.test, "t") == std::vector<int64_t>{0, 5, 2});
  CHECK(c.vocab.decode(3) == "sat");
  CHECK_ERROR(c.vocab.encode("the dog sat", "ptb.test.txt"),
              "ptb.test.txt: word 'dog' (word 1) is not in the model's vocabulary of 6 words");
  CHECK(score(Tokens::Words, std::log(88.68)) == doctest::Approx(88.68));
  CHECK(score(Tokens::Chars, std::log(2.0)) == doctest::Approx(1.0));
  CHECK(parse_tokens("word") == Tokens::Words);
  CHECK_ERROR(parse_tokens("bytes"), "bytes");
}

TEST_CASE("a word-level model trains, checkpoints its tokens, evaluates and resumes") {
  TempDir d;
  write_corpus(d, 20000, 4000);
  TrainOptions o = small_options(d);
  o.tokens = "word";
  o.seq_len = 12;
  o.validseqlen = 6;
  o.max_steps = 8;
  o.lr = 1.0;
  o.save = d.file("w.safetensors");
  o.metrics = d.file("w.csv");
  REQUIRE(run_train(o) == 0);
  auto loaded = nn::load_char_lm(d.file("w.last.safetensors"), charlm::kTrainingTensors);
  CHECK(checkpoint_tokens(loaded.file.metadata) == "word");
  // The 9 synthetic words and <eos> (and a word cut short at the end of a file).
  CHECK(loaded.vocab.size() >= 10);
  CHECK(std::find(loaded.vocab.begin(), loaded.vocab.end(), kEos) != loaded.vocab.end());
  auto rows = loss_rows(o.metrics);
  REQUIRE(rows.size() == 8);
  auto loss_of = [](const std::string& row) { return std::stod(row.substr(row.rfind(',', row.size() - 2) + 1)); };
  CHECK(loss_of(rows.back()) < loss_of(rows.front()));
  EvalOptions e;
  e.checkpoint = d.file("w.safetensors");
  e.data = d.str();
  e.seq_len = 12;
  e.validseqlen = 6;
  e.device = "cpu";
  CHECK(run_eval(e) == 0);
  // A character run cannot resume a word checkpoint.
  TrainOptions chars = small_options(d);
  chars.max_steps = 9;
  chars.resume = d.file("w.last.safetensors");
  chars.seq_len = 12;
  chars.validseqlen = 6;
  CHECK_THROWS(run_train(chars));
}

TEST_CASE("bad data: missing, empty, too short, unknown character") {
  TempDir d;
  CHECK_ERROR(load_corpus(d.str()), "ptb.train.txt: the data directory must hold ptb.train.txt");
  write_corpus(d);
  write(d.file("ptb.valid.txt"), "");
  CHECK_ERROR(load_corpus(d.str()), "ptb.valid.txt is empty");
  CHECK_ERROR(batchify(std::vector<int64_t>(100, 0), 32, 400, "ptb.train.txt"),
              "ptb.train.txt has 100 tokens: too short for 32 streams of at least 401 tokens");
  Vocab v = Vocab::from_chars({"a", "b"});
  CHECK_ERROR(v.encode("abz", "ptb.test.txt"), "ptb.test.txt: character 'z' at offset 2 is not in the model's vocabulary of 2 characters");
}

TEST_CASE("training lowers the loss, and a resumed run continues exactly") {
  TempDir d;
  write_corpus(d);
  TrainOptions full = small_options(d);
  full.max_steps = 12;  // crosses an epoch end (about 5 windows per epoch)
  const std::vector<std::string> a = check_exact_resume(full, 3, d);
  // Learning happened: the last loss is below the first.
  auto loss_of = [](const std::string& row) { return std::stod(row.substr(row.rfind(',', row.size() - 2) + 1)); };
  CHECK(loss_of(a.back()) < loss_of(a.front()));
}

TrainOptions carry_options(const TempDir& d) {
  TrainOptions o = small_options(d);
  o.model = "lstm";
  o.nhid = 10;
  o.seq_len = o.validseqlen = 30;  // --lstm_state carry (the default): windows that do not overlap
  return o;
}

TEST_CASE("--lstm_state carry: two windows from the carried state equal one long window") {
  nn::LSTMCharLM model(nn::LSTMConfig{.vocab_size = 7, .emsize = 5, .nhid = 6, .layers = 2}, 3);
  model.eval();
  Generator g(5);
  std::vector<int64_t> ids;
  for (double u : rand({3, 24}, {DType::F64}, g).to_vector<double>()) ids.push_back(static_cast<int64_t>(u * 7));
  const Tensor tokens = from_vector<int64_t>(ids, {3, 24});
  autograd::NoGrad ng;
  CarriedState carry(model, 3);
  Tensor a = carry.forward(tokens.narrow(1, 0, 10).contiguous());
  Tensor b = carry.forward(tokens.narrow(1, 10, 14).contiguous());
  Tensor whole = model.forward(tokens);
  CHECK(close_ratio(cat({a, b}, 1), whole, 1e-6, 1e-6) <= 1);
  // Reset: the next window starts from zeros again, as a fresh model call does.
  carry.reset();
  CHECK(close_ratio(carry.forward(tokens.narrow(1, 0, 10).contiguous()), a, 0, 0) == 0);
  // Without the carry the second window differs: the check above can fail.
  CHECK(close_ratio(model.forward(tokens.narrow(1, 10, 14).contiguous()), b, 1e-3, 0) > 1);
  nn::TCNCharLM tcn_model(nn::TCNConfig{.vocab_size = 7, .emsize = 4, .nhid = 5, .levels = 1}, 3);
  CHECK_ERROR(CarriedState(tcn_model, 3), "only an LSTM has a state to carry; this model is a tcn");

  // evaluate() carrying the state through windows of 5 scores what one pass over the whole split does.
  const Tensor source = tokens.narrow(1, 0, 21).contiguous();  // 3 streams: windows 0-4, 5-9, 10-14, 15-19
  const double carried = evaluate(model, source, 5, 5, 0, true);
  const Tensor logits = model.forward(source.narrow(1, 0, 20).contiguous());
  const double one_pass = cross_entropy(logits, source.narrow(1, 1, 20).contiguous()).item();
  CHECK(std::abs(carried - one_pass) <= 1e-6 * std::abs(one_pass));
  CHECK(std::abs(evaluate(model, source, 5, 5, 0, false) - one_pass) > 1e-4);  // from zeros in every window: not the same
}

TEST_CASE("--lstm_state carry trains differently from reset, resumes exactly mid-epoch, and checks its checkpoint") {
  TempDir d;
  write_corpus(d, 600, 300);  // 150 characters per stream: 4 windows of 30 per epoch, and a short one
  TrainOptions carry = carry_options(d), reset = carry_options(d);
  carry.max_steps = reset.max_steps = 12;  // crosses two epoch ends
  reset.lstm_state = "reset";
  reset.metrics = d.file("reset.csv");
  // Stopped after 7 steps, mid-epoch: the checkpoint holds the streams' state.
  const std::vector<std::string> a = check_exact_resume(carry, 7, d);
  int carried = 0;  // ... which the comparison above covered
  for (const auto& entry : nn::load_safetensors(d.file("part.last.safetensors")).tensors)
    carried += entry.first.starts_with("carry.") ? 1 : 0;
  CHECK(carried == 2);
  REQUIRE(run_train(reset) == 0);
  const std::vector<std::string> r = loss_rows(reset.metrics);
  REQUIRE(r.size() == 12);
  CHECK(a[0] == r[0]);  // the first window starts from zeros in both
  CHECK(a[1] != r[1]);  // the second reads the first's state only when carried
  TrainOptions first = carry_options(d);
  first.max_steps = 7;
  first.save = d.file("part.safetensors");
  first.metrics = d.file("part.csv");
  TrainOptions second = first;
  second.max_steps = 12;

  // The checkpoint says how it was trained, and holds the state it needs.
  TrainOptions wrong = second;
  wrong.resume = d.file("part.last.safetensors");
  REQUIRE(run_train(first) == 0);  // part.last is at step 7 again
  wrong.lstm_state = "reset";
  CHECK_ERROR(run_train(wrong), "the checkpoint was trained with --lstm_state carry, this run has --lstm_state reset");
  {
    nn::SafetensorsContents f = nn::load_safetensors(d.file("part.last.safetensors"));
    nn::NamedTensors kept;
    for (auto& [name, t] : f.tensors)
      if (!name.starts_with("carry.")) kept.emplace_back(name, t);
    nn::save_safetensors(d.file("no_carry.safetensors"), kept, f.metadata);
  }
  TrainOptions missing = second;
  missing.resume = d.file("no_carry.safetensors");
  CHECK_ERROR(run_train(missing), "no 'carry.h': the checkpoint says its LSTM carried its state");
  // A checkpoint from before the flag trained the LSTM from zeros in every window; eval follows each file's protocol.
  rewrite_field(d.file("part.last.safetensors"), d.file("old.safetensors"), "train_options", "lstm_state",
                nlohmann::json(nlohmann::json::value_t::discarded));
  missing.resume = d.file("old.safetensors");
  CHECK_ERROR(run_train(missing), "trained with --lstm_state reset, this run has --lstm_state carry (it predates the flag");
  CHECK(trained_lstm_state(nn::load_safetensors(d.file("old.safetensors")).metadata, "old") == "reset");
  CHECK(trained_lstm_state(nn::load_safetensors(d.file("part.last.safetensors")).metadata, "part") == "carry");
  CHECK(trained_lstm_state(nn::Metadata{}, "a PyTorch state_dict") == "carry");
  TrainOptions overlap = carry_options(d);
  overlap.seq_len = 40;
  CHECK_ERROR(run_train(overlap), "--lstm_state carry: windows do not overlap, so --seq_len (40) must equal --validseqlen (30)");
  int64_t s = 100, v = 320;
  carry_windows(s, v, true, false);
  CHECK((s == 100 && v == 100));
  s = 400, v = 50;
  carry_windows(s, v, false, true);
  CHECK((s == 50 && v == 50));
  s = 400, v = 320;
  carry_windows(s, v, false, false);
  CHECK((s == 320 && v == 320));
  CHECK_ERROR(carry_windows(s = 100, v = 50, true, true), "must equal --validseqlen (50)");
}

TEST_CASE("the latest checkpoint carries the best loss so far; a run ending on an epoch boundary evaluates once") {
  TempDir d;
  write_corpus(d);
  TrainOptions o = small_options(d);
  o.max_steps = static_cast<int64_t>(windows(6000 / 4, o.seq_len, o.validseqlen).size());  // exactly one epoch
  o.save = d.file("m.safetensors");
  o.metrics = d.file("m.csv");
  REQUIRE(run_train(o) == 0);
  std::ifstream f(o.metrics);
  int valid_rows = 0;
  double best = 1e9;
  for (std::string line; std::getline(f, line);)
    if (line.rfind("valid,", 0) == 0) {
      ++valid_rows;
      std::stringstream ss(line);
      std::string field;
      for (int i = 0; i < 5; ++i) std::getline(ss, field, ',');
      best = std::min(best, std::stod(field));
    }
  CHECK(valid_rows == 1);  // no empty extra epoch after the step limit
  auto last = nn::load_safetensors(d.file("m.last.safetensors"));
  auto state = nlohmann::json::parse(last.metadata.at("train_state"));
  CHECK(state.at("best_vloss").get<double>() == doctest::Approx(best).epsilon(1e-6));
}

TEST_CASE("eval and Dropout validate their arguments") {
  EvalOptions e;
  e.checkpoint = "x";
  e.validseqlen = 0;
  CHECK_ERROR(run_eval(e), "--validseqlen must be in [1, 1000000], got 0");
  Generator g(1);
  CHECK_ERROR(nn::Dropout(-0.1, g), "Dropout: probability must be in [0, 1], got -0.1");
}

TEST_CASE("resume refuses a checkpoint whose config or vocabulary does not match") {
  TempDir d;
  write_corpus(d);
  TrainOptions o = small_options(d);
  o.max_steps = 1;
  o.save = d.file("m.safetensors");
  o.metrics = d.file("m.csv");
  REQUIRE(run_train(o) == 0);
  TrainOptions r = o;
  r.resume = d.file("m.last.safetensors");
  r.nhid = 16;
  CHECK_ERROR(run_train(r), "does not match the flags");
  r = o;
  r.resume = d.file("m.last.safetensors");
  r.model = "lstm";
  r.lstm_state = "reset";  // the TCN's windows
  CHECK_ERROR(run_train(r), "checkpoint holds a tcn model but --model is lstm");
  write(d.file("ptb.test.txt"), synthetic_text(1500, 3) + "Z");  // one more character in the vocabulary
  r = o;
  r.resume = d.file("m.last.safetensors");
  CHECK_ERROR(run_train(r), "vocabulary differs from the data's");
}

TEST_CASE("an unwritable --save path fails before training; NaN loss stops with the step, checkpoint intact") {
  TempDir d;
  write_corpus(d);
  TrainOptions o = small_options(d);
  o.metrics = d.file("x.csv");
  o.save = d.file("no/such/dir/m.safetensors");
  const std::string expected = "--save " + o.save + ": cannot write there";
  CHECK_ERROR(run_train(o), expected.c_str());

  o.save = d.file("m.safetensors");
  o.save_every = 1;
  o.clip = 0;
  o.lr = 1e30;  // diverges within a few steps
  o.max_steps = 50;
  std::string err;
  try {
    run_train(o);
  } catch (const Error& e) {
    err = e.what();
  }
  CHECK(err.find("loss is") != std::string::npos);
  CHECK(err.find("stopping before the update") != std::string::npos);
  CHECK(err.find("m.last.safetensors is intact") != std::string::npos);
  // The last checkpoint loads (it was written atomically before the bad step),
  // at the step before the one named. (Its weights need not be finite: at lr
  // 1e30 the last good step's update overflows them; the loss only shows it next.)
  auto m = nn::load_char_lm(d.file("m.last.safetensors"), charlm::kTrainingTensors);
  CHECK(m.model->num_parameters() > 0);
  const int64_t bad = std::stoll(err.substr(err.find("step ") + 5));
  CHECK(bad >= 1);
  CHECK(nlohmann::json::parse(m.file.metadata.at("train_state")).at("step").get<int64_t>() == bad - 1);

  // The loss is watched without reading it every step (read at log lines and
  // saves); --debug_sync reads it every step: the same step is named, and on a
  // CUDA device (emulated in CI) too.
  std::vector<std::pair<bool, std::string>> variants{{true, "cpu"}};
  if (cuda::is_available()) variants.push_back({false, "cuda"});
  for (const auto& variant : variants) {  // (not a structured binding: INFO captures it, which clang 14 refuses)
    const bool debug_sync = variant.first;
    const std::string& device = variant.second;
    INFO("debug_sync ", debug_sync, ", device ", device);
    TrainOptions v = o;
    v.save = d.file("v.safetensors");
    v.save_every = 0;
    v.log_interval = 20;
    v.debug_sync = debug_sync;
    v.device = device;
    std::string e2;
    try {
      run_train(v);
    } catch (const Error& e) {
      e2 = e.what();
    }
    CHECK(e2.substr(0, e2.find(':')) == err.substr(0, err.find(':')));  // "step N (epoch E, batch B)"
  }
}

// A small TCN trained for `steps` steps on d's corpus, saved as d/m.safetensors; the options it ran with.
TrainOptions train_saved(const TempDir& d, int64_t steps) {
  TrainOptions o = small_options(d);
  o.max_steps = steps;
  o.save = d.file("m.safetensors");
  o.metrics = d.file("m.csv");
  REQUIRE(run_train(o) == 0);
  return o;
}

// `eval` of `checkpoint` on d's corpus with small_options' window.
EvalOptions small_eval(const TempDir& d, const std::string& checkpoint) {
  EvalOptions e;
  e.checkpoint = checkpoint;
  e.data = d.str();
  e.seq_len = 40;
  e.validseqlen = 30;
  e.device = "cpu";
  return e;
}

// A copy of the checkpoint `src` at `dst` with element 0 of tensor `name` set to `value` (checksums recomputed).
void poison_tensor(const std::string& src, const std::string& dst, const std::string& name, double value) {
  nn::SafetensorsContents f = nn::load_safetensors(src);
  bool found = false;
  for (auto& [n, t] : f.tensors) {
    if (n != name) continue;
    Tensor flat = t.to(DType::F64).contiguous();
    std::vector<double> v = flat.to_vector<double>();
    v[0] = value;
    t = from_vector(v, t.shape()).to(t.dtype());
    found = true;
  }
  REQUIRE(found);
  nn::save_safetensors(dst, f.tensors, f.metadata);
}

TEST_CASE("a model with a NaN or inf weight is refused by eval, generate and train --init, naming the tensor; "
          "a non-finite loss is an error, not a score") {
  TempDir d;
  write_corpus(d);
  train_saved(d, 2);
  const std::string w = "tcn.network.0.conv1.weight_v";
  for (double bad : {std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    INFO("value ", bad);
    poison_tensor(d.file("m.safetensors"), d.file("bad.safetensors"), w, bad);
    const std::string why = "tensor '" + w + "' holds a non-finite value";
    const EvalOptions e = small_eval(d, d.file("bad.safetensors"));
    CHECK_ERROR(run_eval(e), ("--checkpoint " + e.checkpoint + ": " + why).c_str());
    GenerateOptions g;
    g.checkpoint = d.file("bad.safetensors");
    g.data = d.str();
    g.n = 5;
    CHECK_ERROR(run_generate(g), why.c_str());
    TrainOptions t = small_options(d);
    t.max_steps = 1;
    t.init = d.file("bad.safetensors");
    CHECK_ERROR(run_train(t), ("--init " + t.init + ": " + why).c_str());
  }
  // Finite weights whose outputs overflow: eval stops instead of printing "bpc nan" or "bpc inf".
  poison_tensor(d.file("m.safetensors"), d.file("big.safetensors"), "tcn.network.0.conv1.weight_g", 3e38);
  CHECK_ERROR(run_eval(small_eval(d, d.file("big.safetensors"))), "(the model's outputs overflow on this data); no score");
}

TEST_CASE("incremental generation matches a full recompute (TCN and LSTM)") {
  nn::TCNConfig tc{.vocab_size = 9, .emsize = 6, .nhid = 10, .levels = 3, .ksize = 3};
  nn::LSTMConfig lc{.vocab_size = 9, .emsize = 6, .nhid = 7, .layers = 2};
  std::vector<std::unique_ptr<nn::CharLM>> models;
  models.push_back(std::make_unique<nn::TCNCharLM>(tc, 4));
  models.push_back(std::make_unique<nn::LSTMCharLM>(lc, 5));
  for (auto& m : models) {
    INFO("model ", m->kind());
    auto inc = make_incremental_stepper(*m);
    auto full = make_full_stepper(*m);
    double worst = 0;
    for (int64_t t = 0; t < 40; ++t) {  // longer than the TCN's receptive field (1 + 2*(1+2+4)*2 = 29)
      auto a = inc->step((t * 7) % 9), b = full->step((t * 7) % 9);
      for (size_t k = 0; k < a.size(); ++k) worst = std::max(worst, static_cast<double>(std::abs(a[k] - b[k])));
    }
    CHECK(worst <= 1e-5);
  }
}

TEST_CASE("eval reports bpc and rejects text outside the vocabulary") {
  TempDir d;
  write_corpus(d);
  train_saved(d, 2);
  const EvalOptions e = small_eval(d, d.file("m.safetensors"));
  CHECK(run_eval(e) == 0);
  write(d.file("ptb.test.txt"), "cat#cat" + synthetic_text(500, 9));
  CHECK_ERROR(run_eval(e), "character '#' at offset 3 is not in the model's vocabulary");
}

TEST_CASE("Adam: a resumed run continues exactly, as SGD does") {
  TempDir d;
  write_corpus(d);
  TrainOptions full = small_options(d);
  full.optim = "Adam";
  full.lr = 0.01;
  full.max_steps = 12;  // crosses an epoch end
  check_exact_resume(full, 3, d);  // every tensor of the checkpoints: the Adam moments too
  int moments = 0;
  for (const auto& entry : nn::load_safetensors(d.file("full.last.safetensors")).tensors)
    moments += entry.first.starts_with("optim.") ? 1 : 0;
  CHECK(moments > 0);
}

TEST_CASE("resume range-checks the checkpoint's train_state and requires the same batch_size, seq_len, validseqlen") {
  TempDir d;
  write_corpus(d);
  TrainOptions o = small_options(d);
  o.max_steps = 3;
  o.save = d.file("m.safetensors");
  o.metrics = d.file("m.csv");
  REQUIRE(run_train(o) == 0);
  const std::string good = d.file("m.last.safetensors"), bad = d.file("bad.safetensors");
  const std::string csv_before = read_bytes(o.metrics), good_before = read_bytes(good);
  TrainOptions r = o;
  r.max_steps = 5;
  r.resume = bad;
  const int64_t nwin = static_cast<int64_t>(windows(6000 / 4, o.seq_len, o.validseqlen).size());
  const std::string range = "[0, " + std::to_string(nwin) + "]";
  const nlohmann::json erase = nlohmann::json(nlohmann::json::value_t::discarded);
  struct Case {
    const char* key;
    const char* field;
    nlohmann::json value;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"train_state", "next_batch", -5, "train_state.next_batch must be in " + range + ", got -5"},
      {"train_state", "next_batch", -100000000, "train_state.next_batch must be in " + range + ", got -100000000"},
      {"train_state", "next_batch", nwin + 1, "train_state.next_batch must be in " + range},
      {"train_state", "next_batch", 1.5, "train_state.next_batch must be an integer, got 1.5"},
      {"train_state", "next_batch", erase, "train_state has no \"next_batch\""},
      {"train_state", "epoch", 0, "train_state.epoch must be in [1, 1000001], got 0"},
      {"train_state", "epoch", "1", "train_state.epoch must be an integer, got \"1\""},
      {"train_state", "step", -1, "train_state.step must be in [0, 1000000000000], got -1"},
      {"train_state", "step", 18446744073709551615ull, "train_state.step must be in [0, 1000000000000]"},
      {"train_state", "lr", -4.0, "train_state.lr must be a number in (0, 1e+30], got -4.0"},
      {"train_state", "lr", nullptr, "train_state.lr must be a number in (0, 1e+30], got null"},
      {"train_state", "best_vloss", -1.0, "train_state.best_vloss must be null or a finite number >= 0"},
      {"train_state", "vlosses", nlohmann::json::array({1.0, "x"}), "train_state.vlosses must hold finite numbers"},
      {"train_state", "vlosses", 3, "train_state.vlosses must be an array"},
      {"train_state", "dropout_seed", -3, "train_state.dropout_seed must be an integer in [0, 2^64 - 1], got -3"},
      {"train_options", "batch_size", 8, "the checkpoint was trained with --batch_size 8, this run has --batch_size 4"},
      {"train_options", "seq_len", 50, "the checkpoint was trained with --seq_len 50, this run has --seq_len 40"},
      {"train_options", "validseqlen", 20,
       "the checkpoint was trained with --validseqlen 20, this run has --validseqlen 30"},
      {"train_options", "optim", "Adam", "the checkpoint was trained with --optim Adam, this run has --optim SGD"},
  };
  for (const Case& c : cases) {
    INFO(c.key, ".", c.field, " = ", c.value.dump());
    rewrite_field(good, bad, c.key, c.field, c.value);
    CHECK_ERROR(run_train(r), ("--resume " + bad + ": " + c.expected).c_str());
  }
  // A different flag than the checkpoint was trained with: both values named.
  TrainOptions f = o;
  f.resume = good;
  f.batch_size = 2;
  CHECK_ERROR(run_train(f), "the checkpoint was trained with --batch_size 4, this run has --batch_size 2");
  f = o;
  f.resume = good;
  f.validseqlen = 20;
  CHECK_ERROR(run_train(f), "the checkpoint was trained with --validseqlen 30, this run has --validseqlen 20");
  // train_state or train_options missing (e.g. a weights-only file), or not JSON: said in words.
  for (const char* key : {"train_state", "train_options"}) {
    rewrite_metadata(good, bad, [&](nlohmann::json& meta) { meta.erase(key); });
    CHECK_ERROR(run_train(r), ("--resume " + bad + ": the checkpoint has no " + key).c_str());
    rewrite_metadata(good, bad, [&](nlohmann::json& meta) { meta[key] = "{not json"; });
    CHECK_ERROR(run_train(r), ("--resume " + bad + ": " + key + " is not valid JSON").c_str());
  }
  // None of the failures touched the run's files; the real checkpoint still resumes.
  CHECK(read_bytes(o.metrics) == csv_before);
  CHECK(read_bytes(good) == good_before);
  r.resume = good;
  CHECK(run_train(r) == 0);
}

TEST_CASE("data files and checkpoints: a FIFO, a device or a directory is refused before reading") {
  TempDir d;
  write_corpus(d);
  TrainOptions o = small_options(d);
  o.max_steps = 1;
  o.save = d.file("m.safetensors");
  o.metrics = d.file("m.csv");
  REQUIRE(run_train(o) == 0);
  fs::remove(d.file("ptb.train.txt"));
  REQUIRE(::mkfifo(d.file("ptb.train.txt").c_str(), 0600) == 0);  // no writer: opening it plainly would block
  CHECK_ERROR(load_corpus(d.str()), "ptb.train.txt is not a regular file (a FIFO)");
  CHECK_ERROR(run_train(o), "ptb.train.txt is not a regular file (a FIFO)");
  EvalOptions e;
  e.checkpoint = d.file("m.safetensors");
  e.data = d.str();
  e.split = "train";
  e.seq_len = 40;
  e.validseqlen = 30;
  e.device = "cpu";
  CHECK_ERROR(run_eval(e), "ptb.train.txt is not a regular file (a FIFO)");
  fs::remove(d.file("ptb.train.txt"));
  fs::create_directory(d.file("ptb.train.txt"));
  CHECK_ERROR(load_corpus(d.str()), "ptb.train.txt is not a regular file (a directory)");
  CHECK_ERROR(read_data_file("/dev/zero"), "/dev/zero is not a regular file (a character device)");
  // A checkpoint that is a FIFO: refused before it is opened.
  REQUIRE(::mkfifo(d.file("p.safetensors").c_str(), 0600) == 0);
  e.checkpoint = d.file("p.safetensors");
  CHECK_ERROR(run_eval(e), ("--checkpoint " + d.file("p.safetensors") + " is not a regular file (a FIFO)").c_str());
  GenerateOptions g;
  g.checkpoint = e.checkpoint;
  CHECK_ERROR(run_generate(g), "is not a regular file (a FIFO)");
  fs::remove(d.file("ptb.train.txt"));
  write_corpus(d);
  o.resume = e.checkpoint;
  CHECK_ERROR(run_train(o), ("--resume " + e.checkpoint + " is not a regular file (a FIFO)").c_str());
}

TEST_CASE("output paths are checked before training; a failed run changes no existing file") {
  TempDir d;
  write_corpus(d);
  write(d.file("plain"), "x");
  TrainOptions o = small_options(d);
  o.max_steps = 1;
  o.metrics = d.file("plain/m.csv");  // under a regular file
  CHECK_ERROR(run_train(o), ("--metrics " + o.metrics + ": cannot write there (" + d.file("plain") +
                             " is a regular file)").c_str());
  o.metrics = d.str();
  CHECK_ERROR(run_train(o), "cannot write there (a directory, not a regular file)");
  o.metrics = d.file("m.csv");
  o.save = d.str();
  CHECK_ERROR(run_train(o), ("--save " + d.str() + ": cannot write there (a directory").c_str());
  fs::create_directory(d.file("m.last.safetensors"));  // where the latest state would go
  o.save = d.file("m.safetensors");
  CHECK_ERROR(run_train(o), ("--save " + d.file("m.last.safetensors") + ": cannot write there (a directory").c_str());
  CHECK(!fs::exists(d.file("m.csv")));  // nothing was written before the checks
}

TEST_CASE("every numeric option is range-checked, NaN included (library callers too)") {
  TempDir d;
  TrainOptions t = small_options(d);
  t.clip = std::nan("");
  CHECK_ERROR(run_train(t), "--clip must be in [0, 1e+06] (0: off), got nan");
  t = small_options(d);
  t.lr = INFINITY;
  CHECK_ERROR(run_train(t), "--lr must be in (0, 1e+30], got inf");
  t = small_options(d);
  t.emsize = int64_t{1} << 62;
  CHECK_ERROR(run_train(t), "--emsize must be in [1, 65536], got 4611686018427387904");
  t = small_options(d);
  t.nhid = -5;
  CHECK_ERROR(run_train(t), "--nhid must be in [1, 65536], got -5");
  t = small_options(d);
  t.dropout = std::nan("");
  CHECK_ERROR(run_train(t), "--dropout must be in [0, 1), got nan");
  t = small_options(d);
  t.threads = 100000;
  CHECK_ERROR(run_train(t), "--threads must be in [0, 1024] (0: the default), got 100000");
  EvalOptions e;
  e.checkpoint = "x";
  e.batch_size = -1;
  CHECK_ERROR(run_eval(e), "--batch_size must be in [1, 100000], got -1");
  GenerateOptions g;
  g.checkpoint = "x";
  g.temperature = std::nan("");
  CHECK_ERROR(run_generate(g), "--temperature must be in (0, 1000], got nan");
  BenchOptions b;
  b.steps = 0;  // the median of no step used to read past an empty vector
  CHECK_ERROR(run_bench(b, "charlm"), "--steps must be in [1, 1000000], got 0");
  b = BenchOptions{};
  b.validseqlen = 401;
  CHECK_ERROR(run_bench(b, "charlm"), "--validseqlen 401 must be in [1, --seq_len = 400]");
}

}  // TEST_SUITE
