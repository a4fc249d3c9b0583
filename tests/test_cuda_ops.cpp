// CUDA against the CPU beyond the op registry (tests/op_cases.cpp, whose
// "ops: CUDA against the CPU" mode compares every op's values and gradients):
// bit-exact layouts (packs, tails, misaligned and strided views), dropout's
// masks, bf16 conversions and GEMMs, and the kernels' special paths. Skipped,
// and reported as skipped, when no GPU is usable.
#include <limits>

#include "core/autocast.h"
#include "cuda/kernels.h"
#include "cuda_compare.h"
#include "helpers.h"

using namespace tcn;
using tcn::test::compare;
using tcn::test::rand_tensor;

namespace {

const bool kNoGpu = !cuda::is_available();

}  // namespace

TEST_SUITE("cuda") {

TEST_CASE("CUDA elementwise: merged dims, 16-byte packs with their tails, misaligned and strided views, as the CPU" *
          doctest::skip(kNoGpu)) {
  const Device cuda0 = Device::cuda(0);
  // Bit for bit: each output here is one IEEE-rounded operation (a sum, a product, a quotient, a copy or a
  // conversion) on both devices, with nothing for nvcc to contract into an FMA.
  auto same = [](const Tensor& gpu, const Tensor& cpu) {
    REQUIRE(gpu.device() == Device::cuda(0));
    CHECK(gpu.to(Device::cpu()).to(DType::F64).to_vector<double>() == cpu.to(DType::F64).to_vector<double>());
  };
  // Contiguous operands, every length up to 3 packs of each width (4 floats, 2 doubles, 8 bf16, 2 int64) and a
  // tail, so each pack position and each tail length runs; a view starting one element in breaks the 16-byte
  // alignment and takes the one-element path.
  for (int64_t n = 1; n <= 33; ++n) {
    for (DType dt : {DType::F32, DType::F64}) {
      Tensor a = rand_tensor({n + 1}, 200 + n, false, -1, 1, dt), b = rand_tensor({n + 1}, 300 + n, false, -1, 1, dt);
      Tensor ag = a.to(cuda0), bg = b.to(cuda0);
      same(mul(ag, bg), mul(a, b));
      same(add(ag.narrow(0, 1, n), bg.narrow(0, 0, n)), add(a.narrow(0, 1, n), b.narrow(0, 0, n)));
      same(relu(ag.narrow(0, 1, n)), relu(a.narrow(0, 1, n)));
      Tensor f = zeros({n}, {dt, cuda0});
      fill_(f, 0.5);
      same(f, full({n}, 0.5, {dt}));
    }
    Tensor a = rand_tensor({n}, 400 + n);
    same(a.to(cuda0).to(DType::BF16).to(DType::F32), a.to(DType::BF16).to(DType::F32));
    Tensor ab = a.to(DType::BF16), ib = mul(a, 1000.0).to(DType::I64);
    same(clone(ab.to(cuda0)), ab);  // bf16 and int64 copies (packs of 8 and of 2)
    same(clone(ib.to(cuda0)), ib);
  }
  // Views: dims that merge (the two leading ones of a narrowed inner dim), dims that must not (broadcast,
  // transposed), size-1 dims among them, and an in-place update through a view.
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor x = rand_tensor({3, 10, 7}, 501, false, -1, 1, dt), y = rand_tensor({3, 10, 5}, 502, false, -1, 1, dt);
    Tensor xg = x.to(cuda0), yg = y.to(cuda0);
    same(add(xg.narrow(2, 1, 5), yg), add(x.narrow(2, 1, 5), y));
    same(mul(xg.narrow(1, 2, 6), rand_tensor({7}, 503, false, -1, 1, dt).to(cuda0)),
         mul(x.narrow(1, 2, 6), rand_tensor({7}, 503, false, -1, 1, dt)));
    Tensor b = rand_tensor({10, 1}, 504, false, -1, 1, dt);
    same(sub(xg, b.to(cuda0)), sub(x, b));
    same(xg.transpose(0, 2).contiguous(), x.transpose(0, 2).contiguous());
    Tensor u = rand_tensor({2, 1, 6}, 505, false, -1, 1, dt), v = rand_tensor({1, 1, 6}, 506, false, -1, 1, dt);
    same(div(u.to(cuda0), v.to(cuda0)), div(u, v));
    same(u.to(cuda0).expand({2, 4, 6}).contiguous(), u.expand({2, 4, 6}).contiguous());
    Tensor xc = clone(x);
    // alpha -0.5 makes alpha * y exact, so the sum is the same rounded once (a GPU's contracted FMA) or twice.
    add_(xg.narrow(2, 2, 4), yg.narrow(2, 0, 4), -0.5);
    add_(xc.narrow(2, 2, 4), y.narrow(2, 0, 4), -0.5);
    same(xg, xc);
  }
}

