// The elementwise ops, each named once. A unary op is a functor in
// core/math/functors.h (fwd, bwd, the scalar it takes if any) plus a line here; the
// CUDA enums (cuda/kernels.h), the map from a CPU op to its CUDA kernel
// (ops/unary.cpp), the CUDA switches (cuda/elementwise.cu) and the unary ops' test
// cases (tests/op_cases.cpp, through ops/unary.h) are all written from these lists
// with an X macro: X(Name) for each fn::Name.
#pragma once

#define TCN_UNARY_OPS(X) \
  X(Neg) X(Relu) X(Tanh) X(Sigmoid) X(Exp) X(Log) X(Sqrt) X(Pow) X(AddScalar) X(MulScalar) X(Minimum) \
  X(LeakyRelu) X(Elu) X(Selu) X(Gelu)

#define TCN_BINARY_OPS(X) X(Add) X(Sub) X(Mul) X(Div) X(AddRelu) X(GluProduct)
