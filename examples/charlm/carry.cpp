#include "carry.h"

#include "autograd/tape.h"
#include "ops/ops.h"

namespace charlm {

using namespace tcn;

namespace {
nn::LSTMCharLM& as_lstm(nn::CharLM& model) {
  auto* lstm = dynamic_cast<nn::LSTMCharLM*>(&model);
  TCN_CHECK(lstm, "--lstm_state carry: only an LSTM has a state to carry; this model is a ", model.kind());
  return *lstm;
}
}  // namespace

CarriedState::CarriedState(nn::CharLM& model, int64_t streams) : model_(as_lstm(model)), total_(streams) {
  const nn::LSTM& rnn = *model_.rnn;
  const Tensor& w = rnn.weight_hh.at(0);
  h_ = zeros({rnn.layers, streams, rnn.hidden}, w.options());
  c_ = zeros({rnn.layers, streams, rnn.hidden}, w.options());
}

Tensor CarriedState::forward(const Tensor& tokens) {
  // The step's own copy of the state: backward reads the state a window began
  // from (the recurrent weight's gradient at t = 0) after the buffers have moved on.
  const nn::LSTM::State start{clone(h_), clone(c_)};
  auto [logits, end] = model_.forward_with_state(tokens, start);
  autograd::NoGrad ng;
  copy_(h_, end.h.detach());
  copy_(c_, end.c.detach());
  return logits;
}

void CarriedState::reset() {
  zero_(h_);
  zero_(c_);
}

nn::NamedTensors CarriedState::save(dist::Comm& comm) const {
  const int64_t streams = h_.size(1);
  nn::NamedTensors out;
  for (const auto& [name, t] : {std::pair{"carry.h", h_}, std::pair{"carry.c", c_}}) {
    if (!comm.launched() || streams == total_) {
      out.emplace_back(name, t.to(Device::cpu()));
      continue;
    }
    // Every rank's rows in their place, zeros elsewhere; the sum over the ranks is the whole batch's.
    Tensor whole = zeros({t.size(0), total_, t.size(2)}, t.options());
    copy_(whole.narrow(1, first_, streams), t);
    comm.all_reduce_sum(whole);
    out.emplace_back(name, whole.to(Device::cpu()));
  }
  return out;
}

void CarriedState::load(const nn::NamedTensors& tensors, const std::string& what) {
  const int64_t streams = h_.size(1);
  for (const auto& [name, dst] : {std::pair{"carry.h", h_}, std::pair{"carry.c", c_}}) {
    const Tensor* found = nullptr;
    for (const auto& [n, t] : tensors)
      if (n == name) found = &t;
    TCN_CHECK(found, what, ": no '", name, "': the checkpoint says its LSTM carried its state (--lstm_state carry) "
              "and stops mid-epoch, but holds no carried state; it was damaged or edited");
    const Shape want{dst.size(0), total_, dst.size(2)};
    TCN_CHECK(found->shape() == want, what, ": '", name, "' has shape ", found->shape(), ", this run carries ", want);
    TCN_CHECK(is_floating(found->dtype()), what, ": '", name, "' has dtype ", dtype_name(found->dtype()),
              ", expected a float type");
    copy_(dst, found->narrow(1, first_, streams).contiguous().to(dst.dtype()).to(dst.device()));
  }
}

}  // namespace charlm
