#include "nn/safetensors.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "ops/ops.h"

namespace tcn::nn {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // a header is names, shapes, offsets and metadata

const char* st_dtype(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
  }
  return "?";
}

bool parse_st_dtype(const std::string& s, DType& out) {
  if (s == "F32") out = DType::F32;
  else if (s == "F64") out = DType::F64;
  else if (s == "I64") out = DType::I64;
  else return false;
  return true;
}

}  // namespace

bool SafetensorsContents::contains(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return true;
  return false;
}

const Tensor& SafetensorsContents::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  TCN_FAIL(path, ": no tensor named '", name, "'");
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const Metadata& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> host;
  std::set<std::string> seen;
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    TCN_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    TCN_CHECK(name != "__metadata__" && seen.insert(name).second, "save_safetensors: duplicate or reserved name '",
              name, "'");
    Tensor c = t.detach().to(Device::cpu()).contiguous();
    size_t nbytes = c.numel() * dtype_size(c.dtype());
    header[name] = {{"dtype", st_dtype(c.dtype())}, {"shape", c.shape()}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    host.push_back(c);
  }
  std::string json = header.dump();
  while ((8 + json.size()) % 8 != 0) json.push_back(' ');
  uint64_t n = json.size();

  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    TCN_CHECK(f.good(), "save_safetensors: cannot open '", tmp, "' for writing: ", std::strerror(errno));
    f.write(reinterpret_cast<const char*>(&n), 8);
    f.write(json.data(), static_cast<std::streamsize>(json.size()));
    for (const Tensor& c : host)
      f.write(static_cast<const char*>(c.raw_data()), static_cast<std::streamsize>(c.numel() * dtype_size(c.dtype())));
    f.flush();
    if (!f.good()) {
      f.close();
      std::remove(tmp.c_str());
      TCN_FAIL("save_safetensors: writing '", tmp, "' failed (disk full?); '", path, "' is unchanged");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    TCN_FAIL("save_safetensors: cannot rename '", tmp, "' to '", path, "': ", ec.message());
  }
}

