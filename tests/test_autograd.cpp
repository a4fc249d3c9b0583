// The tape: what is recorded, when it is freed, how gradients accumulate, and
// a check that the gradient checker itself catches a wrong backward.
#include "core/threads.h"
#include "helpers.h"

using namespace tcn;
using tcn::test::leaf;
using tcn::test::rand_tensor;

TEST_SUITE("autograd") {

TEST_CASE("ops record one node each, only when an input requires grad") {
  autograd::clear_tape();
  Tensor a = rand_tensor({3}, 1), w = leaf(rand_tensor({3}, 2));
  Tensor y = mul(a, 2.0);
  CHECK(autograd::tape_size() == 0);
  CHECK_FALSE(y.requires_grad());
  Tensor z = mul(y, w);
  CHECK(autograd::tape_size() == 1);
  CHECK(z.requires_grad());
  CHECK_FALSE(z.is_leaf());
  {
    autograd::NoGrad ng;
    Tensor q = mul(z, w);
    CHECK_FALSE(q.requires_grad());
    CHECK(autograd::tape_size() == 1);
  }
  Tensor d = z.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.shares_storage(z));
  sum(z).backward();
  CHECK(autograd::tape_size() == 0);  // freed by backward
  CHECK_CLOSE(w.grad(), mul(a, 2.0), 0, 0);
}

TEST_CASE("leaf gradients accumulate across backward calls until zero_grad") {
  Tensor w = leaf(from_vector<double>({1, 2}, {2}));
  sum(mul(w, 3.0)).backward();
  sum(mul(w, 3.0)).backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{6, 6});
  w.zero_grad();
  CHECK_FALSE(w.grad().defined());
  sum(mul(w, w)).backward();  // fan-out within one graph
  CHECK(w.grad().to_vector<double>() == std::vector<double>{2, 4});
}

TEST_CASE("a leaf's gradient never aliases another tensor's") {
  // add passes the same gradient to both inputs; clipping one in place must not change the other.
  Tensor a = leaf(rand_tensor({3}, 3)), b = leaf(rand_tensor({3}, 4));
  sum(add(a, b)).backward();
  CHECK_FALSE(a.grad().shares_storage(b.grad()));
  {
    autograd::NoGrad ng;
    mul_(a.grad(), 0.5);
  }
  CHECK(b.grad().to_vector<double>() == std::vector<double>{1, 1, 1});
}

TEST_CASE("backward of an output that is not the last op stops at its node") {
  Tensor w = leaf(from_vector<double>({2}, {1}));
  Tensor y = mul(w, 3.0);
  Tensor later = mul(w, 100.0);  // recorded after y, not part of y's graph
  sum(y).backward();
  CHECK(w.grad().item() == 3.0);
  (void)later;
}

TEST_CASE("the gradient checker catches a wrong backward") {
  // An op whose recorded backward is off by 1%: the checker must report it.
  Tensor x = leaf(rand_tensor({4}, 5));
  std::string mismatch = tcn::test::gradient_mismatch(
      [](const TensorList& v) {
        Tensor y = [&] {
          autograd::NoGrad ng;
          return mul(v[0], v[0]);
        }();
        if (autograd::needs_grad({v[0]}))
          autograd::record("bad_square", {v[0]}, {y}, [x = v[0].detach()](const TensorList& g) {
            return TensorList{mul(mul(g[0], x), 2.02)};
          });
        return y;
      },
      {x});
  CHECK(mismatch.find("input 0 element 0: analytic") != std::string::npos);
}

TEST_CASE("a backward that throws drops the tape: no stale gradient reaches the next backward") {
  Tensor x = leaf(from_vector<double>({2}, {1}));
  Tensor a = mul(x, 3.0);  // d/dx = 3, recorded before the failing op
  Tensor b = [&] {
    autograd::NoGrad ng;
    return mul(a, 1.0);
  }();
  autograd::record("fails", {a}, {b}, [](const TensorList&) -> TensorList { TCN_FAIL("simulated out of memory"); });
  CHECK_THROWS_WITH_AS(sum(b).backward(), doctest::Contains("simulated out of memory"), tcn::Error);
  CHECK(autograd::tape_size() == 0);
  x.zero_grad();
  sum(mul(x, x)).backward();  // d/dx x^2 = 2x = 4
  CHECK(x.grad().item() == 4.0);
}

TEST_CASE("set_grad stores a contiguous copy the leaf owns") {
  Tensor w = leaf(zeros({2, 3}, {DType::F64}));
  Tensor g = from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2}).t();  // a transposed view
  w.set_grad(g);
  CHECK(w.grad().is_contiguous());
  CHECK_FALSE(w.grad().shares_storage(g));
  CHECK(w.grad().to_vector<double>() == g.to_vector<double>());
  CHECK_THROWS_AS(w.set_grad(zeros({2, 3})), tcn::Error);  // float32 for a float64 leaf
}

TEST_CASE("reductions give the same bits on any number of threads") {
  Tensor x = rand_tensor({4000, 37}, 9);
  Tensor logits = rand_tensor({3000, 50}, 10, false, -3, 3);
  std::vector<int64_t> t(3000);
  for (int i = 0; i < 3000; ++i) t[i] = (i * 7) % 50;
  Tensor targets = from_vector(t, {3000});
  auto run = [&] {
    return std::make_pair(sum(x, {0}).to_vector<double>(), cross_entropy(logits, targets).item());
  };
  const int before = num_threads();
  set_num_threads(1);
  auto one = run();
  set_num_threads(7);
  auto seven = run();
  set_num_threads(before);
  CHECK(one.first == seven.first);
  CHECK(one.second == seven.second);
}

}  // TEST_SUITE