TEST_CASE("CUDA in-place updates: fill_, add_ with broadcasting and alpha, mul_ with a scalar" * doctest::skip(kNoGpu)) {
  Tensor g = zeros({4, 3}, {DType::F32, Device::cuda(0)});
  fill_(g.narrow(0, 1, 2), 2.0);
  add_(g, full({3}, 0.5, {DType::F32, Device::cuda(0)}), 2.0);
  mul_(g, 3.0);
  CHECK(g.to_vector<float>() == std::vector<float>{3, 3, 3, 9, 9, 9, 9, 9, 9, 3, 3, 3});
}

TEST_CASE("CUDA dropout draws the CPU's masks" * doctest::skip(kNoGpu)) {
  // A thread takes a Philox block of four elements: sizes with each remainder mod 4, and two draws in a row.
  // The masks are equal (the same Philox stream), and each kept value is one product x * scale on both devices:
  // bit for bit.
  for (const Shape& shape : std::vector<Shape>{{64, 33}, {7, 5}, {1}, {2, 3}, {3, 1, 5, 3}}) {
    Tensor x = rand_tensor(shape, 16, false, -1, 1, DType::F32);
    for (bool with_relu : {false, true}) {
      Generator g1(21), g2(21);
      for (int draw = 0; draw < 2; ++draw) {
        Tensor cpu = with_relu ? relu_dropout(x, 0.3, g1) : dropout(x, 0.3, g1);
        Tensor gpu = with_relu ? relu_dropout(x.to(Device::cuda(0)), 0.3, g2) : dropout(x.to(Device::cuda(0)), 0.3, g2);
        CHECK(gpu.to(Device::cpu()).to_vector<float>() == cpu.to_vector<float>());
        CHECK(g1.offset() == g2.offset());
      }
    }
  }
  Tensor x = rand_tensor({64, 33}, 16, false, -1, 1, DType::F32);
  compare(
      [](const TensorList& v) {
        Generator g(5);
        return relu_dropout(dropout(v[0], 0.2, g), 0.4, g);
      },
      {x}, 1e-6);
}

TEST_CASE("CUDA vs CPU: dropout reads strided inputs and gradients; pad is one kernel where it can be" *
          doctest::skip(kNoGpu)) {
  // A narrowed [B, T, C] activation (as in a TCN block) into dropout, whose
  // gradient arrives transposed; the masks follow row-major element order on both.
  Tensor x = rand_tensor({3, 11, 5}, 17, false, -1, 1, DType::F32);
  for (bool with_relu : {false, true}) {
    Generator g1(4), g2(4);
    const Tensor xc = x.narrow(1, 2, 7), xg = x.to(Device::cuda(0)).narrow(1, 2, 7);
    REQUIRE(!xg.is_contiguous());
    Tensor cpu = with_relu ? relu_dropout(xc, 0.3, g1) : dropout(xc, 0.3, g1);
    Tensor gpu = with_relu ? relu_dropout(xg, 0.3, g2) : dropout(xg, 0.3, g2);
    CHECK(gpu.to(Device::cpu()).to_vector<float>() == cpu.to_vector<float>());
  }
  compare(
      [](const TensorList& v) {
        Generator g(6);
        return relu_dropout(v[0].narrow(1, 1, 8), 0.25, g).transpose(0, 2);
      },
      {x}, 1e-6);
  // The TCN block's tail: a narrowed conv output and a narrowed residual, the gradient arriving transposed.
  // Bit for bit: the kernel rounds x * scale and the sum with res separately (add_rn/mul_rn), as the CPU does.
  Tensor r = rand_tensor({3, 11, 5}, 20, false, -1, 1, DType::F32);
  for (int draw = 0; draw < 2; ++draw) {
    Generator g1(7 + draw), g2(7 + draw);
    Tensor cpu = relu_dropout_add_relu(x.narrow(1, 2, 7), r.narrow(1, 4, 7), 0.3, g1);
    Tensor gpu = relu_dropout_add_relu(x.to(Device::cuda(0)).narrow(1, 2, 7), r.to(Device::cuda(0)).narrow(1, 4, 7), 0.3, g2);
    CHECK(gpu.to(Device::cpu()).to_vector<float>() == cpu.to_vector<float>());
  }
  compare(
      [](const TensorList& v) {
        Generator g(8);
        return relu_dropout_add_relu(v[0].narrow(1, 1, 9), v[1].narrow(1, 0, 9), 0.25, g).transpose(0, 2);
      },
      {x, r}, 1e-6);
  // pad: of a narrowed 3D along dim 1 (the one-kernel path, and narrow's
  // backward), of a contiguous 4D along dim 2, of a transposed 2D (fill and copy).
  Tensor x4 = rand_tensor({2, 3, 4, 5}, 18, false, -1, 1, DType::F64);
  Tensor x2 = rand_tensor({6, 4}, 19, false, -1, 1, DType::F64);
  compare([](const TensorList& v) { return pad(v[0].narrow(1, 3, 5), 1, 2, 4); }, {x.to(DType::F64)}, 1e-12);
  compare([](const TensorList& v) { return pad(v[0], 2, 1, 3); }, {x4}, 1e-12);
  compare([](const TensorList& v) { return pad(v[0].transpose(0, 1), 0, 3, 0); }, {x2}, 1e-12);
  compare([](const TensorList& v) { return pad(v[0], 0, 0, 2, 1.5); }, {x2}, 1e-12);  // non-zero value
}

