#include "tcn/nn/checkpoint.h"

#include <set>

namespace tcn::nn {

void save_module(const std::string& path, const Module& module, const Metadata& metadata, const NamedTensors& extra) {
  NamedTensors all = module.named_state();
  all.insert(all.end(), extra.begin(), extra.end());
  save_safetensors(path, all, metadata);
}

void load_module(const SafetensorsContents& file, Module& module, const std::string& ignore_prefix) {
  std::vector<std::string> problems;
  std::set<std::string> expected;
  NamedTensors params = module.named_state();
  for (const auto& [name, p] : params) {
    expected.insert(name);
    if (!file.contains(name)) {
      problems.push_back("missing '" + name + "' " + shape_str(p.shape()));
      continue;
    }
    const Tensor& t = file.at(name);
    if (t.shape() != p.shape())
      problems.push_back("'" + name + "' has shape " + shape_str(t.shape()) + ", the model expects " +
                         shape_str(p.shape()));
    else if (is_floating(p.dtype()) ? !is_floating(t.dtype()) : t.dtype() != p.dtype())
      problems.push_back("'" + name + "' has dtype " + dtype_name(t.dtype()) + ", expected " +
                         (is_floating(p.dtype()) ? std::string("a float type") : dtype_name(p.dtype())));
  }
  for (const auto& [name, t] : file.tensors)
    if (!expected.count(name) && (ignore_prefix.empty() || name.rfind(ignore_prefix, 0) != 0))
      problems.push_back("unexpected '" + name + "' " + shape_str(t.shape()));
  if (!problems.empty()) {
    std::string msg = file.path + ": does not match the model (" + std::to_string(problems.size()) + " problem" +
                      (problems.size() > 1 ? "s" : "") + "):";
    for (const auto& p : problems) msg += "\n  " + p;
    TCN_FAIL(msg);
  }
  autograd::NoGrad ng;
  for (const auto& [name, p] : params) copy_(p, file.at(name).to(p.dtype()).to(p.device()));
}

}  // namespace tcn::nn
