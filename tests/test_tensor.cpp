// Tensor basics: factories, view semantics (shared storage, writes seen
// through views), contiguous copies, dtype conversion, forward values.
#include "helpers.h"

using namespace tcn;
using tcn::test::rand_tensor;

TEST_SUITE("tensor") {

TEST_CASE("factories and metadata") {
  Tensor z = zeros({2, 3});
  CHECK(z.shape() == Shape{2, 3});
  CHECK(z.strides() == Strides{3, 1});
  CHECK(z.numel() == 6);
  CHECK(z.dtype() == DType::F32);
  CHECK(z.device() == Device::cpu());
  CHECK(z.is_contiguous());
  CHECK(z.to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(full({2}, 2.5, {DType::F64}).to_vector<double>() == std::vector<double>{2.5, 2.5});
  CHECK(scalar_tensor(3.0).item() == 3.0);
  CHECK(scalar_tensor(3.0).dim() == 0);
  Tensor v = from_vector<int64_t>({1, 2, 3, 4}, {2, 2});
  CHECK(v.dtype() == DType::I64);
  CHECK(v.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3, 4});
  CHECK(tensor({1, 2}, {2}, {DType::F32}).to_vector<float>() == std::vector<float>{1, 2});
}

TEST_CASE("a view shares storage and writes through it are seen") {
  Tensor x = from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor t = x.t();
  CHECK(t.shares_storage(x));
  CHECK(t.shape() == Shape{3, 2});
  CHECK(t.strides() == Strides{1, 3});
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});

  Tensor row = x.narrow(0, 1, 1);
  CHECK(row.offset() == 3);
  fill_(row, 9.0);  // write through the view
  CHECK(x.to_vector<float>() == std::vector<float>{0, 1, 2, 9, 9, 9});
  CHECK(t.to_vector<float>() == std::vector<float>{0, 9, 1, 9, 2, 9});

  Tensor col = t.narrow(0, 2, 1);  // a view of a view
  copy_(col, from_vector<float>({7, 8}, {1, 2}));
  CHECK(x.to_vector<float>() == std::vector<float>{0, 1, 7, 9, 9, 8});

  Tensor r = x.view({3, 2});
  CHECK(r.shares_storage(x));
  Tensor e = from_vector<float>({1, 2, 3}, {3, 1}).expand({3, 4});
  CHECK(e.strides() == Strides{1, 0});
  CHECK(e.to_vector<float>() == std::vector<float>{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
}

TEST_CASE("reshape is a view when possible and a copy otherwise") {
  Tensor x = rand_tensor({4, 6}, 1);
  Tensor r = x.reshape({2, 2, 6});
  CHECK(r.shares_storage(x));
  Tensor nc = x.t();  // [6, 4], strides (1, 6)
  Tensor rc = nc.reshape({24});
  CHECK_FALSE(rc.shares_storage(x));
  CHECK(rc.to_vector<double>() == nc.contiguous().to_vector<double>());
  // Splitting a dim of a transposed view is still a view.
  Tensor split = nc.reshape({3, 2, 4});
  CHECK(split.shares_storage(x));
  CHECK(split.to_vector<double>() == nc.contiguous().reshape({3, 2, 4}).to_vector<double>());
  CHECK(x.reshape({-1}).shape() == Shape{24});
}

TEST_CASE("contiguous copies only when needed") {
  Tensor x = rand_tensor({3, 5}, 2);
  CHECK(x.contiguous().shares_storage(x));
  Tensor c = x.t().contiguous();
  CHECK_FALSE(c.shares_storage(x));
  CHECK(c.is_contiguous());
  CHECK(c.to_vector<double>() == x.t().to_vector<double>());
}

TEST_CASE("elementwise forward values, broadcasting and scalars") {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_vector<float>({10, 20, 30}, {3});
  CHECK(add(a, b).to_vector<float>() == std::vector<float>{11, 22, 33, 14, 25, 36});
  CHECK(sub(a, b).to_vector<float>() == std::vector<float>{-9, -18, -27, -6, -15, -24});
  CHECK(mul(a.t(), from_vector<float>({2, 3}, {2})).to_vector<float>() ==
        std::vector<float>{2, 12, 4, 15, 6, 18});
  CHECK((a * 2.0 + 1.0).to_vector<float>() == std::vector<float>{3, 5, 7, 9, 11, 13});
  CHECK(relu(from_vector<float>({-1, 0, 2}, {3})).to_vector<float>() == std::vector<float>{0, 0, 2});
  CHECK(div(b, from_vector<float>({2}, {1})).to_vector<float>() == std::vector<float>{5, 10, 15});
}

TEST_CASE("activations and glu equal PyTorch's on both sides of 0") {
  // Reference: /usr/bin/python3 with torch 1.13, torch.nn.functional on float64
  // x = [-2, -0.5, 0, 0.3, 1.7] (leaky_relu, elu with alpha, selu, gelu's exact form).
  const Tensor x = from_vector<double>({-2.0, -0.5, 0.0, 0.3, 1.7}, {5});
  auto close = [](const Tensor& got, const std::vector<double>& want) {
    const auto g = got.to_vector<double>();
    REQUIRE(g.size() == want.size());
    for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(want[i]).epsilon(1e-14));
  };
  close(leaky_relu(x), {-0.02, -0.005, 0.0, 0.3, 1.7});
  close(leaky_relu(x, 0.2), {-0.4, -0.1, 0.0, 0.3, 1.7});
  close(elu(x), {-0.8646647167633873, -0.3934693402873666, 0.0, 0.3, 1.7});
  close(elu(x, 0.5), {-0.43233235838169365, -0.1967346701436833, 0.0, 0.3, 1.7});
  close(selu(x), {-1.5201664685956948, -0.6917581878028713, 0.0, 0.31521029620664415, 1.7861916785043168});
  close(gelu(x), {-0.04550026389635842, -0.15426876936299344, 0.0, 0.1853734266566858, 1.6242387133104768});
  // torch.nn.functional.glu(x, -1) of [[1, -2, 0.5, 3], [-0.7, 0.2, -1.5, 0]]
  close(glu(from_vector<double>({1.0, -2.0, 0.5, 3.0, -0.7, 0.2, -1.5, 0.0}, {2, 4})),
        {0.6224593312018546, -1.9051482536448667, -0.12769786666444943, 0.1});
}