TEST_CASE("CUDA bf16: conversions, copies and fills as on the CPU; autocast GEMMs (cublasGemmEx) as the CPU's bf16" *
          doctest::skip(kNoGpu)) {
  const Device gpu(Device::cuda(0));
  // Conversions round to nearest even as the CPU's (NaN, infinities and ties included).
  std::vector<float> vals{1.0f, -2.5f, 3.14159f, 1e-30f, 65504.0f, 1.00390625f, 1.01171875f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  Tensor f = from_vector<float>(vals, {3, 3});
  const Tensor cpu_b = f.to(DType::BF16), gpu_b = f.to(gpu).to(DType::BF16);
  CHECK(gpu_b.dtype() == DType::BF16);
  CHECK(gpu_b.to(Device::cpu()).to(DType::F32).to_vector<float>() == cpu_b.to(DType::F32).to_vector<float>());
  CHECK(gpu_b.to(DType::F32).to(Device::cpu()).to_vector<float>() == cpu_b.to(DType::F32).to_vector<float>());
  // A strided bf16 copy (a transpose) and a fill.
  Tensor t = empty({3, 3}, {DType::BF16, gpu});
  copy_(t, gpu_b.t());
  CHECK(t.to(DType::F32).to(Device::cpu()).to_vector<float>() == cpu_b.t().contiguous().to(DType::F32).to_vector<float>());
  fill_(t, 0.75);
  CHECK(t.to(DType::F32).to(Device::cpu()).to_vector<float>() == std::vector<float>(9, 0.75f));

  // conv1d (causal, dilated, with bias) and mm with a transposed operand in
  // bf16: the CPU's bf16 results (exact products, float32 sums in another
  // order), gradients included; and not the float32 ones.
  Tensor x = rand_tensor({2, 29, 12}, 31, false, -1, 1, DType::F32);
  Tensor w = rand_tensor({10, 12, 3}, 32, false, -0.4, 0.4, DType::F32);
  Tensor b = rand_tensor({10}, 33, false, -1, 1, DType::F32);
  Tensor m = rand_tensor({7, 10}, 34, false, -1, 1, DType::F32);
  // Our GEMM path (cublasGemmEx) is what this compares, at 1e-5: cuDNN, which auto may choose on a GPU, rounds
  // its bf16 convolutions' outputs to bf16 (tests/test_cudnn.cpp checks it at bf16's tolerance).
  test::Backends gemm_path(test::conv_on(ConvImpl::Gemm));
  auto net = [](const TensorList& v) {
    Autocast bf16(Precision::BF16);
    Tensor y = conv1d(v[0], v[1], v[2], 2, 4);
    return mm(y.reshape({-1, 10}), v[3].t());
  };
  compare(net, {x, w, b, m}, 1e-5, 1e-6);
  Tensor g16, g32;
  {
    Autocast bf16(Precision::BF16);
    g16 = conv1d(x.to(gpu), w.to(gpu), b.to(gpu), 2, 4).to(Device::cpu());
  }
  g32 = conv1d(x.to(gpu), w.to(gpu), b.to(gpu), 2, 4).to(Device::cpu());
  CHECK(g16.dtype() == DType::F32);
  CHECK(test::rel_err(g16, g32) > 1e-4);  // the bf16 path ran on the device

  // The LSTM layer's recurrent GEMMs in bf16 (h_{t-1} and dG_t rounded by the cell kernels): the CPU's bf16
  // results, gradients included (the cell's float32 math in another order, so a looser bound), and not float32's.
  Tensor xp = rand_tensor({3, 9, 4 * 6}, 35, false, -1, 1, DType::F32);
  Tensor whh = rand_tensor({4 * 6, 6}, 36, false, -0.5, 0.5, DType::F32);
  Tensor h0 = rand_tensor({3, 6}, 37, false, -1, 1, DType::F32), c0 = rand_tensor({3, 6}, 38, false, -1, 1, DType::F32);
  auto lstm = [](const TensorList& v) {
    Autocast bf16(Precision::BF16);
    auto [hs, hT, cT] = lstm_layer(v[0], v[1], v[2], v[3]);
    return add(hs, mul(cT.unsqueeze(1), 0.5));
  };
  compare(lstm, {xp, whh, h0, c0}, 1e-4, 1e-5);
  Tensor l16, l32;
  {
    Autocast bf16(Precision::BF16);
    l16 = std::get<0>(lstm_layer(xp.to(gpu), whh.to(gpu), h0.to(gpu), c0.to(gpu))).to(Device::cpu());
  }
  l32 = std::get<0>(lstm_layer(xp.to(gpu), whh.to(gpu), h0.to(gpu), c0.to(gpu))).to(Device::cpu());
  CHECK(test::close_ratio(l16, l32, 1e-4, 0) > 1);  // more than 1e-4 apart somewhere: the recurrent GEMMs ran in bf16
}

// ---- coverage of every kernel path ---------------------------------------------------
namespace {

// int64 indices in [0, n) from a Philox stream (deterministic), of `shape`.
Tensor rand_indices(const Shape& shape, int64_t n, uint64_t seed) {
  Generator g(seed);
  auto u = rand(shape, {DType::F64}, g).to_vector<double>();
  std::vector<int64_t> v(u.size());
  for (size_t i = 0; i < u.size(); ++i) v[i] = std::min<int64_t>(n - 1, static_cast<int64_t>(u[i] * n));
  return from_vector<int64_t>(v, shape);
}

}  // namespace

TEST_CASE("CUDA vs CPU: long sums take the block reduction (n_red >= 1024)" * doctest::skip(kNoGpu)) {
  for (DType dt : {DType::F32, DType::F64}) {
    // Both sides accumulate in double: only the order of the additions differs.
    const double rtol = dt == DType::F32 ? 1e-5 : 1e-12;
    Tensor x = rand_tensor({40, 50, 7}, 31, true, -1, 1, dt);  // a transposed view: strided reads
    compare([](const TensorList& v) { return sum(v[0], {0, 1}); }, {x}, rtol);         // 7 blocks of 2000
    compare([](const TensorList& v) { return sum(v[0]); }, {x}, rtol);                 // 1 block of 14000
    compare([](const TensorList& v) { return sum(v[0], {0, 2}, true); }, {x}, rtol);   // 50 outputs of 280: a thread each
    compare([](const TensorList& v) { return mean(v[0], {1, 0}); }, {x}, rtol);
    // Right at the threshold: 1023 (one thread per output) and 1024 (one block per output).
    for (int64_t n : {1023, 1024, 1025}) {
      Tensor y = rand_tensor({3, n}, 32 + n, false, -1, 1, dt);
      compare([](const TensorList& v) { return sum(v[0], {1}); }, {y}, rtol);
      compare([](const TensorList& v) { return sum(v[0].t(), {0}, true); }, {y}, rtol);
    }
    // Outputs with a row between them (5 x 6 of 1100 each): the column path, 32 outputs per block.
    Tensor z = rand_tensor({5, 1100, 6}, 33, false, -1, 1, dt);
    compare([](const TensorList& v) { return sum(v[0], {1}); }, {z}, rtol);
    // A bias gradient: the column sums of [B, T, C] over B and T (merged into one dim of 1200), for C = 70
    // (two full blocks of 32 and a partial one) and for a narrowed C = 69 (rows 70 apart, outputs still neighbours).
    Tensor c = rand_tensor({30, 40, 70}, 35, false, -1, 1, dt);
    compare([](const TensorList& v) { return sum(v[0], {0, 1}); }, {c}, rtol);
    compare([](const TensorList& v) { return sum(v[0].narrow(2, 1, 69), {0, 1}, true); }, {c}, rtol);
    compare([](const TensorList& v) { return add(v[0], v[1]); }, {c, rand_tensor({70}, 36, false, -1, 1, dt)}, rtol);
  }
}

TEST_CASE("CUDA full sum of 2.8M float32 elements equals the CPU's float64 sum" * doctest::skip(kNoGpu)) {
  // The size of clipping's sum over all of a model's gradients. The kernel adds in
  // double and rounds once to float: within 2^-24 relative of the float64 sum.
  for (double lo : {0.0, -1.0}) {
    Tensor x = rand_tensor({2800 * 1000}, 34, false, lo, 1.0, DType::F32);
    double exact = 0;
    for (double v : x.to_vector<double>()) exact += v;
    Tensor xg = x.to(Device::cuda(0));
    const double got = sum(xg).item();
    INFO("lo ", lo, ": cuda ", got, " vs float64 ", exact);
    CHECK(std::abs(got - exact) <= 1e-6 * std::abs(exact));
    // 1400 blocks of 2000: each row's float is within one float rounding (2^-23) of the CPU's.
    CHECK_CLOSE(sum(xg.view({1400, 2000}), {1}).to(Device::cpu()), sum(x.view({1400, 2000}), {1}), 1e-7, 1e-6);
  }
}

TEST_CASE("CUDA vs CPU: batched GEMMs with strided and transposed operands" * doctest::skip(kNoGpu)) {
  for (DType dt : {DType::F32, DType::F64}) {
    const double rtol = dt == DType::F32 ? 1e-4 : 1e-10;
    auto r = [dt](const Shape& s, uint64_t seed) { return rand_tensor(s, seed, false, -1, 1, dt); };
    Tensor a = r({3, 4, 5}, 41), b = r({3, 5, 6}, 42);
    auto bmm_f = [](const TensorList& v) { return bmm(v[0], v[1]); };
    compare(bmm_f, {a, b}, rtol);
    // Transposed views (CUBLAS_OP_T on either side, and both).
    compare(bmm_f, {rand_tensor({3, 4, 5}, 43, true, -1, 1, dt), b}, rtol);
    compare(bmm_f, {a, rand_tensor({3, 5, 6}, 44, true, -1, 1, dt)}, rtol);
    compare(bmm_f, {rand_tensor({3, 4, 5}, 43, true, -1, 1, dt), rand_tensor({3, 5, 6}, 44, true, -1, 1, dt)},
            rtol);
    // The batch stride is not the largest one: [M, B, K] seen as [B, M, K] (ld = B*K, batch stride K).
    compare([](const TensorList& v) { return bmm(v[0].transpose(0, 1), v[1].permute({2, 0, 1})); },
            {r({4, 3, 5}, 45), r({5, 6, 3}, 46)}, rtol);
    // Row and column vectors (M = 1, N = 1).
    compare(bmm_f, {r({3, 1, 5}, 47), r({3, 5, 1}, 48)}, rtol);
    compare(bmm_f, {r({3, 5, 1}, 49), r({3, 1, 4}, 50)}, rtol);
    // matmul: broadcast batch dims (copied), a batch of one broadcast (batch stride 0), a 2-D right operand.
    compare([](const TensorList& v) { return matmul(v[0], v[1]); }, {r({2, 3, 4, 5}, 51), r({3, 5, 6}, 52)}, rtol);
    compare([](const TensorList& v) { return matmul(v[0], v[1]); }, {r({4, 3, 5}, 53), r({1, 5, 6}, 54)}, rtol);
    compare([](const TensorList& v) { return matmul(v[0], v[1].t()); }, {r({2, 4, 5}, 55), r({6, 5}, 56)}, rtol);
    compare([](const TensorList& v) { return matmul(v[0].transpose(1, 2), v[1].transpose(1, 2)); },
            {r({4, 7, 3}, 57), r({4, 2, 7}, 58)}, rtol);
  }
}

TEST_CASE("CUDA vs CPU: cross-entropy over more classes than a block has threads" * doctest::skip(kNoGpu)) {
  for (DType dt : {DType::F32, DType::F64}) {
    // Log-sum-exp and the loss in double on both sides.
    const double rtol = dt == DType::F32 ? 1e-5 : 1e-12;
    for (int64_t V : {255, 256, 257, 300, 1000}) {
      INFO("V = ", V);
      Tensor logits = rand_tensor({37, V}, 61 + V, false, -4, 4, dt);
      Tensor targets = rand_indices({37}, V, 62 + V);
      compare([targets](const TensorList& v) { return cross_entropy(v[0], targets.to(v[0].device())); }, {logits},
              rtol);
    }
    // One logit per row far above the rest: exp overflows (inf) unless every thread
    // subtracts the row's true maximum, wherever in the row it sits.
    Tensor big = rand_tensor({37, 300}, 65, false, -4, 4, dt);
    {
      autograd::NoGrad ng;
      for (int64_t r = 0; r < 37; ++r) fill_(big.narrow(0, r, 1).narrow(1, (r * 89 + 5) % 300, 1), 1000.0 + r);
    }
    Tensor big_targets = rand_indices({37}, 300, 66);
    compare([big_targets](const TensorList& v) { return cross_entropy(v[0], big_targets.to(v[0].device())); }, {big},
            rtol);
    // More rows than the mean kernel's 256 threads, from a strided [B, T, V] view.
    Tensor logits = rand_tensor({13, 47, 300}, 63, false, -4, 4, dt);
    Tensor targets = rand_indices({47, 13}, 300, 64);
    compare([targets](const TensorList& v) { return cross_entropy(v[0].transpose(0, 1), targets.to(v[0].device())); },
            {logits}, rtol);
  }
}

TEST_CASE("CUDA vs CPU: embedding backward over 120k indices with many duplicates (the sort-free path)" *
          doctest::skip(kNoGpu)) {
  const int64_t V = 50, D = 3;
  Tensor idx = rand_indices({300, 400}, V - 1, 71);  // row V-1 never appears: it must stay zero
  for (DType dt : {DType::F32, DType::F64}) {
    const double rtol = dt == DType::F32 ? 1e-5 : 1e-12;
    for (bool transposed_table : {false, true})  // a transposed table: gathered with its column stride
      compare([idx](const TensorList& v) { return gather_rows(v[0], idx.to(v[0].device())); },
              {rand_tensor({V, D}, 72, transposed_table, -1, 1, dt)}, rtol);
    Tensor src = rand_tensor({300, 400, D}, 73, false, -1, 1, dt);
    compare([idx, V](const TensorList& v) { return scatter_add_rows(v[0], idx.to(v[0].device()), V); }, {src}, rtol);
    // Both sum each row's duplicates in index order: the same additions, bit for bit.
    Tensor cpu = scatter_add_rows(src, idx, V), gpu = scatter_add_rows(src.to(Device::cuda(0)), idx.to(Device::cuda(0)), V);
    CHECK(gpu.to(Device::cpu()).to_vector<double>() == cpu.to_vector<double>());
    CHECK(cpu.narrow(0, V - 1, 1).to_vector<double>() == std::vector<double>(D, 0.0));
  }
}

TEST_CASE("CUDA embedding backward for a large table (the sorting path) equals the CPU's bit for bit" *
          doctest::skip(kNoGpu)) {
  const int64_t V = 3000, D = 5;  // above the sort-free path's 1024 rows
  Tensor idx = rand_indices({40, 300}, V - 1, 74);
  Tensor src = rand_tensor({40, 300, D}, 75, false, -1, 1, DType::F32);
  Tensor cpu = scatter_add_rows(src, idx, V), gpu = scatter_add_rows(src.to(Device::cuda(0)), idx.to(Device::cuda(0)), V);
  CHECK(gpu.to(Device::cpu()).to_vector<double>() == cpu.to_vector<double>());
}

TEST_CASE("CUDA index and target checks run on the device and are raised at the next host wait, then cleared" *
          doctest::skip(kNoGpu)) {
  const Device gpu = Device::cuda(0);
  Tensor table = rand_tensor({5, 3}, 76, false, -1, 1, DType::F32).to(gpu);
  Tensor bad = from_vector<int64_t>({1, 4, 7, 2, -3}, {5}).to(gpu);  // 7 at position 2 is the first bad one
  Tensor rows = gather_rows(table, bad);  // queued: no error yet, nothing copied to the host
  CHECK_ERROR(rows.to(Device::cpu()),
              "gather_rows: index 7 at position 2 is out of range for 5 rows (found by a device-side check on cuda:0, "
              "reported at the next host synchronisation)");
  // Raised once: the device is usable again, and the bad rows were zeros, not reads out of bounds.
  Tensor good = gather_rows(table, from_vector<int64_t>({4, 0}, {2}).to(gpu));
  CHECK(good.to(Device::cpu()).to_vector<float>() ==
        gather_rows(table.to(Device::cpu()), from_vector<int64_t>({4, 0}, {2})).to_vector<float>());

  Tensor src = rand_tensor({5, 3}, 77, false, -1, 1, DType::F32).to(gpu);
  (void)scatter_add_rows(src, from_vector<int64_t>({0, 1, 2, 3, 5}, {5}).to(gpu), 5);
  CHECK_ERROR(cuda::synchronize(), "scatter_add_rows: index 5 at position 4 is out of range for 5 rows");

  Tensor logits = rand_tensor({3, 4}, 78, false, -1, 1, DType::F32).to(gpu);
  Tensor loss = cross_entropy(logits, from_vector<int64_t>({0, -1, 9}, {3}).to(gpu));
  CHECK_ERROR(loss.item(), "cross_entropy: target -1 at position 1 is not a class in [0, 4)");

  // Two bad ops before a wait: the first is the one reported. (The uploads come
  // first: an upload waits for the device, and so would raise the first error.)
  Tensor bad_row = from_vector<int64_t>({9}, {1}).to(gpu), bad_target = from_vector<int64_t>({0, 1, 8}, {3}).to(gpu);
  (void)gather_rows(table, bad_row);
  (void)cross_entropy(logits, bad_target);
  CHECK_ERROR(cuda::synchronize(), "gather_rows: index 9 at position 0");
  cuda::synchronize();  // nothing pending any more
}

TEST_CASE("CUDA GEMMs under --precision tf32 run in TF32 (inputs to 10 mantissa bits), close to fp32, and only there" *
          doctest::skip(kNoGpu)) {
  const Device gpu = Device::cuda(0);
  // Large enough that cuBLAS takes its TF32 tensor-core kernels once allowed: for small products it may keep
  // plain FP32 kernels, and "it did take effect" below would not hold. Our GEMM path for the conv, pinned.
  test::Backends gemm_path(test::conv_on(ConvImpl::Gemm));
  Tensor a = rand_tensor({256, 512}, 80, false, -1, 1, DType::F32), b = rand_tensor({512, 256}, 81, false, -1, 1, DType::F32);
  Tensor x = rand_tensor({8, 128, 192}, 82, false, -1, 1, DType::F32), w = rand_tensor({128, 192, 3}, 83, false, -1, 1, DType::F32);
  const Tensor strict_mm = mm(a.to(gpu), b.to(gpu)).to(Device::cpu());
  const Tensor strict_conv = conv1d(x.to(gpu), w.to(gpu), Tensor(), 2, 4).to(Device::cpu());
  Tensor tf32_mm, tf32_conv, cpu_mm;
  {
    Autocast scope(Precision::TF32);
    tf32_mm = mm(a.to(gpu), b.to(gpu)).to(Device::cpu());
    tf32_conv = conv1d(x.to(gpu), w.to(gpu), Tensor(), 2, 4).to(Device::cpu());
    cpu_mm = mm(a, b);  // CPU tensors: no TF32 on a CPU, plain fp32
  }
  // TF32 keeps 10 of float32's 23 mantissa bits: each operand is off by up to 2^-11 relative, each product by
  // about 1e-3, and the errors of 500-odd products add up like a random walk, so the result is off by a few
  // 1e-4 of its norm (float32 alone: 1e-7). Within 2e-3 passes TF32 and fails anything coarser (bf16: 1e-2).
  const double e_mm = test::rel_err(tf32_mm, mm(a, b)), e_conv = test::rel_err(tf32_conv, conv1d(x, w, Tensor(), 2, 4));
  INFO("TF32 error relative to the norm: mm ", e_mm, ", conv1d ", e_conv);
  CHECK(e_mm < 2e-3);
  CHECK(e_conv < 2e-3);
  CHECK(e_mm > 1e-5);  // it did take effect: strict FP32 would be near 1e-7
  CHECK(e_conv > 1e-5);
  CHECK(tf32_mm.to_vector<float>() != strict_mm.to_vector<float>());
  CHECK(tf32_conv.to_vector<float>() != strict_conv.to_vector<float>());
  CHECK(cpu_mm.to_vector<float>() == mm(a, b).to_vector<float>());
  // Back in fp32 after the scope.
  CHECK(mm(a.to(gpu), b.to(gpu)).to(Device::cpu()).to_vector<float>() == strict_mm.to_vector<float>());
}

TEST_CASE("CUDA vs CPU: LSTM layer at the reference size (B 32, H 700)" * doctest::skip(kNoGpu)) {
  const int64_t B = 32, T = 3, H = 700;
  for (DType dt : {DType::F32, DType::F64}) {
    const double rtol = dt == DType::F32 ? 1e-4 : 1e-10;
    const double bound = 1.0 / std::sqrt(static_cast<double>(H));
    compare(
        [](const TensorList& v) {
          auto [o, h, c] = lstm_layer(v[0], v[1], v[2], v[3]);
          return add(o, mul(add(h, c).unsqueeze(1), 0.5));
        },
        {rand_tensor({B, T, 4 * H}, 81, false, -1, 1, dt), rand_tensor({4 * H, H}, 82, false, -bound, bound, dt),
         rand_tensor({B, H}, 83, false, -1, 1, dt), rand_tensor({B, H}, 84, false, -1, 1, dt)},
        rtol, dt == DType::F32 ? 1e-6 : 1e-7);
  }
}

TEST_CASE("CUDA in-place multiply by a device scalar, int64 fill and dtype conversions" * doctest::skip(kNoGpu)) {
  const Device cuda0 = Device::cuda(0);
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor x = rand_tensor({4, 6}, 91, false, -1, 1, dt);
    Tensor s = scalar_tensor(-1.75, {dt});
    Tensor row = rand_tensor({6}, 92, false, -1, 1, dt);
    Tensor xc = clone(x), xg = x.to(cuda0);
    mul_(xc, s);
    mul_(xg, s.to(cuda0));  // the scalar stays on the device
    CHECK(xg.to(Device::cpu()).to_vector<double>() == xc.to_vector<double>());
    mul_(xc.t(), row.unsqueeze(1));  // into a transposed view, broadcast along its rows
    mul_(xg.t(), row.to(cuda0).unsqueeze(1));
    CHECK(xg.to(Device::cpu()).to_vector<double>() == xc.to_vector<double>());
  }
  // int64 fill, into a slice too.
  Tensor i = zeros({5, 3}, {DType::I64, cuda0});
  fill_(i, 7);
  fill_(i.narrow(0, 1, 2).narrow(1, 2, 1), -3e12);
  std::vector<int64_t> want(15, 7);
  want[5] = want[8] = -3000000000000;
  CHECK(i.to(Device::cpu()).to_vector<int64_t>() == want);
  // int64 <-> float, contiguous and strided, against the CPU's conversions.
  Tensor f = tensor({-2.7, -0.5, 0.0, 0.9, 3.99, 1e6 + 0.5, -123456.75, 2.0, 1099511627776.0}, {3, 3}, {DType::F64});
  for (DType ft : {DType::F32, DType::F64}) {
    Tensor fc = f.to(ft);
    for (bool strided : {false, true}) {
      Tensor src = strided ? fc.t() : fc;
      Tensor cpu = src.to(DType::I64), gpu = src.to(cuda0).to(DType::I64);
      REQUIRE(gpu.device() == cuda0);
      CHECK(gpu.to(Device::cpu()).to_vector<int64_t>() == cpu.to_vector<int64_t>());
      Tensor back_cpu = cpu.t().to(ft), back_gpu = gpu.t().to(ft);
      CHECK(back_gpu.to(Device::cpu()).to_vector<double>() == back_cpu.to_vector<double>());
    }
  }
  CHECK(f.to(DType::I64).to_vector<int64_t>() ==
        std::vector<int64_t>{-2, 0, 0, 0, 3, 1000000, -123456, 2, 1099511627776});  // truncation, as static_cast
}

