// What data-parallel training (nn/distributed.h) builds on, checked in one
// process: the tape's grad-ready hooks, dropout masks drawn by shards of a
// batch (Generator::set_shard), and the gradient reducer of a one-process run.
// The run across processes is tests/cli_mpi.sh (mpirun -np 2 vs one process).
#include <vector>

#include "helpers.h"
#include "autograd/tape.h"
#include "core/devices.h"
#include "nn/distributed.h"

using namespace tcn;
using tcn::test::rand_tensor;

TEST_CASE("grad-ready hooks fire once per backward, after the last node that feeds the leaf") {
  Tensor a = from_vector<double>({1.0, 2.0}, {2}).requires_grad_();
  Tensor b = from_vector<double>({3.0, -1.0}, {2}).requires_grad_();
  Tensor unused = from_vector<double>({5.0}, {1}).requires_grad_();
  std::vector<std::string> events;
  std::vector<double> a_grad_seen;
  autograd::set_grad_ready_hook(a, [&] {
    events.push_back("a");
    a_grad_seen = a.grad().to_vector<double>();
  });
  autograd::set_grad_ready_hook(b, [&] { events.push_back("b"); });
  autograd::set_grad_ready_hook(unused, [&] { events.push_back("unused"); });
  // a is used first (node 0) and again late (node 2); b only in node 1.
  Tensor y = mul(a, a);        // node 0: a
  Tensor z = mul(y, b);        // node 1: b
  Tensor loss = sum(add(z, a));  // nodes 2 (a) and 3
  loss.backward();
  // Reverse sweep: node 3, node 2 (a not complete: node 0 still feeds it), node 1 (b done), node 0 (a done).
  CHECK(events == std::vector<std::string>{"b", "a"});
  // When a's hook ran its gradient was complete: d/da (a^2 b + a) = 2ab + 1.
  CHECK(a_grad_seen == std::vector<double>{2 * 1 * 3 + 1, 2 * 2 * -1 + 1});

  events.clear();
  a.zero_grad();
  b.zero_grad();
  sum(mul(a, b)).backward();
  CHECK(events.size() == 2);  // once each, every backward

  autograd::set_grad_ready_hook(a, nullptr);
  autograd::set_grad_ready_hook(b, nullptr);
  events.clear();
  sum(mul(a, b)).backward();
  CHECK(events.empty());
  CHECK_THROWS_WITH_AS(autograd::set_grad_ready_hook(y.detach(), [] {}),
                       "set_grad_ready_hook: the tensor must be a leaf that requires grad", Error);
}

TEST_CASE("dropout of N shards of a batch equals dropout of the whole batch (Generator::set_shard)") {
  // A [4, 6, 10] activation split into 2 ranks of [2, 6, 10] (and 4 of [1, 6, 10]),
  // three draws in a row, so the offsets must advance by the whole batch's.
  const Tensor x = rand_tensor({4, 6, 10}, 7, false, 0.0, 1.0);
  for (const int world : {2, 4}) {
    Generator whole(99, 5);
    std::vector<Generator> parts;
    for (int r = 0; r < world; ++r) {
      parts.emplace_back(99, 5);
      parts.back().set_shard(static_cast<uint64_t>(r), static_cast<uint64_t>(world));
    }
    const int64_t rows = 4 / world;
    for (int draw = 0; draw < 3; ++draw) {
      const std::vector<double> want = dropout(x, 0.3, whole).to_vector<double>();
      std::vector<double> got;
      for (int r = 0; r < world; ++r) {
        const std::vector<double> part = relu_dropout(x.narrow(0, r * rows, rows), 0.3, parts[r]).to_vector<double>();
        got.insert(got.end(), part.begin(), part.end());
      }
      // x >= 0, so relu_dropout(x) = dropout(x): the masks must agree element for element.
      CHECK(got == want);
    }
    for (const Generator& g : parts) CHECK(g.offset() == whole.offset());
  }
  // A share that does not start on a Philox counter boundary is refused, with the reason.
  Generator g(1);
  g.set_shard(1, 2);
  CHECK_THROWS_WITH_AS(dropout(rand_tensor({2, 3}, 8), 0.5, g), doctest::Contains("multiple of 4 values"), Error);
  CHECK_THROWS_WITH_AS(g.set_shard(2, 2), "Generator::set_shard: rank 2 of 2 processes", Error);
}

TEST_CASE("GradReducer in a one-process run leaves the gradients as backward made them") {
  dist::Comm& comm = dist::Comm::world();
  REQUIRE(comm.size() == 1);  // tcn_tests is never started by mpirun
  // The first parameter gets no gradient; it is the last one backward would
  // produce, so it lands alone in the last bucket.
  Tensor unused = rand_tensor({4}, 4).requires_grad_();
  std::vector<Tensor> params{unused};
  for (int64_t n : {300, 5, 1000, 7}) params.push_back(rand_tensor({n}, static_cast<uint64_t>(n)).requires_grad_());
  // Buckets of 2 KiB of float64, 256 values, filled in reverse order: [7, 1000], [5, 300], [unused]
  // (a bucket closes once it holds 256 values or more, so one parameter may exceed it).
  dist::GradReducer reducer(comm, params, 2048);
  CHECK(reducer.num_buckets() == 3);
  for (int step = 0; step < 2; ++step) {
    Tensor loss = zeros({}, {DType::F64});
    for (size_t k = 1; k < params.size(); ++k) loss = add(loss, sum(mul(params[k], params[k])));
    loss.backward();
    reducer.finish();
    for (size_t k = 1; k < params.size(); ++k)
      CHECK(params[k].grad().to_vector<double>() == mul(params[k].detach(), 2.0).to_vector<double>());
    CHECK_FALSE(unused.grad().defined());  // no gradient came: none is made up
    // The two buckets with gradients started during backward; the unused one in finish().
    CHECK(reducer.last().buckets == 3);
    CHECK(reducer.last().started_in_backward == 2);
    for (const Tensor& p : params) p.zero_grad();
  }
}

TEST_SUITE("cuda") {
// On a GPU in a build with NCCL: the reducer's all-reduces go through a
// one-rank NCCL communicator, whose sum must leave every gradient as it was
// (the device check's test of the NCCL path). Elsewhere reported skipped.
TEST_CASE("GradReducer over NCCL with one rank: CUDA gradients unchanged" *
          doctest::skip(!cuda::is_available() || cuda::emulated() || !dist::built_with_nccl())) {
  dist::Comm& comm = dist::Comm::world();
  REQUIRE(comm.size() == 1);
  const Device gpu = Device::cuda(0);
  std::vector<Tensor> params, want;
  for (int64_t n : {100000, 3, 700000}) {
    Tensor p = rand_tensor({n}, static_cast<uint64_t>(n), false, -1.0, 1.0, DType::F32).to(gpu).requires_grad_();
    params.push_back(p);
  }
  dist::GradReducer reducer(comm, params, size_t{1} << 20);
  Tensor loss = zeros({}, {DType::F32, gpu});
  for (const Tensor& p : params) loss = add(loss, sum(mul(p, p)));
  loss.backward();
  for (const Tensor& p : params) want.push_back(p.grad().to(Device::cpu()));
  reducer.finish();
  for (size_t k = 0; k < params.size(); ++k)
    CHECK(params[k].grad().to(Device::cpu()).to_vector<float>() == want[k].to_vector<float>());
  CHECK(reducer.last().buckets == reducer.num_buckets());
}
}  // TEST_SUITE("cuda")
