// The LSTM layer on cuDNN (the library: cudnn.cu).
//
// The v8 RNN API with one layer per call (the module stacks layers and applies
// its own dropout between them, so masks equal the CPU's), batch-major
// unpacked data ([B, T, *], every sequence of length T). Without cuDNN
// (TCN_WITH_CUDNN=0) this file is empty: cudnn.cu's entry points say why.
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <tuple>
#include <vector>

#include "cuda/context.cuh"
#include "cuda/cudnn.h"
#include "core/devices.h"
#include "core/tensor.h"
#include "cuda/cudnn_lib.cuh"

#if TCN_WITH_CUDNN
namespace tcn::cuda {

namespace {
using namespace cudnn_lib;

// ---- the LSTM -------------------------------------------------------------------------------------
struct LstmKey {
  int device;
  cudnnMathType_t math;
  int64_t B, T, I, H;
  auto tie() const { return std::tie(device, math, B, T, I, H); }
  bool operator<(const LstmKey& o) const { return tie() < o.tie(); }
};

// Which of our four parameters a piece of the weight space comes from.
enum class LstmParam { WIh, WHh, BIh, BHh };
struct WeightPiece {
  size_t space_offset;  // bytes into cuDNN's weight space
  LstmParam param;
  size_t param_offset;  // bytes into our (contiguous) parameter
  size_t bytes;
};

struct LstmPlan {
  cudnnRNNDescriptor_t rnn = nullptr;
  cudnnDropoutDescriptor_t dropout = nullptr;
  cudnnRNNDataDescriptor_t x = nullptr, y = nullptr;
  cudnnTensorDescriptor_t h = nullptr;  // hx, hy, cx, cy: [1, B, H]
  size_t weight_bytes = 0, work_train = 0, reserve_train = 0, work_infer = 0, reserve_infer = 0;
  Tensor seq_lengths;  // int32 [B], every one T, on the device (devSeqLengths)
  std::vector<WeightPiece> pieces;
  std::string where;
};

// Where each gate's matrix and bias sit in the weight space: cuDNN's linear
// layers 0-3 are the input matrices of gates i, f, g, o (PyTorch's order, so
// rows [g*H, (g+1)*H) of weight_ih), 4-7 the recurrent ones. Adjacent pieces are
// merged, so the copies are few when cuDNN lays the gates out one after another.
std::vector<WeightPiece> weight_pieces(const CudnnApi& a, cudnnHandle_t h, const LstmPlan& p, const LstmKey& k,
                                       const Tensor& space) {
  cudnnTensorDescriptor_t md = nullptr, bd = nullptr;
  CUDNN_CHECK(p.where, a.cudnnCreateTensorDescriptor(&md));
  CUDNN_CHECK(p.where, a.cudnnCreateTensorDescriptor(&bd));
  auto numel = [&](cudnnTensorDescriptor_t d) {
    cudnnDataType_t dt;
    int nb = 0, dims[8] = {}, strides[8] = {};
    CUDNN_CHECK(p.where, a.cudnnGetTensorNdDescriptor(d, 8, &dt, &nb, dims, strides));
    int64_t n = 1;
    for (int i = 0; i < nb; ++i) n *= dims[i];
    return n;
  };
  const char* base = static_cast<const char*>(space.raw_data());
  std::vector<WeightPiece> pieces;
  auto add = [&](const void* at, LstmParam param, int64_t offset, int64_t count) {
    const size_t off = static_cast<size_t>(static_cast<const char*>(at) - base), bytes = count * sizeof(float);
    const size_t poff = offset * sizeof(float);
    if (!pieces.empty()) {
      WeightPiece& last = pieces.back();
      if (last.param == param && last.space_offset + last.bytes == off && last.param_offset + last.bytes == poff) {
        last.bytes += bytes;
        return;
      }
    }
    pieces.push_back({off, param, poff, bytes});
  };
  void* bias_at[8] = {};
  for (int id = 0; id < 8; ++id) {
    const bool input = id < 4;
    const int64_t gate = id % 4, cols = input ? k.I : k.H;
    void* m = nullptr;
    CUDNN_CHECK(p.where,
                a.cudnnGetRNNWeightParams(h, p.rnn, 0, p.weight_bytes, space.raw_data(), id, md, &m, bd, &bias_at[id]));
    TCN_CHECK(m && bias_at[id] && numel(md) == k.H * cols && numel(bd) == k.H, "cuDNN: ", p.where, ": linear layer ",
              id, " has a matrix of ", numel(md), " and a bias of ", numel(bd), " elements, expected ", k.H * cols,
              " and ", k.H);
    add(m, input ? LstmParam::WIh : LstmParam::WHh, gate * k.H * cols, k.H * cols);
  }
  // The biases after the matrices, so that each kind merges with its own.
  for (int id = 0; id < 8; ++id) add(bias_at[id], id < 4 ? LstmParam::BIh : LstmParam::BHh, (id % 4) * k.H, k.H);
  CUDNN_CHECK(p.where, a.cudnnDestroyTensorDescriptor(md));
  CUDNN_CHECK(p.where, a.cudnnDestroyTensorDescriptor(bd));
  return pieces;
}

LstmPlan& lstm_plan(const LstmKey& k) {
  static std::mutex mu;
  static std::map<LstmKey, std::unique_ptr<LstmPlan>> plans;
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans.find(k);
  if (it != plans.end()) return *it->second;

  auto p = std::make_unique<LstmPlan>();
  p->where = describe("LSTM layer x [", k.B, ", ", k.T, ", ", k.I, "] hidden ", k.H);
  const std::string& where = p->where;
  TCN_CHECK(!capturing(k.device), "cuDNN: the setup of ", where,
            " cannot run inside a CUDA graph capture (run the shape once eagerly first)");
  const CudnnApi& a = dnn();
  const cudnnHandle_t h = handle(k.device);
  auto i32 = [](int64_t v) { return static_cast<int>(v); };
  CUDNN_CHECK(where, a.cudnnCreateDropoutDescriptor(&p->dropout));
  CUDNN_CHECK(where, a.cudnnSetDropoutDescriptor(p->dropout, h, 0.0f, nullptr, 0, 0));  // one layer: no dropout
  CUDNN_CHECK(where, a.cudnnCreateRNNDescriptor(&p->rnn));
  CUDNN_CHECK(where, a.cudnnSetRNNDescriptor_v8(p->rnn, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM, CUDNN_RNN_DOUBLE_BIAS,
                                                CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT,
                                                CUDNN_DATA_FLOAT, k.math, i32(k.I), i32(k.H), i32(k.H), 1, p->dropout,
                                                CUDNN_RNN_PADDED_IO_ENABLED));
  const std::vector<int> lengths(k.B, i32(k.T));
  float fill = 0.0f;
  CUDNN_CHECK(where, a.cudnnCreateRNNDataDescriptor(&p->x));
  CUDNN_CHECK(where, a.cudnnCreateRNNDataDescriptor(&p->y));
  CUDNN_CHECK(where, a.cudnnSetRNNDataDescriptor(p->x, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED,
                                                 i32(k.T), i32(k.B), i32(k.I), lengths.data(), &fill));
  CUDNN_CHECK(where, a.cudnnSetRNNDataDescriptor(p->y, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED,
                                                 i32(k.T), i32(k.B), i32(k.H), lengths.data(), &fill));
  const int dims[3] = {1, i32(k.B), i32(k.H)}, strides[3] = {i32(k.B * k.H), i32(k.H), 1};
  CUDNN_CHECK(where, a.cudnnCreateTensorDescriptor(&p->h));
  CUDNN_CHECK(where, a.cudnnSetTensorNdDescriptor(p->h, CUDNN_DATA_FLOAT, 3, dims, strides));
  CUDNN_CHECK(where, a.cudnnGetRNNWeightSpaceSize(h, p->rnn, &p->weight_bytes));
  CUDNN_CHECK(where, a.cudnnGetRNNTempSpaceSizes(h, p->rnn, CUDNN_FWD_MODE_TRAINING, p->x, &p->work_train,
                                                 &p->reserve_train));
  CUDNN_CHECK(where, a.cudnnGetRNNTempSpaceSizes(h, p->rnn, CUDNN_FWD_MODE_INFERENCE, p->x, &p->work_infer,
                                                 &p->reserve_infer));
  p->seq_lengths = scratch(k.B * sizeof(int32_t), k.device);
  copy_host_to_device(p->seq_lengths.raw_data(), lengths.data(), k.B * sizeof(int32_t));
  p->pieces = weight_pieces(a, h, *p, k, scratch(p->weight_bytes, k.device));
  LstmPlan& ref = *p;
  plans.emplace(k, std::move(p));
  return ref;
}

// Copies between our four parameters and cuDNN's weight space (to_space: into it).
void move_pieces(const LstmPlan& p, const Tensor& space, const Tensor (&params)[4], bool to_space) {
  const cudaStream_t st = stream(space.device().index);
  char* s = static_cast<char*>(space.raw_data());
  for (const WeightPiece& w : p.pieces) {
    char* in_space = s + w.space_offset;
    char* in_param = static_cast<char*>(params[static_cast<int>(w.param)].raw_data()) + w.param_offset;
    CUDA_CHECK(cudaMemcpyAsync(to_space ? in_space : in_param, to_space ? in_param : in_space, w.bytes,
                               cudaMemcpyDeviceToDevice, st));
  }
}

LstmKey lstm_key(const Tensor& x, int64_t H, bool tf32) {
  return LstmKey{x.device().index, tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH, x.size(0), x.size(1),
                 x.size(2), H};
}

}  // namespace

CudnnLstmSaved cudnn_lstm_forward(const Tensor& y, const Tensor& hy, const Tensor& cy, const Tensor& x,
                                  const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh,
                                  const Tensor& hx, const Tensor& cx, bool training, bool tf32) {
  const LstmKey k = lstm_key(x, w_hh.size(1), tf32);
  LstmPlan& p = lstm_plan(k);
  CudnnLstmSaved saved;
  saved.plan = &p;
  saved.weights = scratch(p.weight_bytes, k.device);
  const Tensor params[4] = {w_ih, w_hh, b_ih, b_hh};
  move_pieces(p, saved.weights, params, true);
  const size_t work_bytes = training ? p.work_train : p.work_infer;
  const size_t reserve_bytes = training ? p.reserve_train : p.reserve_infer;
  const Tensor work = scratch(work_bytes, k.device);
  if (reserve_bytes) saved.reserve = scratch(reserve_bytes, k.device);
  CUDNN_CHECK(p.where,
              dnn().cudnnRNNForward(handle(k.device), p.rnn, training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                                    static_cast<const int32_t*>(p.seq_lengths.raw_data()), p.x, x.raw_data(), p.y,
                                    y.raw_data(), p.h, hx.raw_data(), hy.raw_data(), p.h, cx.raw_data(), cy.raw_data(),
                                    p.weight_bytes, saved.weights.raw_data(), work_bytes, work.raw_data(),
                                    reserve_bytes, reserve_bytes ? saved.reserve.raw_data() : nullptr));
  return saved;
}

void cudnn_lstm_backward(const Tensor& dx, const Tensor& dhx, const Tensor& dcx, const Tensor& dw_ih,
                         const Tensor& dw_hh, const Tensor& db_ih, const Tensor& db_hh, const CudnnLstmSaved& saved,
                         const Tensor& x, const Tensor& hx, const Tensor& cx, const Tensor& y, const Tensor& dy,
                         const Tensor& dhy, const Tensor& dcy) {
  TCN_CHECK(saved.plan != nullptr, "cuDNN LSTM backward without its forward's plan");
  const LstmPlan& p = *static_cast<const LstmPlan*>(saved.plan);  // the forward's settings, whatever they are now
  TCN_CHECK(saved.reserve.defined(), "cuDNN: ", p.where, ": backward of a forward run without training mode");
  const int device = x.device().index;
  const Tensor work = scratch(p.work_train, device);
  const cudnnHandle_t h = handle(device);
  const int32_t* lengths = static_cast<const int32_t*>(p.seq_lengths.raw_data());
  auto ptr = [](const Tensor& t) -> const void* { return t.defined() ? t.raw_data() : nullptr; };
  // Data first: it reads the reserve space forward wrote and leaves what the
  // weight gradients need in it.
  CUDNN_CHECK(p.where, dnn().cudnnRNNBackwardData_v8(h, p.rnn, lengths, p.y, y.raw_data(), dy.raw_data(), p.x,
                                                      dx.raw_data(), p.h, hx.raw_data(), ptr(dhy), dhx.raw_data(), p.h,
                                                      cx.raw_data(), ptr(dcy), dcx.raw_data(), p.weight_bytes,
                                                      saved.weights.raw_data(), p.work_train, work.raw_data(),
                                                      p.reserve_train, saved.reserve.raw_data()));
  const Tensor dspace = zeros({saved.weights.numel()}, saved.weights.options());  // gradients are added into it
  CUDNN_CHECK(p.where, dnn().cudnnRNNBackwardWeights_v8(h, p.rnn, CUDNN_WGRAD_MODE_ADD, lengths, p.x, x.raw_data(),
                                                         p.h, hx.raw_data(), p.y, y.raw_data(), p.weight_bytes,
                                                         dspace.raw_data(), p.work_train, work.raw_data(),
                                                         p.reserve_train, saved.reserve.raw_data()));
  const Tensor grads[4] = {dw_ih, dw_hh, db_ih, db_hh};
  move_pieces(p, dspace, grads, false);
}

}  // namespace tcn::cuda
#endif  // TCN_WITH_CUDNN
