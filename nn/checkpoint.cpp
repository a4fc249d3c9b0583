#include "nn/checkpoint.h"

#include <algorithm>
#include <map>
#include <set>

namespace tcn::nn {

void save_module(const std::string& path, const Module& module, const Metadata& metadata, const NamedTensors& extra) {
  NamedTensors all = module.named_state();
  all.insert(all.end(), extra.begin(), extra.end());
  save_safetensors(path, all, metadata);
}

std::string weight_norm_name(const std::string& name) {
  const std::string pg = ".parametrizations.weight.original";
  const size_t p = name.rfind(pg);
  if (p == std::string::npos || p + pg.size() + 1 != name.size() || (name.back() != '0' && name.back() != '1'))
    return name;
  return name.substr(0, p) + (name.back() == '0' ? ".weight_g" : ".weight_v");
}

bool has_prefix(const std::string& name, const std::vector<std::string>& prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& p) { return name.starts_with(p); });
}

void load_module(const SafetensorsContents& file, Module& module, const std::vector<std::string>& ignore_prefixes) {
  std::vector<std::string> problems;
  // The file's tensors under our names (weight norm's parametrization names mapped), with the file's own.
  std::map<std::string, std::pair<std::string, const Tensor*>> in_file;
  for (const auto& [name, t] : file.tensors) {
    const auto [it, fresh] = in_file.emplace(weight_norm_name(name), std::make_pair(name, &t));
    if (!fresh) problems.push_back("'" + it->second.first + "' and '" + name + "' are two names of '" + it->first + "'");
  }
  std::set<std::string> expected;
  NamedTensors params = module.named_state();
  for (const auto& [name, p] : params) {
    expected.insert(name);
    const auto found = in_file.find(name);
    if (found == in_file.end()) {
      problems.push_back("missing '" + name + "' " + shape_str(p.shape()));
      continue;
    }
    const Tensor& t = *found->second.second;
    if (t.shape() != p.shape())
      problems.push_back("'" + name + "' has shape " + shape_str(t.shape()) + ", the model expects " +
                         shape_str(p.shape()));
    else if (is_floating(p.dtype()) ? !is_floating(t.dtype()) : t.dtype() != p.dtype())
      problems.push_back("'" + name + "' has dtype " + dtype_name(t.dtype()) + ", expected " +
                         (is_floating(p.dtype()) ? std::string("a float type") : dtype_name(p.dtype())));
  }
  for (const auto& [ours, named] : in_file) {
    const auto& [name, t] = named;
    if (!expected.count(ours) && !has_prefix(name, ignore_prefixes))
      problems.push_back("unexpected '" + name + "' " + shape_str(t->shape()));
  }
  if (!problems.empty()) {
    std::string msg = file.path + ": does not match the model (" + std::to_string(problems.size()) + " problem" +
                      (problems.size() > 1 ? "s" : "") + "):";
    for (const auto& p : problems) msg += "\n  " + p;
    TCN_FAIL(msg);
  }
  autograd::NoGrad ng;
  for (const auto& [name, p] : params) copy_(p, in_file.at(name).second->to(p.dtype()).to(p.device()));
}

}  // namespace tcn::nn
