// safetensors files: 8-byte little-endian header length N, N bytes of JSON
// header ({name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}),
// then the raw little-endian tensor data. The format PyTorch, JAX and Hugging
// Face use for weights, so a checkpoint moves between tcn and PyTorch.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tcn::nn {

using Metadata = std::map<std::string, std::string>;

struct SafetensorsContents {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file order, CPU tensors
  Metadata metadata;
  // The tensor called `name`; throws naming the file when it is absent.
  const Tensor& at(const std::string& name) const;
  bool contains(const std::string& name) const;
  std::string path;
};

// Writes atomically: to `path`.tmp, flushed, then renamed over `path`, so a
// crash or a full disk never leaves a truncated file under the final name.
// Tensors may live on any device; names must be unique.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const Metadata& metadata = {});

// Reads and validates the whole file: a missing, truncated or corrupt file, an
// unknown dtype or inconsistent offsets is a tcn::Error naming the file and the
// problem; nothing is returned partially.
SafetensorsContents load_safetensors(const std::string& path);

}  // namespace tcn::nn
