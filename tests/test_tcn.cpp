// nn::TCN, the general TCN: against pytorch-tcn's golden files (every option,
// tools/reference/make_tcn_golden.py), streaming against the full forward, the
// suffix-only forward against the whole one, finite differences, the
// initialisers' distributions and the option errors.
#include <cstring>
#include <filesystem>

#include "cuda_compare.h"
#include "helpers.h"
#include "nn/checkpoint.h"
#include "nn/tcn.h"

using namespace tcn;


namespace {

// max |a - b| / max(max |b|, floor): the tolerance of the golden files is 1e-5
// of the reference's scale (float32 against pytorch-tcn run in float64). The
// floor is for a reference that is zero in exact arithmetic (a conv's bias
// gradient in front of a training batch norm, 1e-15 in float64).
double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to(Device::cpu()).to(DType::F64).to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

double scaled_err(const Tensor& a, const Tensor& b, double floor = 0) {
  REQUIRE(a.shape() == b.shape());
  const auto va = a.detach().to(Device::cpu()).to(DType::F64).to_vector<double>();
  const auto vb = b.to(Device::cpu()).to(DType::F64).to_vector<double>();
  double d = 0, m = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    d = std::max(d, std::abs(va[i] - vb[i]));
    m = std::max(m, std::abs(vb[i]));
  }
  m = std::max(m, floor);
  return m == 0 ? d : d / m;
}

std::vector<std::string> golden_files() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(test::source_path("tests/golden/tcn")))
    if (e.path().extension() == ".safetensors") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

const Tensor& get(const nn::SafetensorsContents& f, const std::string& name) {
  for (const auto& [n, t] : f.tensors)
    if (n == name) return t;
  FAIL("golden file ", f.path, " has no ", name);
  std::abort();
}
bool has(const nn::SafetensorsContents& f, const std::string& name) {
  for (const auto& [n, t] : f.tensors)
    if (n == name) return true;
  return false;
}

struct GoldenModel {
  nn::SafetensorsContents file;
  nlohmann::json kwargs;
  std::unique_ptr<nn::TCN> tcn;
  Generator init{1}, drop{2};
};

// The file's TCN with its weights, in its mode.
std::unique_ptr<GoldenModel> load_golden(const std::string& path) {
  auto g = std::make_unique<GoldenModel>();
  g->file = nn::load_safetensors(path);
  g->kwargs = nlohmann::json::parse(g->file.metadata.at("kwargs"));
  g->tcn = std::make_unique<nn::TCN>(nn::TCNOptions::from_json(g->kwargs), g->init, g->drop);
  nn::load_module(g->file, *g->tcn, {"golden."});
  g->tcn->train(g->file.metadata.at("mode") == "train");
  return g;
}

// Forward and backward of sum(y * dy) on `device` in `dtype` (the file's float32 weights and inputs,
// widened for float64); every result within `tol` of the reference's scale. Returns the largest error.
double check_golden(const std::string& path, Device device, double tol, DType dtype = DType::F32) {
  auto g = load_golden(path);
  nn::TCN& tcn = *g->tcn;
  tcn.to(dtype);
  tcn.to(device);
  Tensor x = test::leaf(get(g->file, "golden.x").to(dtype).to(device));
  TensorList embs;
  for (int i = 0; has(g->file, "golden.emb." + std::to_string(i)); ++i)
    embs.push_back(test::leaf(get(g->file, "golden.emb." + std::to_string(i)).to(dtype).to(device)));
  Tensor y = tcn.forward(x, embs);
  sum(mul(y, get(g->file, "golden.dy").to(dtype).to(device))).backward();
  double worst = 0;
  auto within = [&](double err) {
    worst = std::max(worst, err);
    return err <= tol;
  };
  CHECK(within(scaled_err(y, get(g->file, "golden.y"))));
  CHECK(within(scaled_err(x.grad(), get(g->file, "golden.grad.x"))));
  for (size_t i = 0; i < embs.size(); ++i)
    CHECK(within(scaled_err(embs[i].grad(), get(g->file, "golden.grad.emb." + std::to_string(i)))));
  // A reference that is zero in exact arithmetic (below 1e-10 in float64) is judged on
  // the largest parameter gradient's scale: ours is float32 rounding of ~40 cancelling terms.
  double largest = 0;
  for (const auto& [name, p] : tcn.named_parameters())
    largest = std::max(largest, max_abs(get(g->file, "golden.grad." + name)));
  int params = 0;
  for (const auto& entry : tcn.named_parameters()) {  // not a structured binding: INFO captures it (clang 14)
    const std::string& name = entry.first;
    const Tensor& p = entry.second;
    INFO("parameter ", name);
    const Tensor& want = get(g->file, "golden.grad." + name);
    // A parameter the forward never reads (add mode's embedding_projection_2) has no gradient; PyTorch's is 0 too.
    const Tensor got = p.grad().defined() ? p.grad() : zeros_like(p);
    const double top = std::abs(max_abs(want));
    CHECK(within(scaled_err(got, want, top < 1e-10 ? largest : 0)));
    ++params;
  }
  CHECK(params > 0);
  for (const auto& entry : tcn.named_buffers()) {
    const std::string& name = entry.first;
    const Tensor& b = entry.second;
    if (!has(g->file, "golden.after." + name)) continue;
    INFO("buffer ", name);
    CHECK(within(scaled_err(b.to(DType::F64), get(g->file, "golden.after." + name))));
  }
  return worst;
}

