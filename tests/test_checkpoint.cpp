// safetensors and checkpoints: round trips, and every way a file can be bad
// is a clear error that names the file and the problem, and loads nothing.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "helpers.h"
#include "nn/models.h"
#include "nn/optim.h"

using namespace tcn;
using namespace tcn::nn;
namespace fs = std::filesystem;
using tcn::test::TempDir;

namespace {

std::string read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void write_bytes(const std::string& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::string> entries(const std::string& d) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(d)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TCNConfig small_tcn() { return TCNConfig{.vocab_size = 5, .emsize = 4, .nhid = 6, .levels = 2, .ksize = 3}; }

}  // namespace

TEST_SUITE("checkpoint") {

TEST_CASE("safetensors round trip keeps names, dtypes, shapes, values and metadata") {
  TempDir dir;
  Tensor f = test::rand_tensor({3, 4}, 1, true, -1, 1, DType::F32);  // non-contiguous on purpose
  Tensor d = test::rand_tensor({2}, 2);
  Tensor i = from_vector<int64_t>({7, -1, 3}, {3});
  Tensor s = scalar_tensor(2.5);
  save_safetensors(dir.file("a.safetensors"), {{"f", f}, {"d", d}, {"i", i}, {"s", s}}, {{"k", "v \"quoted\""}});
  CHECK(entries(dir.str()) == std::vector<std::string>{"a.safetensors"});  // no temp file left
  SafetensorsContents c = load_safetensors(dir.file("a.safetensors"));
  CHECK(c.metadata.at("k") == "v \"quoted\"");
  CHECK(c.at("f").dtype() == DType::F32);
  CHECK(c.at("f").to_vector<float>() == f.to_vector<float>());
  CHECK(c.at("d").to_vector<double>() == d.to_vector<double>());
  CHECK(c.at("i").to_vector<int64_t>() == i.to_vector<int64_t>());
  CHECK(c.at("s").shape().empty());
  CHECK(c.at("s").item() == 2.5);
  // The 8-byte length plus the header is a multiple of 8 (aligned data).
  std::string bytes = read_bytes(dir.file("a.safetensors"));
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  CHECK((8 + n) % 8 == 0);
}

TEST_CASE("safetensors tensors come back in file order; Adam state of more than 10 parameters reloads") {
  TempDir dir;
  // Names whose sorted order is not the written order (exp_avg.10 sorts before exp_avg.2).
  NamedTensors written;
  for (int k = 0; k < 12; ++k) written.emplace_back("exp_avg." + std::to_string(k), full({k + 1}, k));
  written.emplace_back("a_last", scalar_tensor(1.0));
  save_safetensors(dir.file("o.safetensors"), written);
  SafetensorsContents c = load_safetensors(dir.file("o.safetensors"));
  REQUIRE(c.tensors.size() == written.size());
  for (size_t k = 0; k < written.size(); ++k) CHECK(c.tensors[k].first == written[k].first);
  // Optimizer state is positional: a model with 12 parameters resumes its Adam moments.
  std::vector<Tensor> params;
  for (int k = 0; k < 12; ++k) params.push_back(full({k + 1}, 0.5).requires_grad_());
  Adam a(params, 0.1), b(params, 0.1);
  for (const Tensor& p : params) p.set_grad(full(p.shape(), 1.0));
  a.step();
  save_safetensors(dir.file("adam.safetensors"), a.state());
  auto loaded = load_safetensors(dir.file("adam.safetensors"));
  b.load_state(loaded.tensors);
  auto sa = a.state(), sb = b.state();
  for (size_t k = 0; k < sa.size(); ++k) CHECK(sb[k].second.to_vector<double>() == sa[k].second.to_vector<double>());
}

TEST_CASE("char-LM checkpoint round trip: same logits, tied weight re-tied") {
  TempDir dir;
  TCNCharLM m(small_tcn(), 3);
  m.eval();
  save_char_lm(dir.file("m.safetensors"), m, {"a", "b", "c", "d", "e"});
  LoadedCharLM back = load_char_lm(dir.file("m.safetensors"));
  back.model->eval();
  Tensor tokens = from_vector<int64_t>({0, 1, 2, 3, 4, 4, 3}, {1, 7});
  CHECK(back.model->forward(tokens).to_vector<float>() == m.forward(tokens).to_vector<float>());
  auto& t = dynamic_cast<TCNCharLM&>(*back.model);
  CHECK(t.decoder->weight.shares_storage(t.encoder->weight));
  CHECK(back.vocab == std::vector<std::string>{"a", "b", "c", "d", "e"});
  CHECK_FALSE(load_safetensors(dir.file("m.safetensors")).contains("decoder.weight"));  // stored once
}

TEST_CASE("bad files: missing, empty, truncated, corrupt header, bad dtype, bad offsets") {
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  save_safetensors(good, {{"w", ones({4, 4})}});
  const std::string bytes = read_bytes(good);
  CHECK_ERROR(load_safetensors(dir.file("nope.safetensors")), "nope.safetensors: cannot open");
  write_bytes(dir.file("empty"), "");
  CHECK_ERROR(load_safetensors(dir.file("empty")), "shorter than the 8-byte header length");
  write_bytes(dir.file("trunc_data"), bytes.substr(0, bytes.size() - 5));
  CHECK_ERROR(load_safetensors(dir.file("trunc_data")), "truncated: tensor 'w' ends at byte 64 of a data section of 59 bytes");
  write_bytes(dir.file("trunc_header"), bytes.substr(0, 20));
  CHECK_ERROR(load_safetensors(dir.file("trunc_header")), "header length");
  std::string corrupt = bytes;
  corrupt[9] = '#';
  write_bytes(dir.file("corrupt"), corrupt);
  CHECK_ERROR(load_safetensors(dir.file("corrupt")), "corrupt header (invalid JSON");
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string b = bytes;
    b.replace(b.find(from), from.size(), to);
    return b;
  };
  write_bytes(dir.file("dtype"), replace("\"F32\"", "\"F16\""));
  CHECK_ERROR(load_safetensors(dir.file("dtype")), "tensor 'w' has unsupported dtype F16");
  write_bytes(dir.file("shape"), replace("[4,4]", "[4,5]"));
  CHECK_ERROR(load_safetensors(dir.file("shape")), "has 64 bytes of data for shape [4, 5] of float32");
}

TEST_CASE("crafted headers: shapes, offsets and names are validated before anything is allocated") {
  TempDir dir;
  // A safetensors file from a header and `data` bytes of zeros.
  auto craft = [&](const std::string& name, const std::string& header, size_t data) {
    std::string b(8, '\0');
    const uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(n >> (8 * i) & 0xFF);
    b += header;
    b += std::string(data, '\0');
    write_bytes(dir.file(name), b);
    return dir.file(name);
  };
  auto one = [](const std::string& shape, const std::string& offsets) {
    return "{\"w\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}}";
  };
  CHECK(load_safetensors(craft("ok", one("[2,2]", "[0,16]"), 16)).tensors.size() == 1);
  CHECK_ERROR(load_safetensors(craft("wrap", one("[1,2305843009213693952]", "[0,0]"), 0)), "has 0 bytes of data for shape");
  CHECK_ERROR(load_safetensors(craft("huge", one("[4294967296,4294967296]", "[0,0]"), 0)), "whose size overflows");
  CHECK_ERROR(load_safetensors(craft("float", one("[46.5,8]", "[0,1488]"), 1488)), "must be a non-negative integer");
  CHECK_ERROR(load_safetensors(craft("e300", one("[1e300]", "[0,4]"), 4)), "must be a non-negative integer");
  CHECK_ERROR(load_safetensors(craft("neg", one("[-1,4]", "[0,0]"), 0)), "must be a non-negative integer");
  CHECK_ERROR(load_safetensors(craft("shape_str", one("\"4\"", "[0,16]"), 16)), "shape that is not a list");
  CHECK_ERROR(load_safetensors(craft("off_float", one("[1]", "[0,6e272]"), 4)), "expected two integers");
  CHECK_ERROR(load_safetensors(craft("off_three", one("[1]", "[0,4,8]"), 4)), "expected two integers");
  CHECK_ERROR(load_safetensors(craft("trailing", one("[2,2]", "[0,16]"), 20)), "4 trailing bytes");
  CHECK_ERROR(load_safetensors(craft("gap", one("[2,2]", "[4,20]"), 20)), "4 unused bytes before tensor 'w'");
  const std::string two = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                          "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}";
  CHECK_ERROR(load_safetensors(craft("overlap", two, 12)), "overlaps the tensor before it");
  const std::string dup = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                          "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
  CHECK_ERROR(load_safetensors(craft("dup", dup, 8)), "the name 'a' appears twice");
  CHECK_ERROR(load_safetensors(craft("dtype_num", "{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4)),
              "unsupported dtype 7");
}

TEST_CASE("a checkpoint that does not match the model lists every problem and changes nothing") {
  TempDir dir;
  TCNCharLM m(small_tcn(), 3);
  NamedTensors params = m.named_parameters();
  // Drop one tensor, reshape another, add a stray one.
  NamedTensors edited;
  for (auto& [n, t] : params) {
    if (n == "decoder.bias") continue;
    if (n == "tcn.network.0.conv1.weight_v") edited.emplace_back(n, zeros({6, 4, 2}));
    else edited.emplace_back(n, t);
  }
  edited.emplace_back("decoder.weight", zeros({5, 4}));
  save_safetensors(dir.file("bad.safetensors"), edited);
  TCNCharLM target(small_tcn(), 99);
  auto before = target.encoder->weight.to_vector<float>();
  auto err = [&] {
    try {
      load_module(load_safetensors(dir.file("bad.safetensors")), target);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  }();
  CHECK(err.find("does not match the model (3 problems)") != std::string::npos);
  CHECK(err.find("missing 'decoder.bias' [5]") != std::string::npos);
  CHECK(err.find("'tcn.network.0.conv1.weight_v' has shape [6, 4, 2], the model expects [6, 4, 3]") != std::string::npos);
  CHECK(err.find("unexpected 'decoder.weight' [5, 4]") != std::string::npos);
  CHECK(target.encoder->weight.to_vector<float>() == before);  // nothing loaded
}

TEST_CASE("checkpoint metadata errors") {
  TempDir dir;
  save_safetensors(dir.file("plain.safetensors"), {{"w", ones({2})}});
  CHECK_ERROR(load_char_lm(dir.file("plain.safetensors")), "not a tcn checkpoint (no 'format' in its metadata)");
  TCNCharLM m(small_tcn(), 3);
  save_char_lm(dir.file("v.safetensors"), m, {"a", "b"});
  CHECK_ERROR(load_char_lm(dir.file("v.safetensors")), "vocabulary of 2 characters does not match vocab_size");
  save_module(dir.file("k.safetensors"), m,
              {{"format", "tcn-checkpoint"}, {"version", "1"}, {"model", "gru"}, {"config", "{}"}, {"vocab", "[]"}});
  CHECK_ERROR(load_char_lm(dir.file("k.safetensors")), "unknown model 'gru'");
}

TEST_CASE("an unwritable path is an error and leaves no file") {
  CHECK_ERROR(save_safetensors("/nonexistent-dir/x.safetensors", {{"w", ones({2})}}),
              "cannot create '/nonexistent-dir/.x.safetensors.tmp-");
  CHECK_ERROR(check_save_target("/nonexistent-dir/x.safetensors"), "cannot create '/nonexistent-dir/.x.safetensors.tmp-");
}

TEST_CASE("a flipped byte in tensor data is an error naming the tensor; checksums are checked for consistency") {
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  save_safetensors(good, {{"a", full({3}, 1.5)}, {"b", full({2, 2}, -2.0)}}, {{"k", "v"}});
  const std::string bytes = read_bytes(good);
  SafetensorsContents c = load_safetensors(good);
  CHECK(c.metadata == Metadata{{"k", "v"}});  // the checksums entry is the reader's, not the caller's
  // Flip one bit in each byte of the data section in turn: every flip is caught and names its tensor.
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  for (size_t i = 8 + n; i < bytes.size(); ++i) {
    std::string b = bytes;
    b[i] = static_cast<char>(b[i] ^ 0x10);
    write_bytes(dir.file("flip"), b);
    const char* name = i < 8 + n + 12 ? "tensor 'a' does not match its checksum" : "tensor 'b' does not match its checksum";
    CHECK_ERROR(load_safetensors(dir.file("flip")), name);
  }
  auto edit_checksums = [&](const std::string& json) {
    std::string b = bytes;
    const size_t at = b.find("\"checksums\":\"") + 13;
    const size_t end = b.find("}\"", at) + 1;
    std::string header = b.substr(8, n);
    const std::string old = b.substr(at, end - at);
    std::string escaped;
    for (char ch : json) escaped += ch == '"' ? std::string("\\\"") : std::string(1, ch);
    header.replace(at - 8, old.size(), escaped);
    while (header.size() % 8) header += ' ';
    std::string out(8, '\0');
    const uint64_t hn = header.size();
    std::memcpy(out.data(), &hn, 8);
    write_bytes(dir.file("edited"), out + header + bytes.substr(8 + n));
    return dir.file("edited");
  };
  const std::string sum_a = "xxh3-64:" + std::string(16, '0');
  CHECK_ERROR(load_safetensors(edit_checksums("{\"a\":\"" + sum_a + "\"}")), "no checksum for tensor 'b'");
  CHECK_ERROR(load_safetensors(edit_checksums("[1]")), "checksums is not a JSON object");
  CHECK_ERROR(load_safetensors(edit_checksums("{")), "corrupt metadata: checksums");
  CHECK_ERROR(load_safetensors(edit_checksums("{\"a\":\"crc:1\",\"b\":\"crc:2\"}")), "unsupported checksum 'crc:1'");
  CHECK_ERROR(load_safetensors(edit_checksums("{\"a\":\"" + sum_a + "\",\"b\":\"" + sum_a + "\",\"c\":\"" + sum_a + "\"}")),
              "a checksum for 'c', which is not in the file");
  CHECK_ERROR(save_safetensors(dir.file("r.safetensors"), {{"a", ones({1})}}, {{"checksums", "{}"}}),
              "the metadata key 'checksums' is reserved");
}

TEST_CASE("save refuses to replace what is not a regular file, and changes nothing there") {
  TempDir dir;
  const std::string target = dir.file("target.safetensors");
  save_safetensors(target, {{"w", ones({2})}});
  const std::string before = read_bytes(target);
  // A symlink is refused, not followed and not replaced.
  const std::string link = dir.file("link.safetensors");
  fs::create_symlink(target, link);
  CHECK_ERROR(save_safetensors(link, {{"w", zeros({2})}}), "is a symbolic link, not a regular file; refusing to replace it");
  CHECK_ERROR(check_save_target(link), "is a symbolic link");
  CHECK(fs::is_symlink(link));
  CHECK(read_bytes(target) == before);
  // A directory, and a FIFO (as /dev/null would be: a node that is not a file).
  fs::create_directory(dir.file("sub"));
  CHECK_ERROR(save_safetensors(dir.file("sub"), {{"w", ones({2})}}), "is a directory, not a regular file");
  CHECK(fs::is_directory(dir.file("sub")));
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
  CHECK_ERROR(save_safetensors(dir.file("fifo"), {{"w", ones({2})}}), "is a FIFO, not a regular file");
  CHECK(fs::is_fifo(dir.file("fifo")));
  CHECK_ERROR(load_safetensors(dir.file("fifo")), "is not a regular file (a FIFO)");  // and reading it does not block
  // A regular file is replaced whole; no temp file remains.
  save_safetensors(target, {{"w", zeros({2})}});
  CHECK(load_safetensors(target).at("w").to_vector<float>() == std::vector<float>{0, 0});
  CHECK(entries(dir.str()) == std::vector<std::string>{"fifo", "link.safetensors", "sub", "target.safetensors"});
}

TEST_CASE("stale temp files of dead processes are removed; everything else is kept") {
  TempDir dir;
  const std::string target = dir.file("m.safetensors");
  // The pid of a process that has exited (reaped, so kill(pid, 0) says ESRCH).
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  int status = 0;
  ::waitpid(child, &status, 0);
  const std::string dead = dir.file(".m.safetensors.tmp-" + std::to_string(child) + "-3");
  const std::string mine = dir.file(".m.safetensors.tmp-" + std::to_string(::getpid()) + "-0");
  const std::string live = dir.file(".m.safetensors.tmp-1-0");  // init: always running
  for (const std::string& keep : {dead, mine, live, dir.file(".m.safetensors.tmp-x-1"), dir.file(".m.safetensors.tmp-"),
                                  dir.file(".other.safetensors.tmp-" + std::to_string(child) + "-0"), target})
    write_bytes(keep, "x");
  CHECK(remove_stale_temp_files(target) == std::vector<std::string>{dead});
  CHECK_FALSE(fs::exists(dead));
  for (const std::string& kept : {mine, live, target}) CHECK(fs::exists(kept));
  CHECK(entries(dir.str()).size() == 6);
  CHECK(remove_stale_temp_files(dir.file("none/x")).empty());  // a missing directory is nothing to clean
}

TEST_CASE("crafted headers nested deeper than safetensors allows are refused while parsing") {
  std::string header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[[1]],\"data_offsets\":[0,4]}}";
  std::string b(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  CHECK_ERROR(parse_safetensors(b + header + std::string(4, '\0'), "mem"), "mem: corrupt header: nested deeper");
  // A deep document is refused at its fourth level, long before its end.
  header = std::string(1 << 20, '[') + std::string(1 << 20, ']');
  b.assign(8, '\0');
  const uint64_t m = header.size();
  std::memcpy(b.data(), &m, 8);
  CHECK_ERROR(parse_safetensors(b + header, "deep"), "nested deeper");
}

TEST_CASE("model configs are validated before a model is built, and must fit the file") {
  // parameter_count() is the built model's.
  for (const TCNConfig& c : {small_tcn(), TCNConfig{.vocab_size = 7, .emsize = 6, .nhid = 6, .levels = 3, .ksize = 2},
                             TCNConfig{.vocab_size = 3, .emsize = 2, .nhid = 5, .levels = 1, .ksize = 4}}) {
    TCNCharLM m(c, 1);
    int64_t n = 0;
    for (const auto& [name, p] : m.named_parameters()) n += p.numel();
    CHECK(c.parameter_count() == n);
  }
  for (const LSTMConfig& c : {LSTMConfig{.vocab_size = 5, .emsize = 3, .nhid = 4, .layers = 1},
                              LSTMConfig{.vocab_size = 6, .emsize = 4, .nhid = 3, .layers = 3}}) {
    LSTMCharLM m(c, 1);
    int64_t n = 0;
    for (const auto& [name, p] : m.named_parameters()) n += p.numel();
    CHECK(c.parameter_count() == n);
  }
  // A small file whose config is out of bounds, or describes far more parameters than it holds.
  TempDir dir;
  TCNCharLM small(small_tcn(), 3);
  auto with_config = [&](const std::string& config, const std::string& model = "tcn") {
    const std::string p = dir.file("c.safetensors");
    save_module(p, small, {{"format", "tcn-checkpoint"}, {"version", "1"}, {"model", model}, {"config", config},
                           {"vocab", "[\"a\",\"b\",\"c\",\"d\",\"e\"]"}});
    return p;
  };
  auto tcn_config = [](const std::string& field, const std::string& value) {
    nlohmann::json j = TCNConfig{.vocab_size = 5, .emsize = 4, .nhid = 6, .levels = 2, .ksize = 3}.to_json();
    j[field] = nlohmann::json::parse(value);
    return j.dump();
  };
  CHECK(load_char_lm(with_config(tcn_config("nhid", "6"))).model != nullptr);
  CHECK_ERROR(load_char_lm(with_config(tcn_config("nhid", "20000"))),
              "its config describes a model of 1200740093 parameters, but the file holds 423 values");
  CHECK_ERROR(load_char_lm(with_config(tcn_config("nhid", "60000"))), "more than the limit of 2147483648");
  CHECK_ERROR(load_char_lm(with_config(tcn_config("emsize", "4611686018427387904"))),
              "TCN config: emsize must be in [1, 65536], got 4611686018427387904");
  CHECK_ERROR(load_char_lm(with_config(tcn_config("vocab_size", "4611686018427387904"))), "vocab_size must be in");
  CHECK_ERROR(load_char_lm(with_config(tcn_config("nhid", "46.5"))), "TCN config: nhid must be an integer, got 46.5");
  CHECK_ERROR(load_char_lm(with_config(tcn_config("levels", "0"))), "levels must be in [1, 32], got 0");
  CHECK_ERROR(load_char_lm(with_config(tcn_config("levels", "64"))), "levels must be in [1, 32], got 64");
  CHECK_ERROR(load_char_lm(with_config(tcn_config("ksize", "-3"))), "ksize must be in [1, 64], got -3");
  CHECK_ERROR(load_char_lm(with_config(tcn_config("dropout", "1.0"))), "dropout must be in [0, 1), got 1");
  CHECK_ERROR(load_char_lm(with_config(tcn_config("dropout", "\"0.1\""))), "dropout must be a number");
  CHECK_ERROR(load_char_lm(with_config("[1,2]")), "is not a JSON object");
  CHECK_ERROR(load_char_lm(with_config("{\"vocab_size\":5,\"emsize\":4,\"nhid\":9,\"layers\":99,\"dropout\":0,"
                                       "\"emb_dropout\":0}", "lstm")),
              "LSTM config: layers must be in [1, 64], got 99");
  CHECK_ERROR(TCNCharLM(TCNConfig{.nhid = 0}, 1), "nhid must be in [1, 65536], got 0");
}

}  // TEST_SUITE
