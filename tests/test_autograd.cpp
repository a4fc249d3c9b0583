// The tape: what is recorded, when it is freed, how gradients accumulate, and
// a check that the gradient checker itself catches a wrong backward.
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

}  // TEST_SUITE