TEST_CASE("layer_norm equals PyTorch's, with and without the affine part") {
  // Reference: torch.nn.functional.layer_norm(x, [3], gamma, beta, 1e-5) and (x, [3], None, None, 0.5) in
  // float64, torch 1.13 (/usr/bin/python3).
  const Tensor x = from_vector<double>({1.0, -2.0, 0.5, 3.0, 3.5, -1.0}, {2, 3});
  const Tensor gamma = from_vector<double>({0.5, 2.0, -1.0}, {3}), beta = from_vector<double>({0.1, 0.0, -0.3}, {3});
  const std::vector<double> affine{0.5444991540211251, -2.7939946824185005, -0.8079990331670002,
                                   0.3896617038938798, 1.6552097365364555,  1.106928276055987};
  const std::vector<double> plain{0.7826237921249264, -1.2298373876248843, 0.447213595499958,
                                  0.5466081666101212, 0.7808688094430303,  -1.3274769760531515};
  const auto a = layer_norm(x, gamma, beta).to_vector<double>(), p = layer_norm(x, Tensor(), Tensor(), 0.5).to_vector<double>();
  for (size_t i = 0; i < 6; ++i) {
    CHECK(a[i] == doctest::Approx(affine[i]).epsilon(1e-13));
    CHECK(p[i] == doctest::Approx(plain[i]).epsilon(1e-13));
  }
}

TEST_CASE("in-place multiply by a broadcast tensor") {
  Tensor x = from_vector<float>({1, 2, 3, 4}, {2, 2});
  mul_(x, scalar_tensor(0.5));
  CHECK(x.to_vector<float>() == std::vector<float>{0.5f, 1, 1.5f, 2});
  mul_(x, from_vector<float>({2, 4}, {2}));
  CHECK(x.to_vector<float>() == std::vector<float>{1, 4, 3, 8});
  CHECK_THROWS_WITH_AS(mul_(x, zeros({3})), doctest::Contains("mul_: shapes [2, 2] and [3]"), tcn::Error);
}

