// Where a tensor lives: the CPU, or CUDA device n.
#pragma once

#include <ostream>
#include <string>

namespace tcn {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device&) const = default;
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

// Parses "cpu", "cuda", "cuda:1". Throws tcn::Error on anything else.
Device parse_device(const std::string& s);

}  // namespace tcn
