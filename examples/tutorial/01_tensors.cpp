// Chapter 1 (docs/tutorial/01-tensors.md): tensors and views. Shape, strides
// and offset; narrow, transpose, reshape and expand as views that share one
// storage; contiguous() as the one copy; dtypes; devices.
#include <tcn/tcn.h>

#include <cstdio>
#include <vector>

#include "check.h"

using tcn::Tensor;
using tut::check;

int main() {
  using namespace tcn;

  // ---- a tensor: storage + shape + strides + offset ----------------------
  Tensor x = tensor({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  check(x.shape() == Shape{3, 4} && x.strides() == Strides{4, 1} && x.offset() == 0,
        "x is [3, 4] with row-major strides [4, 1]");
  check(x.dtype() == DType::F32 && x.device() == Device::cpu() && x.is_contiguous(),
        "float32 on the CPU by default, contiguous");

  // ---- narrow: a slice along one dim, no copy -----------------------------
  Tensor row1 = x.narrow(0, 1, 1);  // the second row, [1, 4]
  Tensor col2 = x.narrow(1, 2, 1);  // the third column, [3, 1]
  check(row1.shares_storage(x) && row1.offset() == 4, "narrow(0, 1, 1) shares x's storage at offset 4");
  check(col2.shares_storage(x) && col2.offset() == 2 && col2.strides() == Strides{4, 1} && !col2.is_contiguous(),
        "narrow(1, 2, 1) shares x's storage, offset 2, strides [4, 1], not contiguous");
  fill_(col2, -1.0);  // writes through the view into x
  check(x.to_vector<float>() == std::vector<float>{0, 1, -1, 3, 4, 5, -1, 7, 8, 9, -1, 11},
        "fill_ through the column view changed x's column 2");

  // ---- transpose: swapped strides, no copy --------------------------------
  Tensor xt = x.t();  // transpose(0, 1)
  check(xt.shape() == Shape{4, 3} && xt.strides() == Strides{1, 4} && xt.shares_storage(x),
        "x.t() is [4, 3] with strides [1, 4] over the same storage");
  check(!xt.is_contiguous(), "x.t() is not contiguous");

  // ---- reshape: a view when the strides allow it, else a copy -------------
  Tensor flat = x.reshape({12});
  check(flat.shares_storage(x), "reshape of a contiguous tensor is a view");
  Tensor xt_flat = xt.reshape({12});
  check(!xt_flat.shares_storage(x), "reshape of the transposed tensor had to copy");
  check(xt_flat.to_vector<float>() == std::vector<float>{0, 4, 8, 1, 5, 9, -1, -1, -1, 3, 7, 11},
        "the copy holds xt's elements in row-major order");
  bool view_refused = false;
  try {
    (void)xt.view({12});  // view never copies, so it must refuse
  } catch (const Error& e) {
    view_refused = true;
    std::printf("      view({12}) on x.t(): %s\n", e.what());
  }
  check(view_refused, "view() of the transposed tensor throws tcn::Error instead of copying");

  // ---- expand: broadcasting as stride 0 -----------------------------------
  Tensor bias = tensor({10, 20, 30, 40}, {1, 4});
  Tensor wide = bias.expand({3, 4});
  check(wide.strides() == Strides{0, 1} && wide.shares_storage(bias), "expand to [3, 4] is stride 0 along dim 0");

  // ---- contiguous(): the one copy -----------------------------------------
  Tensor same = x.contiguous();
  check(same.impl_ptr() == x.impl_ptr(), "contiguous() of a contiguous tensor is the tensor itself");
  Tensor packed = xt.contiguous();
  check(!packed.shares_storage(x) && packed.is_contiguous() && packed.strides() == Strides{3, 1},
        "contiguous() of x.t() is a new [4, 3] tensor with strides [3, 1]");
  fill_(x, 0.0);
  check(packed.to_vector<float>()[1] == 4.0f && xt.to_vector<float>()[1] == 0.0f,
        "after fill_(x, 0) the copy keeps its values; the view sees the zeros");

  // ---- dtypes -------------------------------------------------------------
  Tensor a = tensor({0.1, 0.2, 0.3}, {3}, TensorOptions{}.with(DType::F64));
  check(a.dtype() == DType::F64 && a.data<double>()[0] == 0.1, "a float64 tensor holds 0.1 exactly as a double");
  Tensor a32 = a.to(DType::F32);
  check(a32.dtype() == DType::F32 && a32.data<float>()[0] == 0.1f, "to(F32) rounds to the nearest float");
  bool wrong_type = false;
  try {
    (void)a.data<float>();
  } catch (const Error& e) {
    wrong_type = true;
    std::printf("      a.data<float>(): %s\n", e.what());
  }
  check(wrong_type, "data<float>() on a float64 tensor throws");
  Tensor idx = from_vector<int64_t>({2, 0, 1}, {3});
  Tensor table = tensor({0, 1, 10, 11, 20, 21}, {3, 2});
  check(gather_rows(table, idx).to_vector<float>() == std::vector<float>{20, 21, 0, 1, 10, 11},
        "int64 tensors index rows (gather_rows)");

  // ---- devices ------------------------------------------------------------
  std::printf("      build %s: CUDA built %s, %d device(s)%s\n", build_config(), cuda::built_with_cuda() ? "yes" : "no",
              cuda::device_count(), cuda::emulated() ? " (EMULATED: kernels run on the CPU)" : "");
  Tensor h = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  if (cuda::is_available()) {
    Tensor d = h.to(Device::cuda());        // a copy to device memory
    Tensor back = (d.t() * 2.0).to(Device::cpu());  // the op ran on the device
    check(d.device().is_cuda() && back.to_vector<float>() == std::vector<float>{2, 8, 4, 10, 6, 12},
          cuda::emulated() ? "h.to(cuda) and an op there match the CPU (on the EMULATED device)"
                           : "h.to(cuda) and an op there match the CPU");
  } else {
    bool refused = false;
    try {
      (void)h.to(Device::cuda());
    } catch (const Error& e) {
      refused = true;
      std::printf("      h.to(Device::cuda()): %s\n", e.what());
    }
    check(refused, "without a usable CUDA device, to(Device::cuda()) throws tcn::Error (no crash)");
  }

  return tut::finish("tutorial_01_tensors");
}
