// Test helpers: random tensors (optionally non-contiguous), closeness checks,
// and the finite-difference gradient checker.
#pragma once

#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>

#include "core/devices.h"

#include "ops/ops.h"

namespace tcn::test {

// A file of the source tree (tests/golden/...): under $TCN_SOURCE_DIR when it is
// set (tools/device_check.sh runs the bundle's binaries from another checkout),
// else under the tree this binary was built from.
inline std::string source_path(const std::string& rel) {
  const char* root = std::getenv("TCN_SOURCE_DIR");
  return std::string(root && *root ? root : TCN_SOURCE_DIR) + "/" + rel;
}

// The 1-based number of the one line of `path` that contains `text`.
inline int line_containing(const std::string& path, const std::string& text) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  std::string line;
  int found = 0;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find(text) == std::string::npos) continue;
    REQUIRE_MESSAGE(found == 0, "\"" << text << "\" is on lines " << found << " and " << n << " of " << path);
    found = n;
  }
  REQUIRE_MESSAGE(found > 0, "\"" << text << "\" is on no line of " << path);
  return found;
}

// Deterministic pseudo-text: random words from a small list (learnable: the
// letters inside a word are predictable).
inline std::string synthetic_text(size_t n, uint64_t seed) {
  const std::vector<std::string> words = {"the ", "cat ", "sat ", "on ", "a ", "mat ", "and ", "dog\n", "ran "};
  std::string s;
  Generator g(seed);
  auto u = rand({static_cast<int64_t>(n)}, {DType::F64}, g).to_vector<double>();
  for (size_t i = 0; s.size() < n; ++i) s += words[static_cast<size_t>(u[i % n] * words.size())];
  return s.substr(0, n);
}

// ptb.{train,valid,test}.txt of synthetic text in `dir`.
inline void write_corpus(const std::string& dir, size_t train = 6000, size_t other = 1500) {
  const std::pair<const char*, std::string> files[] = {{"ptb.train.txt", synthetic_text(train, 1)},
                                                       {"ptb.valid.txt", synthetic_text(other, 2)},
                                                       {"ptb.test.txt", synthetic_text(other, 3)}};
  for (const auto& [name, text] : files) {
    std::ofstream f(dir + "/" + name, std::ios::binary | std::ios::trunc);
    f << text;
  }
}

// A float64 tensor of `shape` with values in [lo, hi). With noncontig, it is a
// transposed view of a differently shaped buffer (its last two dims swapped
// back), so its strides are not row-major.
inline Tensor rand_tensor(const Shape& shape, uint64_t seed, bool noncontig = false, double lo = -1.0,
                          double hi = 1.0, DType dtype = DType::F64) {
  Generator gen(seed);
  if (!noncontig || shape.size() < 2) {
    Tensor t = empty(shape, {dtype});
    uniform_(t, lo, hi, gen);
    return t;
  }
  Shape swapped = shape;
  std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
  Tensor base = empty(swapped, {dtype});
  uniform_(base, lo, hi, gen);
  Tensor t = base.transpose(-1, -2);
  REQUIRE(!t.is_contiguous());
  return t;
}

// The char-LM tests' batch on `device`: 3 streams of 41 ids in [0, vocab) drawn
// from Generator(seed); inp is the first 40 positions, tgt the 30 scored ones.
struct CharBatch {
  Tensor inp, tgt;
};
inline CharBatch random_char_batch(int64_t vocab, uint64_t seed, Device device) {
  Generator g(seed);
  std::vector<int64_t> ids;
  for (double u : rand({3, 41}, {DType::F64}, g).to_vector<double>())
    ids.push_back(static_cast<int64_t>(u * static_cast<double>(vocab)));
  Tensor seq = from_vector<int64_t>(ids, {3, 41});
  return {seq.narrow(1, 0, 40).contiguous().to(device), seq.narrow(1, 11, 30).contiguous().to(device)};
}

