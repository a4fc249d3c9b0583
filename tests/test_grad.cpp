// Finite-difference gradient checks, one or more per differentiable op, in
// float64, with broadcasting and non-contiguous inputs.
#include "helpers.h"

using namespace tcn;
using tcn::test::check_gradients;
using tcn::test::leaf;
using tcn::test::rand_tensor;

TEST_SUITE("gradcheck") {

TEST_CASE("add, sub, mul, div with broadcasting") {
  Tensor a = leaf(rand_tensor({3, 4}, 1, true));
  Tensor b = leaf(rand_tensor({4}, 2));
  Tensor c = leaf(rand_tensor({2, 1, 4}, 3));
  Tensor d = leaf(rand_tensor({3, 1}, 4, false, 0.5, 2.0));
  check_gradients([](const TensorList& x) { return add(x[0], x[1]); }, {a, b});
  check_gradients([](const TensorList& x) { return sub(x[2], x[0]); }, {a, b, c});
  check_gradients([](const TensorList& x) { return mul(x[0], x[2]); }, {a, b, c});
  check_gradients([](const TensorList& x) { return div(x[0], x[1]); }, {a, d});
  check_gradients([](const TensorList& x) { return div(x[0], x[1]); }, {c, d});
}

TEST_CASE("mul with only one side requiring grad") {
  Tensor a = leaf(rand_tensor({3, 4}, 5));
  Tensor b = rand_tensor({3, 4}, 6);
  check_gradients([](const TensorList& x) { return mul(x[0], x[1]); }, {a, b});
  check_gradients([](const TensorList& x) { return mul(x[1], x[0]); }, {a, b});
}

TEST_CASE("unary ops") {
  Tensor x = leaf(rand_tensor({4, 5}, 7, true));
  Tensor pos = leaf(rand_tensor({4, 5}, 8, true, 0.2, 3.0));
  check_gradients([](const TensorList& v) { return neg(v[0]); }, {x});
  check_gradients([](const TensorList& v) { return tanh(v[0]); }, {x});
  check_gradients([](const TensorList& v) { return sigmoid(v[0]); }, {x});
  check_gradients([](const TensorList& v) { return exp(v[0]); }, {x});
  check_gradients([](const TensorList& v) { return log(v[0]); }, {pos});
  check_gradients([](const TensorList& v) { return sqrt(v[0]); }, {pos});
  check_gradients([](const TensorList& v) { return pow(v[0], 3.0); }, {x});
  check_gradients([](const TensorList& v) { return pow(v[0], -1.5); }, {pos});
  check_gradients([](const TensorList& v) { return add(v[0], 2.5); }, {x});
  check_gradients([](const TensorList& v) { return mul(v[0], -1.75); }, {x});
  check_gradients([](const TensorList& v) { return 3.0 - v[0] / 2.0; }, {x});
  check_gradients([](const TensorList& v) { return 2.0 / v[0]; }, {pos});
  check_gradients([](const TensorList& v) { return minimum(v[0], 0.3); }, {x});
}

TEST_CASE("relu away from the kink") {
  // Keep |x| >= 0.1 so finite differences never straddle 0.
  auto v = rand_tensor({6, 7}, 9).to_vector<double>();
  for (auto& e : v) e = e >= 0 ? e + 0.1 : e - 0.1;
  Tensor x = leaf(from_vector(v, {6, 7}));
  check_gradients([](const TensorList& v) { return relu(v[0]); }, {x});
}

TEST_CASE("add_relu: gradients with broadcasting, and equal to relu(add(a, b)) bit for bit") {
  // b broadcasts along a's rows; a is moved so that |a + b| >= 0.1 (no finite difference straddles the kink).
  Tensor b = rand_tensor({7}, 47);
  auto av = rand_tensor({6, 7}, 48).to_vector<double>();
  const auto bv = b.to_vector<double>();
  for (size_t i = 0; i < av.size(); ++i) {
    const double s = av[i] + bv[i % 7];
    av[i] += s >= 0 ? 0.1 : -0.1;
  }
  Tensor a = leaf(from_vector(av, {6, 7})), bl = leaf(b);
  check_gradients([](const TensorList& v) { return add_relu(v[0], v[1]); }, {a, bl});
  Tensor a1 = leaf(clone(a.detach())), b1 = leaf(clone(b.detach()));  // fresh leaves: no gradients yet
  Tensor a2 = leaf(clone(a.detach())), b2 = leaf(clone(b.detach()));
  Tensor w = rand_tensor({6, 7}, 49);
  Tensor fused = add_relu(a1, b1);
  sum(mul(fused, w)).backward();
  Tensor composed = relu(add(a2, b2));
  sum(mul(composed, w)).backward();
  CHECK(fused.to_vector<double>() == composed.to_vector<double>());
  CHECK(a1.grad().to_vector<double>() == a2.grad().to_vector<double>());
  CHECK(b1.grad().to_vector<double>() == b2.grad().to_vector<double>());
}

TEST_CASE("sum and mean over dims") {
  Tensor x = leaf(rand_tensor({2, 3, 4}, 11, true));
  check_gradients([](const TensorList& v) { return sum(v[0]); }, {x});
  check_gradients([](const TensorList& v) { return sum(v[0], {1}); }, {x});
  check_gradients([](const TensorList& v) { return sum(v[0], {0, 2}, true); }, {x});
  check_gradients([](const TensorList& v) { return sum(v[0], {-1}); }, {x});
  check_gradients([](const TensorList& v) { return mean(v[0], {0, 1}); }, {x});
  check_gradients([](const TensorList& v) { return mean(v[0]); }, {x});
}

TEST_CASE("max along a dim") {
  // Distinct values so the argmax is stable under the finite-difference step.
  std::vector<double> v(24);
  for (int i = 0; i < 24; ++i) v[i] = ((i * 7) % 24) * 0.1;
  Tensor x = leaf(from_vector(v, {2, 3, 4}));
  check_gradients([](const TensorList& t) { return max(t[0], 1).first; }, {x});
  check_gradients([](const TensorList& t) { return max(t[0], -1, true).first; }, {x});
}

TEST_CASE("sum_to reverses broadcasting") {
  Tensor x = leaf(rand_tensor({2, 3, 4}, 12));
  check_gradients([](const TensorList& v) { return sum_to(v[0], {3, 1}); }, {x});
  check_gradients([](const TensorList& v) { return sum_to(v[0], {4}); }, {x});
}

TEST_CASE("mm, bmm and matmul, including transposed views") {
  Tensor a = leaf(rand_tensor({3, 5}, 13));
  Tensor at = leaf(rand_tensor({3, 5}, 14, true));  // non-contiguous: a transposed buffer
  Tensor b = leaf(rand_tensor({5, 2}, 15, true));
  check_gradients([](const TensorList& v) { return mm(v[0], v[1]); }, {a, b});
  check_gradients([](const TensorList& v) { return mm(v[0], v[1]); }, {at, b});
  Tensor ba = leaf(rand_tensor({2, 3, 4}, 16));
  Tensor bb = leaf(rand_tensor({2, 4, 5}, 17, true));
  check_gradients([](const TensorList& v) { return bmm(v[0], v[1]); }, {ba, bb});
  Tensor w = leaf(rand_tensor({4, 6}, 18));
  check_gradients([](const TensorList& v) { return matmul(v[0], v[1]); }, {ba, w});
  Tensor bc = leaf(rand_tensor({4, 5}, 19));
  check_gradients([](const TensorList& v) { return matmul(v[0], v[1]); }, {ba, bc});  // broadcast batch
}

TEST_CASE("gather_rows and scatter_add_rows with duplicate indices") {
  Tensor table = leaf(rand_tensor({5, 3}, 20));
  Tensor idx = from_vector<int64_t>({4, 0, 4, 2, 4, 1}, {2, 3});
  check_gradients([idx](const TensorList& v) { return gather_rows(v[0], idx); }, {table});
  Tensor src = leaf(rand_tensor({2, 3, 3}, 21));
  check_gradients([idx](const TensorList& v) { return scatter_add_rows(v[0], idx, 6); }, {src});
}

TEST_CASE("pad and cat") {
  Tensor x = leaf(rand_tensor({2, 3, 4}, 22, true));
  check_gradients([](const TensorList& v) { return pad(v[0], 1, 2, 1); }, {x});
  check_gradients([](const TensorList& v) { return pad(v[0], -1, 0, 3, 1.5); }, {x});
  Tensor y = leaf(rand_tensor({2, 2, 4}, 23));
  check_gradients([](const TensorList& v) { return cat({v[0], v[1], v[0]}, 1); }, {x, y});
}

TEST_CASE("views: reshape, view, transpose, permute, narrow, expand, squeeze") {
  Tensor x = leaf(rand_tensor({2, 3, 4}, 24, true));  // non-contiguous: reshape copies
  Tensor c = leaf(rand_tensor({2, 3, 4}, 25));
  check_gradients([](const TensorList& v) { return v[0].reshape({4, 6}); }, {x});
  check_gradients([](const TensorList& v) { return v[0].view({6, -1}); }, {c});
  check_gradients([](const TensorList& v) { return v[0].transpose(0, 2); }, {x});
  check_gradients([](const TensorList& v) { return v[0].permute({1, 2, 0}); }, {x});
  check_gradients([](const TensorList& v) { return v[0].narrow(2, 1, 2); }, {x});
  check_gradients([](const TensorList& v) { return v[0].narrow(1, 2, 1).squeeze(1); }, {x});
  check_gradients([](const TensorList& v) { return v[0].unsqueeze(1).expand({2, 5, 3, 4}); }, {x});
  Tensor b = leaf(rand_tensor({3, 1}, 26));
  check_gradients([](const TensorList& v) { return v[0].expand({2, 3, 4}); }, {b});
}

TEST_CASE("contiguous, clone and dtype round trip") {
  Tensor x = leaf(rand_tensor({3, 4}, 27, true));
  check_gradients([](const TensorList& v) { return v[0].contiguous(); }, {x});
  check_gradients([](const TensorList& v) { return clone(v[0]); }, {x});
  // float64 -> float32 -> float64 loses precision: check with a float32-sized tolerance.
  check_gradients([](const TensorList& v) { return v[0].to(DType::F32).to(DType::F64); }, {x}, 1e-3, 1e-3, 1e-3);
}

TEST_CASE("a composed expression with fan-out accumulates gradients") {
  Tensor x = leaf(rand_tensor({3, 4}, 28));
  Tensor w = leaf(rand_tensor({4, 4}, 29, true));
  check_gradients(
      [](const TensorList& v) {
        Tensor h = tanh(matmul(v[0], v[1]));
        return add(mul(h, v[0]), sigmoid(matmul(h, v[1])));  // x and w each used twice
      },
      {x, w});
}

TEST_CASE("conv1d: causal, dilated, 'same' padding, 1x1, no bias") {
  Tensor x = leaf(rand_tensor({2, 9, 3}, 30, true));  // [B, T, Cin], non-contiguous
  Tensor w = leaf(rand_tensor({4, 3, 3}, 31));         // [Cout, Cin, K]
  Tensor b = leaf(rand_tensor({4}, 32));
  check_gradients([](const TensorList& v) { return conv1d(v[0], v[1], v[2], 1, 2); }, {x, w, b});
  check_gradients([](const TensorList& v) { return conv1d(v[0], v[1], v[2], 2, 4); }, {x, w, b});
  check_gradients([](const TensorList& v) { return conv1d(v[0], v[1], v[2], 4, 8); }, {x, w, b});  // taps beyond T
  check_gradients([](const TensorList& v) { return conv1d(v[0], v[1], Tensor(), 2, 2); }, {x, w});  // symmetric
  Tensor w1 = leaf(rand_tensor({5, 3, 1}, 33));
  check_gradients([](const TensorList& v) { return conv1d(v[0], v[1], v[2], 1, 0); }, {x, w1, leaf(rand_tensor({5}, 34))});
  // A frozen weight: the bias gradient (a row of the packed weight gradient) is still computed.
  check_gradients([w](const TensorList& v) { return conv1d(v[0], w.detach(), v[1], 2, 4); }, {x, b});
}

TEST_CASE("cross_entropy on a narrowed window") {
  Tensor logits = leaf(rand_tensor({2, 5, 7}, 35, false, -3, 3));
  Tensor targets = from_vector<int64_t>({0, 6, 3, 3, 1, 2}, {2, 3});
  check_gradients([targets](const TensorList& v) { return cross_entropy(v[0].narrow(1, 2, 3), targets); }, {logits});
}

TEST_CASE("dropout with a fixed generator state") {
  Tensor x = leaf(rand_tensor({4, 6}, 36, true));
  check_gradients(
      [](const TensorList& v) {
        Generator gen(77);  // the same mask at every evaluation
        return dropout(v[0], 0.3, gen);
      },
      {x});
}

TEST_CASE("relu_dropout: gradients, and equal to dropout(relu(x)) with the same mask") {
  Tensor x = leaf(rand_tensor({5, 8}, 39, true));
  check_gradients(
      [](const TensorList& v) {
        Generator gen(78);
        return relu_dropout(v[0], 0.4, gen);
      },
      {x});
  Generator g1(5), g2(5);
  Tensor a = leaf(rand_tensor({6, 7}, 40)), b = leaf(clone(a.detach()));
  Tensor w = rand_tensor({6, 7}, 41);
  Tensor fused = relu_dropout(a, 0.3, g1);
  sum(mul(fused, w)).backward();
  Tensor composed = dropout(relu(b), 0.3, g2);
  sum(mul(composed, w)).backward();
  CHECK(fused.to_vector<double>() == composed.to_vector<double>());
  CHECK(a.grad().to_vector<double>() == b.grad().to_vector<double>());
}

TEST_CASE("relu_dropout_add_relu: gradients, and equal to add_relu(relu_dropout(x), res) with the same draws") {
  // x away from relu's kink; res chosen so that no sum relu_dropout(x) + res is within 0.1 of 0 for either mask value.
  auto xv = rand_tensor({5, 8}, 50).to_vector<double>();
  for (auto& e : xv) e = e >= 0 ? e + 0.2 : e - 0.2;
  auto rv = rand_tensor({5, 8}, 51).to_vector<double>();
  for (size_t i = 0; i < rv.size(); ++i) {
    const double h = xv[i] > 0 ? xv[i] / 0.6 : 0.0;  // the kept value (scale 1 / (1 - 0.4)), or 0
    for (double s : {h, 0.0})
      if (std::abs(s + rv[i]) < 0.1) rv[i] += s + rv[i] >= 0 ? 0.2 : -0.2;
  }
  Tensor x = leaf(from_vector(xv, {5, 8})), res = leaf(from_vector(rv, {5, 8}));
  check_gradients(
      [](const TensorList& v) {
        Generator gen(79);  // the same mask at every evaluation
        return relu_dropout_add_relu(v[0], v[1], 0.4, gen);
      },
      {x, res});
  Generator g1(6), g2(6);
  Tensor a = leaf(rand_tensor({6, 7}, 52)), r = leaf(rand_tensor({6, 7}, 53));
  Tensor a2 = leaf(clone(a.detach())), r2 = leaf(clone(r.detach()));
  Tensor w = rand_tensor({6, 7}, 54);
  Tensor fused = relu_dropout_add_relu(a, r, 0.3, g1);
  sum(mul(fused, w)).backward();
  Tensor composed = add_relu(relu_dropout(a2, 0.3, g2), r2);
  sum(mul(composed, w)).backward();
  CHECK(fused.to_vector<double>() == composed.to_vector<double>());
  CHECK(a.grad().to_vector<double>() == a2.grad().to_vector<double>());
  CHECK(r.grad().to_vector<double>() == r2.grad().to_vector<double>());
  CHECK(g1.offset() == g2.offset());
}

TEST_CASE("lstm_layer equals the lstm_cell loop (its oracle), values and gradients") {
  const int64_t B = 3, T = 5, H = 4;
  Tensor xp = leaf(rand_tensor({B, T, 4 * H}, 42)), whh = leaf(rand_tensor({4 * H, H}, 43));
  Tensor h0 = leaf(rand_tensor({B, H}, 44)), c0 = leaf(rand_tensor({B, H}, 45));
  Tensor w = rand_tensor({B, T, H}, 46);
  auto [out, hT, cT] = lstm_layer(xp, whh, h0, c0);
  add(sum(mul(out, w)), add(sum(hT), sum(mul(cT, cT)))).backward();
  TensorList fused_grads = {xp.grad(), whh.grad(), h0.grad(), c0.grad()};
  for (const Tensor& t : {xp, whh, h0, c0}) t.zero_grad();
  Tensor h = h0, c = c0;
  TensorList outs;
  for (int64_t t = 0; t < T; ++t) {
    std::tie(h, c) = lstm_cell(add(xp.narrow(1, t, 1).squeeze(1), mm(h, whh.t())), c);
    outs.push_back(h);
  }
  Tensor ref = stack(outs, 1);
  CHECK_CLOSE(out, ref, 1e-12, 1e-10);
  CHECK_CLOSE(cT, c, 1e-12, 1e-10);
  add(sum(mul(ref, w)), add(sum(h), sum(mul(c, c)))).backward();
  TensorList ref_grads = {xp.grad(), whh.grad(), h0.grad(), c0.grad()};
  for (size_t i = 0; i < ref_grads.size(); ++i) CHECK_CLOSE(fused_grads[i], ref_grads[i], 1e-12, 1e-10);
  check_gradients(
      [](const TensorList& v) {
        auto [o, hh, cc] = lstm_layer(v[0], v[1], v[2], v[3]);
        return add(sum(o), mul(sum(cc), 0.5));
      },
      {xp, whh, h0, c0});
}

TEST_CASE("weight_norm equals its composition from ops (its oracle), values and gradients; gradcheck") {
  Tensor v = leaf(rand_tensor({5, 3, 2}, 47)), g = leaf(rand_tensor({5, 1, 1}, 48, false, 0.5, 2.0));
  Tensor w = rand_tensor({5, 3, 2}, 49);
  auto composed = [](const Tensor& v, const Tensor& g) {
    return mul(v, div(g, sqrt(sum(mul(v, v), {1, 2}, true))));
  };
  Tensor fused = weight_norm(v, g);
  CHECK_CLOSE(fused, composed(v, g), 1e-14, 1e-12);
  sum(mul(fused, w)).backward();
  TensorList fused_grads = {v.grad(), g.grad()};
  v.zero_grad();
  g.zero_grad();
  sum(mul(composed(v, g), w)).backward();
  CHECK_CLOSE(fused_grads[0], v.grad(), 1e-14, 1e-12);
  CHECK_CLOSE(fused_grads[1], g.grad(), 1e-14, 1e-12);
  check_gradients([](const TensorList& x) { return weight_norm(x[0], x[1]); }, {v, g});
  check_gradients([](const TensorList& x) { return weight_norm(x[0], x[1]); },
                  {leaf(rand_tensor({4, 6}, 50, true)), leaf(rand_tensor({4, 1}, 51, false, 0.5, 2.0))});  // a view
  CHECK_ERROR(weight_norm(v, rand_tensor({5}, 52)), "weight_norm: g [5] must be [5, 1, ...] for v [5, 3, 2]");
}

TEST_CASE("lstm_cell, both outputs") {
  Tensor gates = leaf(rand_tensor({3, 8}, 37, false, -2, 2));
  Tensor c = leaf(rand_tensor({3, 2}, 38));
  check_gradients(
      [](const TensorList& v) {
        auto [h, cn] = lstm_cell(v[0], v[1]);
        return add(h, mul(cn, 0.7));
      },
      {gates, c});
  check_gradients([](const TensorList& v) { return lstm_cell(v[0], v[1]).second; }, {gates, c});
}

}  // TEST_SUITE
