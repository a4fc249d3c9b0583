// Fused ops against their compositions from simpler ops (their oracles): the
// same values and gradients, bit for bit where the fused kernel rounds each
// step as the composition does. Each op's finite-difference gradcheck, CUDA
// comparison and error messages are its entries in the op registry
// (tests/op_cases.cpp, run by tests/test_ops.cpp).
#include "helpers.h"

using namespace tcn;
using tcn::test::leaf;
using tcn::test::rand_tensor;

TEST_SUITE("gradcheck") {

TEST_CASE("add_relu equals relu(add(a, b)) bit for bit, values and gradients") {
  Tensor a1 = leaf(rand_tensor({6, 7}, 48)), b1 = leaf(rand_tensor({7}, 47));
  Tensor a2 = leaf(clone(a1.detach())), b2 = leaf(clone(b1.detach()));
  Tensor w = rand_tensor({6, 7}, 49);
  Tensor fused = add_relu(a1, b1);
  sum(mul(fused, w)).backward();
  Tensor composed = relu(add(a2, b2));
  sum(mul(composed, w)).backward();
  CHECK(fused.to_vector<double>() == composed.to_vector<double>());
  CHECK(a1.grad().to_vector<double>() == a2.grad().to_vector<double>());
  CHECK(b1.grad().to_vector<double>() == b2.grad().to_vector<double>());
}

TEST_CASE("relu_dropout equals dropout(relu(x)) with the same mask, values and gradients") {
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

TEST_CASE("relu_dropout_add_relu equals add_relu(relu_dropout(x), res) with the same draws, values and gradients") {
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

TEST_CASE("lstm_layer equals the lstm_cell loop (its oracle), values and gradients (gradcheck: tests/op_cases.cpp)") {
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
}

TEST_CASE("weight_norm equals its composition from ops (its oracle), values and gradients") {
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
}

TEST_CASE("layer_norm equals its composition from ops (its oracle), values and gradients") {
  Tensor x = leaf(rand_tensor({3, 4, 6}, 80, true)), gamma = leaf(rand_tensor({6}, 81)), beta = leaf(rand_tensor({6}, 82));
  Tensor w = rand_tensor({3, 4, 6}, 83);
  auto composed = [](const Tensor& x, const Tensor& gamma, const Tensor& beta) {
    const Tensor centred = sub(x, mean(x, {-1}, true));
    const Tensor var = mean(mul(centred, centred), {-1}, true);  // biased, as PyTorch's
    return add(mul(div(centred, sqrt(add(var, 1e-5))), gamma), beta);
  };
  Tensor fused = layer_norm(x, gamma, beta);
  CHECK_CLOSE(fused, composed(x, gamma, beta), 1e-13, 1e-12);
  sum(mul(fused, w)).backward();
  TensorList fused_grads = {x.grad(), gamma.grad(), beta.grad()};
  for (const Tensor& t : {x, gamma, beta}) t.zero_grad();
  sum(mul(composed(x, gamma, beta), w)).backward();
  CHECK_CLOSE(fused_grads[0], x.grad(), 1e-12, 1e-10);
  CHECK_CLOSE(fused_grads[1], gamma.grad(), 1e-12, 1e-10);
  CHECK_CLOSE(fused_grads[2], beta.grad(), 1e-12, 1e-10);
}

}  // TEST_SUITE
