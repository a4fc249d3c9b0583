// Every unary op by its functor: unary_op(x, fn::Relu{}) is relu(x), and
// unary_op(x, fn::Pow{2.5}) is pow(x, 2.5). One overload per entry of
// TCN_UNARY_OPS (core/math/op_lists.h), for code generated from that list: the op
// tests (tests/op_cases.cpp) register a case for each op this way, so a new
// unary op is tested without an edit there. Programs call relu, pow, ... (ops/ops.h).
#pragma once

#include "core/math/functors.h"
#include "core/math/op_lists.h"
#include "core/tensor.h"

namespace tcn {

#define TCN_UNARY_OP_DECL(Name) Tensor unary_op(const Tensor& x, const fn::Name& op);
TCN_UNARY_OPS(TCN_UNARY_OP_DECL)
#undef TCN_UNARY_OP_DECL

}  // namespace tcn