// The layers' dtype, float32 (rand_tensor draws float64).
Tensor rand_tensor(const Shape& shape, uint64_t seed) { return test::rand_tensor(shape, seed).to(DType::F32); }

nn::TCNOptions small_options(nlohmann::json extra) {
  nlohmann::json j = {{"num_inputs", 3}, {"num_channels", {6, 6, 4}}, {"kernel_size", 3}, {"dropout", 0.0}};
  if (!extra.is_null()) j.update(extra);
  return nn::TCNOptions::from_json(j);
}

}  // namespace

TEST_SUITE("nn") {

TEST_CASE("TCN equals pytorch-tcn 1.2.3 on every golden configuration: outputs, gradients, batch-norm statistics") {
  const auto files = golden_files();
  REQUIRE(files.size() == 19);  // make_tcn_golden.py's matrix: a missing file must not pass quietly
  // In float64, the same function as pytorch-tcn's float64 run: only the order of sums differs.
  // In float32, rounding depends on the configuration (few channels, short sequences and layer norm
  // amplify it; pytorch-tcn's own float32 run can be further off its float64 one than ours is).
  for (const auto& path : files) {
    const std::string stem = std::filesystem::path(path).stem().string();
    SUBCASE(stem.c_str()) {
      const double e64 = check_golden(path, Device::cpu(), 1e-10, DType::F64);
      const double e32 = check_golden(path, Device::cpu(), 1e-5, DType::F32);
      MESSAGE(stem, ": largest error of the reference's scale, float64 ", e64, ", float32 ", e32);
    }
  }
}

TEST_CASE("TCN on CUDA equals pytorch-tcn's golden files too" * doctest::skip(!cuda::is_available())) {
  for (const auto& path : golden_files()) {
    SUBCASE(std::filesystem::path(path).stem().string().c_str()) { check_golden(path, Device::cuda(0), 1e-5); }
  }
}

TEST_CASE("TCN streaming equals the full forward: steps, chunks, batches, reset, embeddings, every causal option") {
  const std::vector<nlohmann::json> configs = {
      {},
      {{"use_norm", "batch_norm"}, {"use_skip_connections", true}},
      {{"use_norm", "layer_norm"}, {"use_gate", true}, {"input_shape", "NLC"}},
      {{"use_norm", nullptr}, {"activation", "gelu"}, {"embedding_shapes", {{2}, {3, 0}}}},
      {{"dilations", {1, 3, 2}}, {"output_projection", 2}, {"output_activation", "sigmoid"},
       {"embedding_shapes", {{2}}}, {"embedding_mode", "concat"}},
  };
  for (size_t c = 0; c < configs.size(); ++c) {
    CAPTURE(configs[c].dump());
    Generator init(10 + c), drop(20 + c);
    nn::TCN tcn(small_options(configs[c]), init, drop);
    tcn.eval();
    const bool ncl = tcn.options().input_shape == "NCL";
    const int64_t B = 3, T = 23;
    const Tensor x = rand_tensor(ncl ? Shape{B, 3, T} : Shape{B, T, 3}, 100 + c);
    TensorList embs;  // a constant one [B, 2] and, where configured, a time-varying one of 3 channels
    for (int64_t e : tcn.options().embedding_dims)
      embs.push_back(e == 2 ? rand_tensor({B, 2}, 200 + c) : rand_tensor(ncl ? Shape{B, 3, T} : Shape{B, T, 3}, 300 + c));
    const Tensor full = tcn.forward(x, embs);
    const int64_t tdim = ncl ? 2 : 1;
    auto slice_embs = [&](int64_t t0, int64_t len, bool single) {
      TensorList out;
      for (const auto& e : embs)
        out.push_back(e.dim() == 2 ? e : single ? e.narrow(tdim, t0, 1).squeeze(tdim) : e.narrow(tdim, t0, len));
      return out;
    };
    // One step at a time: x_t [B, C] -> [B, C_out].
    auto s = tcn.stream();
    TensorList steps;
    for (int64_t t = 0; t < T; ++t)
      steps.push_back(tcn.step(s, x.narrow(tdim, t, 1).squeeze(tdim), slice_embs(t, 1, true)));
    CHECK(s.position() == T);
    CHECK(scaled_err(stack(steps, tdim), full.to(DType::F64)) <= 1e-5);
    // Chunks of uneven lengths, after a reset.
    s.reset();
    TensorList chunks;
    for (int64_t t = 0, len = 1; t < T; t += len, len = len % 5 + 2) {
      len = std::min(len, T - t);
      chunks.push_back(tcn.step(s, x.narrow(tdim, t, len), slice_embs(t, len, false)));
    }
    CHECK(scaled_err(cat(chunks, tdim), full.to(DType::F64)) <= 1e-5);
  }
}

TEST_CASE("TCN streaming refuses what it cannot do, by name") {
  Generator init(1), drop(2);
  nn::TCN noncausal(small_options({{"causal", false}}), init, drop);
  noncausal.eval();
  CHECK_ERROR(noncausal.stream(), "streaming needs a causal network");
  nn::TCN tcn(small_options({}), init, drop);
  auto s = tcn.stream();
  CHECK_ERROR(tcn.step(s, rand_tensor({2, 3}, 1)), "call eval() first");
  tcn.eval();
  (void)tcn.step(s, rand_tensor({2, 3}, 1));
  CHECK_ERROR(tcn.step(s, rand_tensor({4, 3}, 1)), "this stream holds 2 sequences, the chunk 4");
  CHECK_ERROR(tcn.step(s, rand_tensor({2, 5}, 1)), "expected 3 channels");
}

TEST_CASE("TCN keep_last computes only the kept positions' history, and equals the whole forward's tail") {
  const std::vector<nlohmann::json> configs = {
      {{"use_skip_connections", true}, {"use_norm", "layer_norm"}},
      {{"embedding_shapes", {{3, 0}}}, {"use_gate", true}, {"input_shape", "NLC"}},
      {{"use_norm", "batch_norm"}},  // batch statistics span every position: computes all, then narrows
      {{"causal", false}},
  };
  for (size_t c = 0; c < configs.size(); ++c) {
    CAPTURE(configs[c].dump());
    Generator init(30 + c), drop(40 + c);
    nn::TCN tcn(small_options(configs[c]), init, drop);
    tcn.to(DType::F64);
    const bool ncl = tcn.options().input_shape == "NCL";
    const int64_t B = 2, T = 40, keep = 5, tdim = ncl ? 2 : 1;
    const Tensor x = rand_tensor(ncl ? Shape{B, 3, T} : Shape{B, T, 3}, 7).to(DType::F64);
    TensorList embs;
    if (!tcn.options().embedding_dims.empty())
      embs.push_back(rand_tensor(ncl ? Shape{B, 3, T} : Shape{B, T, 3}, 8).to(DType::F64));
    const Tensor whole = tcn.forward(x, embs), tail = tcn.forward(x, embs, keep);
    CHECK(tail.size(tdim) == keep);
    CHECK(scaled_err(tail, whole.narrow(tdim, T - keep, keep)) <= 1e-12);
  }
}

TEST_CASE("gradcheck: a TCN with every option on at once (float64)") {
  Generator init(3), drop(4);
  nn::TCN tcn(small_options({{"num_channels", {3, 2}},
                             {"kernel_size", 2},
                             {"use_norm", "layer_norm"},
                             {"use_gate", true},
                             {"use_skip_connections", true},
                             {"activation", "elu"},
                             {"embedding_shapes", {{2}}},
                             {"embedding_mode", "concat"},
                             {"output_projection", 2}}),
              init, drop);
  tcn.to(DType::F64);
  const Tensor x = test::leaf(rand_tensor({2, 3, 6}, 5).to(DType::F64));
  const Tensor e = test::leaf(rand_tensor({2, 2}, 6).to(DType::F64));
  test::check_gradients([&](const TensorList& in) { return tcn.forward(in[0], {in[1]}); }, {x, e});
}

TEST_CASE("TCN kernel initializers draw pytorch-tcn's distributions") {
  // conv2 of level 0: weight [64, 64, 3], fan_in = fan_out = 192.
  auto conv2_weight = [](const std::string& init_name, const std::string& act) {
    Generator init(9), drop(9);
    nn::TCN tcn(nn::TCNOptions::from_json({{"num_inputs", 64},
                                           {"num_channels", {64}},
                                           {"kernel_size", 3},
                                           {"use_norm", nullptr},
                                           {"activation", act},
                                           {"kernel_initializer", init_name}}),
                init, drop);
    return tcn.network->items()[0]->conv2->weight.to_vector<float>();
  };
  auto stats = [](const std::vector<float>& v) {
    double m = 0, s = 0, top = 0;
    for (float f : v) m += f, top = std::max(top, std::abs(static_cast<double>(f)));
    m /= v.size();
    for (float f : v) s += (f - m) * (f - m);
    return std::tuple{m, std::sqrt(s / v.size()), top};
  };
  const double fan = 192;
  struct Case {
    const char *init, *act;
    double std, bound;  // bound 0: normal
  } cases[] = {
      {"xavier_uniform", "relu", std::sqrt(2.0) * std::sqrt(2.0 / (2 * fan)), std::sqrt(2.0) * std::sqrt(6.0 / (2 * fan))},
      {"xavier_normal", "tanh", 5.0 / 3.0 * std::sqrt(2.0 / (2 * fan)), 0},
      {"kaiming_uniform", "leaky_relu", std::sqrt(2.0) / std::sqrt(fan), std::sqrt(2.0) * std::sqrt(3.0 / fan)},
      {"kaiming_normal", "selu", 0.75 / std::sqrt(fan), 0},
      {"normal", "relu", 1.0, 0},
  };
  for (const auto& c : cases) {
    CAPTURE(c.init);
    auto [m, sd, top] = stats(conv2_weight(c.init, c.act));
    CHECK(std::abs(m) < 0.05 * c.std);
    CHECK(sd == doctest::Approx(c.std).epsilon(0.03));
    if (c.bound > 0) CHECK(top <= c.bound);
  }
  auto [m, sd, top] = stats(conv2_weight("uniform", "relu"));
  CHECK(m == doctest::Approx(0.5).epsilon(0.02));
  CHECK(top <= 1.0);
}

TEST_CASE("TCN options: every bad value is an error that names it") {
  CHECK_ERROR(small_options({{"use_norm", "group_norm"}}), "use_norm must be one of");
  CHECK_ERROR(small_options({{"activation", "swish"}}), "unknown activation 'swish'");
  CHECK_ERROR(small_options({{"kernel_initializer", "kaiming_normal"}, {"activation", "gelu"}}),
              "has no gain for activation 'gelu'");
  CHECK_ERROR(small_options({{"dilations", {1, 2}}}), "dilations has 2 entries for 3 levels");
  CHECK_ERROR(small_options({{"input_shape", "LNC"}}), "input_shape must be one of");
  CHECK_ERROR(small_options({{"dropout", 1.0}}), "dropout must be in [0, 1)");
  CHECK_ERROR(small_options({{"num_channel", {3}}}), "unknown key 'num_channel'");
  CHECK_ERROR(small_options({{"lookahead", 2}}), "lookahead must be 0");
  CHECK_ERROR(small_options({{"embedding_shapes", {2}}}), "must be [dim] or [dim, time]");
  CHECK_ERROR(small_options({{"causal", 1}}), "causal must be true or false");
  CHECK(small_options({{"dilation_reset", 2}, {"num_channels", {4, 4, 4, 4, 4}}}).level_dilations() ==
        std::vector<int64_t>{1, 2, 1, 2, 1});
  CHECK(small_options({}).level_dilations() == std::vector<int64_t>{1, 2, 4});
  // to_json round-trips.
  const auto o = small_options({{"use_norm", nullptr}, {"embedding_shapes", {{2}, {3, 9}}}, {"output_projection", 5}});
  CHECK(nn::TCNOptions::from_json(o.to_json()).to_json() == o.to_json());

  Generator init(1), drop(2);
  nn::TCN tcn(small_options({{"embedding_shapes", {{2}}}}), init, drop);
  CHECK_ERROR(tcn.forward(rand_tensor({2, 4, 9}, 1), {rand_tensor({2, 2}, 2)}), "expected num_inputs = 3");
  CHECK_ERROR(tcn.forward(rand_tensor({2, 3, 9}, 1)), "expected 1 embeddings");
  CHECK_ERROR(tcn.forward(rand_tensor({2, 3, 9}, 1), {rand_tensor({2, 5}, 2)}), "expected [batch, 2]");
  CHECK_ERROR(tcn.forward(rand_tensor({2, 3, 9}, 1), {rand_tensor({2, 2, 8}, 2)}), "expected 2 channels over 9 steps");
  CHECK_ERROR(tcn.forward(rand_tensor({3, 9}, 1), {rand_tensor({2, 2}, 2)}), "input must be [batch, channels, time]");
}

TEST_CASE("TCN checkpoints: pytorch-tcn's names, buffers included, round trip") {
  test::TempDir dir;
  Generator init(1), drop(2);
  nn::TCN a(small_options({{"use_norm", "batch_norm"}, {"use_skip_connections", true}}), init, drop);
  nn::TCN b(small_options({{"use_norm", "batch_norm"}, {"use_skip_connections", true}}), init, drop);
  std::vector<std::string> names;
  for (const auto& [n, t] : a.named_state()) names.push_back(n);
  // Level 0 (3 -> 6) and level 2 (6 -> 4) have downsamples; skip projections where the width is not 4.
  for (const char* want : {"downsample_skip_connection.0.weight", "downsample_skip_connection.1.bias",
                           "network.0.conv1.weight", "network.0.norm1.running_mean", "network.2.downsample.weight",
                           "network.1.norm2.num_batches_tracked"})
    CHECK(std::find(names.begin(), names.end(), want) != names.end());
  CHECK(std::find(names.begin(), names.end(), "downsample_skip_connection.2.weight") == names.end());
  (void)a.forward(rand_tensor({2, 3, 9}, 1));  // moves the running statistics
  nn::save_module(dir.file("a.safetensors"), a, {});
  nn::load_module(nn::load_safetensors(dir.file("a.safetensors")), b);
  a.eval(), b.eval();
  const Tensor x = rand_tensor({2, 3, 9}, 3);
  CHECK(scaled_err(b.forward(x), a.forward(x).to(DType::F64)) == 0);
}

TEST_CASE("TCN checkpoints: PyTorch >= 2.1's weight-norm names (parametrizations.weight.original0/1) load too") {
  test::TempDir dir;
  Generator init(4), drop(5);
  nn::TCN a(small_options({{"use_skip_connections", true}}), init, drop);  // weight norm, pytorch-tcn's default
  nn::TCN b(small_options({{"use_skip_connections", true}}), init, drop);
  // a's state as PyTorch >= 2.1 writes it: X.weight_g -> X.parametrizations.weight.original0, _v -> original1.
  nn::NamedTensors renamed;
  int n_renamed = 0;
  for (const auto& [n, t] : a.named_state()) {
    std::string m = n;
    for (const auto& [from, to] : {std::pair{".weight_g", ".parametrizations.weight.original0"},
                                   std::pair{".weight_v", ".parametrizations.weight.original1"}})
      if (m.size() > std::strlen(from) && m.compare(m.size() - std::strlen(from), std::string::npos, from) == 0) {
        m = m.substr(0, m.size() - std::strlen(from)) + to;
        ++n_renamed;
      }
    renamed.emplace_back(m, t);
  }
  CHECK(n_renamed >= 4);
  nn::save_safetensors(dir.file("p.safetensors"), renamed);
  nn::load_module(nn::load_safetensors(dir.file("p.safetensors")), b);
  a.eval(), b.eval();
  const Tensor x = rand_tensor({2, 3, 9}, 6);
  CHECK(scaled_err(b.forward(x), a.forward(x).to(DType::F64)) == 0);
  // Both spellings of one tensor in a file: ambiguous, refused by name.
  renamed.emplace_back("network.0.conv1.weight_g", a.named_state()[0].second);
  nn::save_safetensors(dir.file("both.safetensors"), renamed);
  CHECK_THROWS_WITH_AS(nn::load_module(nn::load_safetensors(dir.file("both.safetensors")), b),
                       doctest::Contains("are two names of 'network.0.conv1.weight_g'"), Error);
}

}  // TEST_SUITE