SafetensorsContents load_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  TCN_CHECK(f.good(), path, ": cannot open: ", std::strerror(errno));
  f.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(f.tellg());
  f.seekg(0);
  TCN_CHECK(file_size >= 8, path, ": not a safetensors file (", file_size, " bytes, shorter than the 8-byte header length)");
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  TCN_CHECK(n <= file_size - 8, path, ": truncated or corrupt: header length ", n, " exceeds the file size ", file_size);
  TCN_CHECK(n <= kMaxHeaderBytes, path, ": corrupt: header length ", n, " exceeds ", kMaxHeaderBytes, " bytes");
  std::string json(n, '\0');
  f.read(json.data(), static_cast<std::streamsize>(n));
  TCN_CHECK(f.good(), path, ": read error in the header");

  nlohmann::ordered_json header;  // ordered: tensors come back in the file's order (optimizer state is positional)
  std::string duplicate;          // the parser keeps one of two equal keys silently: catch them here
  std::set<std::string> top_keys;
  auto on_event = [&](int depth, nlohmann::ordered_json::parse_event_t event, nlohmann::ordered_json& parsed) {
    if (depth == 1 && event == nlohmann::ordered_json::parse_event_t::key && parsed.is_string() &&
        !top_keys.insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  try {
    header = nlohmann::ordered_json::parse(json, on_event);
  } catch (const nlohmann::json::exception& e) {
    TCN_FAIL(path, ": corrupt header (invalid JSON: ", e.what(), ")");
  }
  TCN_CHECK(header.is_object(), path, ": corrupt header (not a JSON object)");
  TCN_CHECK(duplicate.empty(), path, ": corrupt header: the name '", duplicate, "' appears twice");
  const uint64_t data_size = file_size - 8 - n;

  SafetensorsContents out;
  out.path = path;
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  try {
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") {
        TCN_CHECK(it->is_object(), path, ": __metadata__ is not an object");
        for (auto m = it->begin(); m != it->end(); ++m) {
          TCN_CHECK(m->is_string(), path, ": __metadata__ value '", m.key(), "' is not a string");
          out.metadata[m.key()] = m->get<std::string>();
        }
        continue;
      }
      const auto& e = *it;
      TCN_CHECK(e.is_object() && e.contains("dtype") && e.contains("shape") && e.contains("data_offsets"), path,
                ": tensor '", it.key(), "' lacks dtype, shape or data_offsets");
      Entry en;
      en.name = it.key();
      TCN_CHECK(e["dtype"].is_string() && parse_st_dtype(e["dtype"].get<std::string>(), en.dtype), path,
                ": tensor '", en.name, "' has unsupported dtype ",
                e["dtype"].is_string() ? e["dtype"].get<std::string>() : e["dtype"].dump(), " (supported: F32, F64, I64)");
      // Every dimension a non-negative integer (no floats, no negatives), sizes
      // multiplied with overflow checks: validated before anything is allocated.
      TCN_CHECK(e["shape"].is_array(), path, ": tensor '", en.name, "' has a shape that is not a list");
      uint64_t bytes = dtype_size(en.dtype);
      for (const auto& d : e["shape"]) {
        TCN_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t(INT64_MAX), path, ": tensor '", en.name,
                  "' has shape ", e["shape"].dump(), ": every dimension must be a non-negative integer");
        TCN_CHECK(!__builtin_mul_overflow(bytes, d.get<uint64_t>(), &bytes), path, ": tensor '", en.name,
                  "' has shape ", e["shape"].dump(), ", whose size overflows");
        en.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
      }
      const auto& offs = e["data_offsets"];
      TCN_CHECK(offs.is_array() && offs.size() == 2 && offs[0].is_number_unsigned() && offs[1].is_number_unsigned(),
                path, ": tensor '", en.name, "' has data_offsets ", offs.dump(), " (expected two integers)");
      en.begin = offs[0].get<uint64_t>();
      en.end = offs[1].get<uint64_t>();
      TCN_CHECK(en.begin <= en.end, path, ": tensor '", en.name, "' has invalid data_offsets ", offs.dump());
      TCN_CHECK(en.end <= data_size, path, ": truncated: tensor '", en.name, "' ends at byte ", en.end,
                " of a data section of ", data_size, " bytes");
      TCN_CHECK(en.end - en.begin == bytes, path, ": tensor '", en.name, "' has ", en.end - en.begin,
                " bytes of data for shape ", en.shape, " of ", dtype_name(en.dtype));
      entries.push_back(en);
    }
  } catch (const nlohmann::json::exception& e) {
    TCN_FAIL(path, ": corrupt header (", e.what(), ")");
  }
  // The tensors tile the data section exactly: no overlaps, no gaps, no trailing bytes.
  std::vector<const Entry*> by_offset;
  for (const Entry& en : entries) by_offset.push_back(&en);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  for (const Entry* en : by_offset) {
    TCN_CHECK(en->begin >= covered, path, ": corrupt: tensor '", en->name, "' overlaps the tensor before it (bytes ",
              en->begin, "-", en->end, ")");
    TCN_CHECK(en->begin == covered, path, ": corrupt: ", en->begin - covered, " unused bytes before tensor '",
              en->name, "'");
    covered = en->end;
  }
  TCN_CHECK(covered == data_size, path, ": corrupt: ", data_size - covered, " trailing bytes after the last tensor");
  for (const Entry& en : entries) {
    Tensor t = empty(en.shape, {en.dtype, Device::cpu()});
    f.seekg(static_cast<std::streamoff>(8 + n + en.begin));
    f.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(en.end - en.begin));
    TCN_CHECK(f.good(), path, ": read error in tensor '", en.name, "'");
    out.tensors.emplace_back(en.name, t);
  }
  return out;
}

}  // namespace tcn::nn
