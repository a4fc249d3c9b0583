// Chapter 3 (docs/tutorial/03-new-layer.md): a new layer. A GRU as an
// nn::Module with PyTorch's parameter names, shapes and gate order, checked
// against a plain-loop transcription of torch.nn.GRU's equations, by a float64
// gradient check, and through a safetensors checkpoint round trip.
#include <tcn/tcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>  // getpid

#include "check.h"
#include "gradcheck.h"

using tcn::Tensor;
using tcn::TensorList;
using tut::check;

// One-layer GRU, batch-first, as torch.nn.GRU(input_size, hidden, batch_first=True):
//   r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)
//   z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
//   n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
//   h' = (1 - z) * n + z * h
// The three gates are stacked in the order r, z, n along the first dim of
// weight_ih_l0 [3H, I], weight_hh_l0 [3H, H], bias_ih_l0 [3H], bias_hh_l0 [3H].
class GRU : public tcn::nn::Module {
 public:
  GRU(int64_t input_size, int64_t hidden, tcn::Generator& gen) : input_size(input_size), hidden(hidden) {
    using namespace tcn;
    // PyTorch's init: every parameter U(-1/sqrt(H), 1/sqrt(H)).
    const double bound = 1.0 / std::sqrt(static_cast<double>(hidden));
    auto init = [&](const Shape& shape) {
      Tensor t = empty(shape);
      uniform_(t, -bound, bound, gen);
      return t;
    };
    weight_ih = register_parameter("weight_ih_l0", init({3 * hidden, input_size}));
    weight_hh = register_parameter("weight_hh_l0", init({3 * hidden, hidden}));
    bias_ih = register_parameter("bias_ih_l0", init({3 * hidden}));
    bias_hh = register_parameter("bias_hh_l0", init({3 * hidden}));
  }

  // x [B, T, I], h0 [1, B, H] (undefined: zeros) -> (output [B, T, H], h_T [1, B, H]).
  std::pair<Tensor, Tensor> forward(const Tensor& x, const Tensor& h0 = Tensor()) const {
    using namespace tcn;
    const auto scope = profile_scope();  // the profiler charges the ops below to this module
    TCN_CHECK(x.dim() == 3 && x.size(2) == input_size, "GRU: input must be [batch, time, ", input_size, "], got ",
              x.shape());
    const int64_t B = x.size(0), H = hidden;
    // The input projection of every step at once: one GEMM, [B, T, 3H].
    const Tensor xp = matmul(x, weight_ih.t()) + bias_ih;
    Tensor h = h0.defined() ? h0.squeeze(0) : zeros({B, H}, x.options());
    TensorList outputs;
    for (const Tensor& xt : unbind(xp, 1)) {              // step t: xt [B, 3H]
      const Tensor hp = mm(h, weight_hh.t()) + bias_hh;  // [B, 3H]
      const Tensor r = sigmoid(xt.narrow(1, 0, H) + hp.narrow(1, 0, H));
      const Tensor z = sigmoid(xt.narrow(1, H, H) + hp.narrow(1, H, H));
      const Tensor n = tanh(xt.narrow(1, 2 * H, H) + r * hp.narrow(1, 2 * H, H));
      h = n + z * (h - n);  // (1 - z) * n + z * h
      outputs.push_back(h);
    }
    return {stack(outputs, 1), h.unsqueeze(0)};
  }

  int64_t input_size, hidden;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
};

// torch.nn.GRU's equations as plain loops in double, reading the module's
// weights: an oracle independent of tcn's ops. Returns the output [B, T, H].
std::vector<double> reference_gru(const GRU& gru, const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), I = gru.input_size, H = gru.hidden;
  const auto wi = gru.weight_ih.to_vector<double>(), wh = gru.weight_hh.to_vector<double>();
  const auto bi = gru.bias_ih.to_vector<double>(), bh = gru.bias_hh.to_vector<double>();
  const auto xs = x.to_vector<double>();
  auto sigm = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  std::vector<double> out(B * T * H);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<double> h(H, 0.0), next(H);
    for (int64_t t = 0; t < T; ++t) {
      const double* xt = &xs[(b * T + t) * I];
      auto gate = [&](int64_t row, bool input_side) {  // row of W_ih x + b_ih, or of W_hh h + b_hh
        double s = input_side ? bi[row] : bh[row];
        if (input_side)
          for (int64_t k = 0; k < I; ++k) s += wi[row * I + k] * xt[k];
        else
          for (int64_t k = 0; k < H; ++k) s += wh[row * H + k] * h[k];
        return s;
      };
      for (int64_t j = 0; j < H; ++j) {
        const double r = sigm(gate(j, true) + gate(j, false));
        const double z = sigm(gate(H + j, true) + gate(H + j, false));
        const double n = std::tanh(gate(2 * H + j, true) + r * gate(2 * H + j, false));
        next[j] = (1 - z) * n + z * h[j];
      }
      h = next;
      for (int64_t j = 0; j < H; ++j) out[(b * T + t) * H + j] = h[j];
    }
  }
  return out;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector<float>(), vb = b.to_vector<float>();
  return a.shape() == b.shape() && std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)) == 0;
}