TEST_CASE("reductions") {
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(sum(x).item() == 21);
  CHECK(sum(x, {0}).to_vector<double>() == std::vector<double>{5, 7, 9});
  CHECK(sum(x, {1}, true).shape() == Shape{2, 1});
  CHECK(mean(x, {1}).to_vector<double>() == std::vector<double>{2, 5});
  auto [v, i] = max(from_vector<double>({3, 9, 9, 1, 0, 2}, {2, 3}), 1);
  CHECK(v.to_vector<double>() == std::vector<double>{9, 2});
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, 2});  // first index on ties
  // float32 sums accumulate in double: 2^24 + 1 + 1 ... stays exact-ish.
  Tensor big = full({1 << 20}, 0.1, {DType::F32});
  CHECK(std::abs(sum(big).item() - 104857.6) < 0.05);
}

TEST_CASE("matmul against a naive product, transposes without copies") {
  Tensor a = rand_tensor({4, 3}, 3), b = rand_tensor({3, 5}, 4);
  auto naive = [](const Tensor& x, const Tensor& y) {
    auto vx = x.to_vector<double>(), vy = y.to_vector<double>();
    int64_t M = x.size(0), K = x.size(1), N = y.size(1);
    std::vector<double> out(M * N, 0);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        for (int64_t k = 0; k < K; ++k) out[i * N + j] += vx[i * K + k] * vy[k * N + j];
    return from_vector(out, {M, N});
  };
  CHECK_CLOSE(mm(a, b), naive(a, b), 1e-12, 1e-12);
  Tensor at = rand_tensor({3, 4}, 5).t();  // [4, 3], column-major
  Tensor bt = rand_tensor({5, 3}, 6).t();  // [3, 5], column-major
  CHECK_CLOSE(mm(at, bt), naive(at, bt), 1e-12, 1e-12);
  Tensor a3 = rand_tensor({2, 4, 3}, 7);
  Tensor m3 = matmul(a3, b);
  CHECK(m3.shape() == Shape{2, 4, 5});
  CHECK_CLOSE(m3.narrow(0, 1, 1).squeeze(0), naive(a3.narrow(0, 1, 1).squeeze(0), b), 1e-12, 1e-12);
  // Strided operand BLAS cannot take directly (every other column): copied first.
  Tensor wide = rand_tensor({4, 6}, 8);
  Tensor odd = wide.view({4, 3, 2}).narrow(2, 0, 1).squeeze(2);  // [4, 3], strides (6, 2)
  CHECK_CLOSE(mm(odd, b), naive(odd, b), 1e-12, 1e-12);
  // Empty products: K == 0 gives zeros, M == 0 an empty result.
  CHECK(mm(zeros({2, 0}), zeros({0, 3})).to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(mm(zeros({0, 4}), zeros({4, 3})).shape() == Shape{0, 3});
}

TEST_CASE("gather and scatter rows") {
  Tensor table = from_vector<float>({0, 1, 10, 11, 20, 21}, {3, 2});
  Tensor idx = from_vector<int64_t>({2, 0, 2}, {3});
  CHECK(gather_rows(table, idx).to_vector<float>() == std::vector<float>{20, 21, 0, 1, 20, 21});
  Tensor src = from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  CHECK(scatter_add_rows(src, idx, 3).to_vector<float>() == std::vector<float>{3, 4, 0, 0, 6, 8});
}

TEST_CASE("pad and cat values") {
  Tensor x = from_vector<float>({1, 2, 3, 4}, {2, 2});
  CHECK(pad(x, 1, 2, 0).to_vector<float>() == std::vector<float>{0, 0, 1, 2, 0, 0, 3, 4});
  CHECK(cat({x, x.t()}, 0).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 1, 3, 2, 4});
}

TEST_CASE("dtype conversion") {
  Tensor x = from_vector<double>({1.5, -2.25}, {2});
  CHECK(x.to(DType::F32).to_vector<float>() == std::vector<float>{1.5f, -2.25f});
  CHECK(x.to(DType::I64).to_vector<int64_t>() == std::vector<int64_t>{1, -2});
}

}  // TEST_SUITE