inline Tensor leaf(Tensor t) {
  t.requires_grad_(true);
  return t;
}

// Largest |a - b| / (atol + rtol * |b|) over all elements; <= 1 means close.
inline double close_ratio(const Tensor& a, const Tensor& b, double atol, double rtol) {
  REQUIRE(a.shape() == b.shape());
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    double diff = std::abs(va[i] - vb[i]);
    double r = diff == 0 ? 0 : diff / (atol + rtol * std::abs(vb[i]));
    if (!(r <= worst)) worst = std::isnan(r) ? INFINITY : r;
  }
  return worst;
}

// ||a - b|| / ||b||, over all elements: the error of a reduced-precision result (bf16, TF32) relative to its
// reference's size, which elementwise tolerances misjudge near zero.
inline double rel_err(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  double d = 0, n = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    d += (av[i] - bv[i]) * (av[i] - bv[i]);
    n += bv[i] * bv[i];
  }
  return std::sqrt(d / n);
}

// CHECK that expr throws a tcn::Error whose message contains text.
#define CHECK_ERROR(expr, text) CHECK_THROWS_WITH_AS((void)(expr), doctest::Contains(text), tcn::Error)

// A fresh temporary directory, removed with everything in it at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           ("tcn_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path.string(); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

#define CHECK_CLOSE(a, b, atol, rtol) CHECK(::tcn::test::close_ratio((a), (b), (atol), (rtol)) <= 1.0)

// Compares the tape's gradients of every input that requires grad with central
// finite differences of L = sum(f(inputs) * w), with fixed random weights w so
// that each output element contributes differently. Inputs that require grad
// must be float64 (others, e.g. int64 indices, are passed through).
// Returns "" when they agree, else a description of the first mismatch.
inline std::string gradient_mismatch(const std::function<Tensor(const TensorList&)>& f, const TensorList& inputs,
                                     double eps = 1e-6, double atol = 1e-6, double rtol = 1e-5) {
  for (const Tensor& x : inputs) {
    REQUIRE((!x.requires_grad() || x.dtype() == DType::F64));
    if (x.requires_grad()) x.zero_grad();
  }
  Tensor out = f(inputs);
  REQUIRE(out.requires_grad());
  Tensor w = rand_tensor(out.shape(), 4242);
  sum(mul(out, w)).backward();
  REQUIRE(autograd::tape_size() == 0);

  auto loss = [&]() {
    autograd::NoGrad ng;
    return sum(mul(f(inputs), w)).item();
  };
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.requires_grad()) continue;
    // An input the output does not depend on gets no gradient: that means zero.
    Tensor g = x.grad().defined() ? x.grad() : zeros(x.shape(), x.options());
    REQUIRE(g.shape() == x.shape());
    std::vector<double> analytic = g.to_vector<double>();
    // Walk x's elements in row-major order through its own strides.
    double* base = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t off = 0, rem = i;
      for (int64_t d = x.dim() - 1; d >= 0; --d) {
        off += (rem % x.size(d)) * x.stride(d);
        rem /= x.size(d);
      }
      double saved = base[off];
      base[off] = saved + eps;
      double lp = loss();
      base[off] = saved - eps;
      double lm = loss();
      base[off] = saved;
      double numeric = (lp - lm) / (2 * eps);
      if (!(std::abs(numeric - analytic[i]) <= atol + rtol * std::abs(numeric)))
        return detail::concat("input ", k, " element ", i, ": analytic ", analytic[i], " vs numeric ", numeric);
    }
  }
  return "";
}

inline void check_gradients(const std::function<Tensor(const TensorList&)>& f, const TensorList& inputs,
                            double eps = 1e-6, double atol = 1e-6, double rtol = 1e-5) {
  std::string mismatch = gradient_mismatch(f, inputs, eps, atol, rtol);
  CHECK_MESSAGE(mismatch.empty(), mismatch);
}

}  // namespace tcn::test