int main() {
  using namespace tcn;
  constexpr int64_t kIn = 3, kHidden = 5, kBatch = 4, kTime = 6;
  Generator init(11), data(12);

  // ---- the module: names and shapes as PyTorch's state_dict --------------
  GRU gru(kIn, kHidden, init);
  std::string names;
  for (const auto& [name, p] : gru.named_parameters()) names += name + shape_str(p.shape()) + " ";
  std::printf("      parameters: %s\n", names.c_str());
  check(names == "weight_ih_l0[15, 3] weight_hh_l0[15, 5] bias_ih_l0[15] bias_hh_l0[15] ",
        "named_parameters(): torch.nn.GRU's names and shapes [3H, I], [3H, H], [3H], [3H]");
  check(gru.num_parameters() == 15 * 3 + 15 * 5 + 15 + 15, "num_parameters() counts all four");
  bool all_leaves = true;
  for (const Tensor& p : gru.parameters()) all_leaves = all_leaves && p.requires_grad() && p.is_leaf();
  check(all_leaves, "register_parameter made each a leaf that requires grad");

  // ---- forward against torch's equations --------------------------------
  const Tensor x = randn({kBatch, kTime, kIn}, {}, data);
  const auto [out, h_last] = gru.forward(x);
  check(out.shape() == Shape{kBatch, kTime, kHidden} && h_last.shape() == Shape{1, kBatch, kHidden},
        "output [B, T, H] and h_T [1, B, H], as torch.nn.GRU(batch_first=True)");
  const std::vector<float> got = out.to_vector<float>();
  const std::vector<double> want = reference_gru(gru, x);
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
  std::printf("      forward vs the plain-loop reference: max |difference| %.2e\n", worst);
  check(worst < 1e-5, "forward equals the r, z, n equations of torch.nn.GRU within 1e-5 (float32)");
  check(bitwise_equal(out.narrow(1, kTime - 1, 1).squeeze(1), h_last.squeeze(0)),
        "h_T is the last output step");
  autograd::clear_tape();  // we will not differentiate this forward pass

  // ---- gradients: a float64 copy of the layer, checked numerically -------
  {
    Generator g64_init(13);
    GRU g64(2, 3, g64_init);
    g64.to(DType::F64);  // converts the parameters in place: g64.weight_ih etc. now hold float64
    const TensorOptions f64 = TensorOptions{}.with(DType::F64);
    Tensor xs = randn({2, 4, 2}, f64, data).requires_grad_();
    Tensor h0 = randn({1, 2, 3}, f64, data).requires_grad_();
    const Tensor w_out = randn({2, 4, 3}, f64, data), w_h = randn({1, 2, 3}, f64, data);
    TensorList inputs{xs, h0};
    for (const Tensor& p : g64.parameters()) inputs.push_back(p);
    const double err = tut::gradcheck(
        [&](const TensorList& in) {
          const auto [o, h] = g64.forward(in[0], in[1]);
          return sum(o * w_out) + sum(h * w_h);
        },
        inputs);
    std::printf("      GRU gradient check (x, h0 and the 4 parameters): max error %.2e\n", err);
    check(err < 1e-7, "the GRU's gradients w.r.t. x, h0 and every parameter pass the float64 check (< 1e-7)");
  }

  // ---- checkpoint round trip through safetensors -------------------------
  // A file of this process in the system's temp directory, removed at the end.
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tutorial_03_gru_" + std::to_string(::getpid()) + ".safetensors"))
          .string();
  struct RemoveAtExit {  // also when an op below throws a tcn::Error
    std::string path;
    ~RemoveAtExit() { std::filesystem::remove(path); }
  } remove_at_exit{path};
  nn::save_module(path, gru, {{"model", "gru"}, {"input_size", std::to_string(kIn)}, {"hidden", std::to_string(kHidden)}});
  const nn::SafetensorsContents file = nn::load_safetensors(path);
  std::vector<std::string> in_file;
  for (const auto& [name, t] : file.tensors) in_file.push_back(name);
  std::sort(in_file.begin(), in_file.end());
  check(in_file == std::vector<std::string>{"bias_hh_l0", "bias_ih_l0", "weight_hh_l0", "weight_ih_l0"},
        "the file holds exactly the four state_dict names");
  check(file.metadata.at("hidden") == "5" && file.at("weight_hh_l0").shape() == Shape{15, 5},
        "metadata and shapes come back");

  Generator other(99);
  GRU fresh(std::stoll(file.metadata.at("input_size")), std::stoll(file.metadata.at("hidden")), other);
  {
    autograd::NoGrad no_grad;  // evaluation: nothing to record
    check(!bitwise_equal(fresh.forward(x).first, out), "a fresh GRU (another seed) computes something else");
    nn::load_module(file, fresh);
    check(bitwise_equal(fresh.forward(x).first, out), "after load_module its outputs are bitwise identical");
  }
  bool bad_shape_refused = false;
  try {
    GRU wrong(kIn, kHidden + 1, other);
    nn::load_module(file, wrong);
  } catch (const Error& e) {
    bad_shape_refused = true;
    std::printf("      loading into a GRU with H = 6: %.160s...\n", e.what());
  }
  check(bad_shape_refused, "loading into a GRU of another size is an error naming the shapes");

  return tut::finish("tutorial_03_gru_layer");
}