TEST_CASE("CUDA vs CPU: max with ties takes the first index (values, indices and the routed gradient)" *
          doctest::skip(kNoGpu)) {
  for (DType dt : {DType::F32, DType::F64}) {
    // Values on a coarse grid: every row has repeated maxima.
    Tensor x = mul(rand_tensor({6, 9, 5}, 121, false, 0, 1, dt), 3.0).to(DType::I64).to(dt);  // 0, 1 or 2
    for (int64_t dim : {0, 1, 2}) {
      INFO("dim ", dim);
      auto [vc, ic] = max(x, dim);
      auto [vg, ig] = max(x.to(Device::cuda(0)), dim);
      CHECK(vg.to(Device::cpu()).to_vector<double>() == vc.to_vector<double>());
      CHECK(ig.to(Device::cpu()).to_vector<int64_t>() == ic.to_vector<int64_t>());
      compare([dim](const TensorList& v) { return max(v[0], dim).first; }, {x}, 1e-12);
    }
  }
}

TEST_CASE("CUDA vs CPU: edge shapes (one-step LSTM, empty batches, empty reductions)" * doctest::skip(kNoGpu)) {
  for (DType dt : {DType::F32, DType::F64}) {
    const double rtol = dt == DType::F32 ? 1e-4 : 1e-10;
    auto lstm = [](const TensorList& v) {
      auto [o, h, c] = lstm_layer(v[0], v[1], v[2], v[3]);
      return add(o, mul(add(h, c).unsqueeze(1), 0.5));
    };
    // T = 1: h_prev is h0 alone (an empty slice of the outputs is concatenated to it).
    compare(lstm,
            {rand_tensor({3, 1, 20}, 101, false, -1, 1, dt), rand_tensor({20, 5}, 102, false, -1, 1, dt),
             rand_tensor({3, 5}, 103, false, -1, 1, dt), rand_tensor({3, 5}, 104, false, -1, 1, dt)},
            rtol);
    // An empty batch: nothing to compute, on either device.
    compare(lstm,
            {rand_tensor({0, 4, 20}, 105, false, -1, 1, dt), rand_tensor({20, 5}, 106, false, -1, 1, dt),
             rand_tensor({0, 5}, 107, false, -1, 1, dt), rand_tensor({0, 5}, 108, false, -1, 1, dt)},
            rtol);
    Tensor e = rand_tensor({0, 6}, 109, false, -1, 1, dt);
    compare([](const TensorList& v) { return sum(v[0], {0}); }, {e}, rtol);  // sums over nothing: zeros
    compare([](const TensorList& v) { return sum(v[0]); }, {e}, rtol);
    compare([](const TensorList& v) { return relu(v[0]) * 2.0; }, {e}, rtol);
    compare([](const TensorList& v) { return bmm(v[0], v[1]); },
            {rand_tensor({2, 3, 0}, 110, false, -1, 1, dt), rand_tensor({2, 0, 4}, 111, false, -1, 1, dt)}, rtol);
  }
}

}  // TEST_SUITE
