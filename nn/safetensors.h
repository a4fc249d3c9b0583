// safetensors files: 8-byte little-endian header length N, N bytes of JSON
// header ({name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}),
// then the raw little-endian tensor data. The format PyTorch, JAX and Hugging
// Face use for weights, so a checkpoint moves between tcn and PyTorch.
//
// tcn adds one metadata entry, "checksums": a JSON object (as a string, since
// metadata values are strings) mapping every tensor name to "xxh3-64:<16 hex
// digits>", the XXH3 64-bit hash of its bytes. Other readers ignore it; ours
// verifies it, so a flipped bit in the data is an error that names the tensor.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tcn::nn {

using Metadata = std::map<std::string, std::string>;

struct SafetensorsContents {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file order, CPU tensors
  Metadata metadata;  // without the "checksums" entry, which the reader has verified
  // The tensor called `name`; throws naming the file when it is absent.
  const Tensor& at(const std::string& name) const;
  bool contains(const std::string& name) const;
  std::string path;
};

// Writes atomically and durably: to a temp file of this process in the same
// directory (".<name>.tmp-<pid>-<n>"), written in full, fsync'ed, renamed over
// `path`, and the directory fsync'ed; a crash, a signal or a full disk never
// leaves a partial file under the final name, and an error leaves whatever was
// at `path` unchanged. Refuses a `path` that exists and is not a regular file
// (a symlink, a device, a directory). Tensors may live on any device; names
// must be unique; the metadata key "checksums" is reserved.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const Metadata& metadata = {});

// Reads and validates the whole file before allocating any tensor: a missing,
// truncated or corrupt file, anything that is not a regular file, an unknown
// dtype, a shape that is not a list of non-negative integers or whose size
// overflows, offsets that do not tile the data section exactly, a duplicate
// name, or a checksum mismatch is a tcn::Error naming the file and the problem.
// Nothing is returned partially.
SafetensorsContents load_safetensors(const std::string& path);

// The same reader over bytes in memory (`name` labels the errors): what
// load_safetensors runs after reading the file, and what the fuzzer calls.
SafetensorsContents parse_safetensors(std::string_view bytes, const std::string& name);

// What save_safetensors(path, ...) would refuse, checked up front (before a
// long run): `path` exists and is not a regular file, or its directory does not
// take a new file (a temp file is created there and removed).
void check_save_target(const std::string& path);

// Removes the temp files that save_safetensors(path, ...) calls of processes
// no longer running left behind (a SIGKILL or power loss mid-save); returns
// their names. Files of other programs and of live processes are kept.
std::vector<std::string> remove_stale_temp_files(const std::string& path);

}  // namespace tcn::nn
