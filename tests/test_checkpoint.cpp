// safetensors and checkpoints: round trips, and every way a file can be bad
// is a clear error that names the file and the problem, and loads nothing.
#include <unistd.h>

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
  CHECK_FALSE(fs::exists(dir.file("a.safetensors.tmp")));
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
  write_bytes(dir.file("dtype"), replace("\"F32\"", "\"BF16\""));
  CHECK_ERROR(load_safetensors(dir.file("dtype")), "tensor 'w' has unsupported dtype BF16");
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
  CHECK_ERROR(save_safetensors("/nonexistent-dir/x.safetensors", {{"w", ones({2})}}), "cannot open '/nonexistent-dir/x.safetensors.tmp' for writing");
}

}  // TEST_SUITE
