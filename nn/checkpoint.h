// A module's parameters as a safetensors file, under the names PyTorch's
// state_dict uses (a tied weight once, as its first name, e.g. encoder.weight),
// with the model's configuration and vocabulary in __metadata__.
#pragma once

#include "nn/module.h"
#include "nn/safetensors.h"

namespace tcn::nn {

// Writes the module's parameters and buffers (plus `extra` tensors, e.g.
// optimizer state, under their own names) atomically.
void save_module(const std::string& path, const Module& module, const Metadata& metadata,
                 const NamedTensors& extra = {});

// Copies the file's tensors into the module's parameters and buffers (in place,
// so tied weights stay tied). Every one must be present with the same shape and
// a float dtype (an integer buffer: its own dtype), and no unexpected name may appear except under
// one of `ignore_prefixes` (e.g. "optim."); all problems are reported in one error and
// nothing is modified unless all checks pass.
// PyTorch >= 2.1 saves weight norm as a parametrization: X.parametrizations.weight.original0 / original1
// are X.weight_g / X.weight_v. Files of either kind load.
void load_module(const SafetensorsContents& file, Module& module, const std::vector<std::string>& ignore_prefixes = {});
// Whether `name` starts with one of `prefixes`.
bool has_prefix(const std::string& name, const std::vector<std::string>& prefixes);

// The name weight norm's tensors have in our modules (and in PyTorch before 2.1): "X.weight_g" for
// "X.parametrizations.weight.original0", "X.weight_v" for "...original1"; any other name unchanged.
std::string weight_norm_name(const std::string& name);

}  // namespace tcn::nn
