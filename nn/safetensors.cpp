#include "nn/safetensors.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <bit>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>

#include "core/files.h"
#include "ops/ops.h"

namespace tcn::nn {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

// A header is names, shapes, offsets and metadata: a few KB for our models. The
// bound keeps a hostile header's parsed form (~16 bytes per JSON value) small.
constexpr uint64_t kMaxHeaderBytes = 16u << 20;
// {name: {"shape": [...]}} and {"__metadata__": {key: "string"}} nest 3 deep.
constexpr int kMaxHeaderDepth = 3;

const char* st_dtype(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
    case DType::BF16: return "BF16";
  }
  return "?";
}

bool parse_st_dtype(const std::string& s, DType& out) {
  if (s == "F32") out = DType::F32;
  else if (s == "F64") out = DType::F64;
  else if (s == "I64") out = DType::I64;
  else if (s == "BF16") out = DType::BF16;
  else return false;
  return true;
}

constexpr const char* kChecksumsKey = "checksums";
constexpr const char* kHashPrefix = "xxh3-64:";

std::string hash_bytes(const void* data, size_t size) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH3_64bits(data, size)));
  return kHashPrefix + std::string(hex);
}

// The SAX pass over a header (parse_safetensors): depth, and the top-level keys in order.
struct HeaderScan : nlohmann::json_sax<nlohmann::json> {
  int depth = 0;
  bool too_deep = false;
  std::vector<std::string> order;  // top-level keys, first appearance, in the file's order
  std::set<std::string> seen;
  std::string duplicate, error;
  bool open() {
    too_deep = ++depth > kMaxHeaderDepth;
    return !too_deep;
  }
  bool start_object(std::size_t) override { return open(); }
  bool start_array(std::size_t) override { return open(); }
  bool end_object() override { return --depth, true; }
  bool end_array() override { return --depth, true; }
  bool key(string_t& k) override {
    if (depth == 1) {
      if (seen.insert(k).second) order.push_back(k);
      else if (duplicate.empty()) duplicate = k;
    }
    return true;
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = e.what();
    return false;
  }
};

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
  TCN_CHECK(!path.empty(), "save_safetensors: empty path");
  TCN_CHECK(!metadata.count(kChecksumsKey), "save_safetensors: the metadata key '", kChecksumsKey, "' is reserved");
  check_replaceable(path, "save_safetensors: ");
  // The header's JSON objects are written key by key, in the tensors' order (a JSON object
  // built by insertion would search its keys on every insert: quadratic in the tensor count).
  std::string json = "{", checksums = "{";
  std::vector<Tensor> host;
  std::set<std::string> seen;
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    TCN_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    TCN_CHECK(name != "__metadata__" && seen.insert(name).second, "save_safetensors: duplicate or reserved name '",
              name, "'");
    Tensor c = t.detach().to(Device::cpu()).contiguous();
    size_t nbytes = c.numel() * dtype_size(c.dtype());
    const nlohmann::ordered_json entry = {
        {"dtype", st_dtype(c.dtype())}, {"shape", c.shape()}, {"data_offsets", {offset, offset + nbytes}}};
    const std::string key = nlohmann::json(name).dump();
    json += key + ":" + entry.dump() + ",";
    checksums += (checksums.size() > 1 ? "," : "") + key + ":" + nlohmann::json(hash_bytes(c.raw_data(), nbytes)).dump();
    offset += nbytes;
    host.push_back(c);
  }
  nlohmann::ordered_json meta(metadata);
  meta[kChecksumsKey] = checksums + "}";
  json += "\"__metadata__\":" + meta.dump() + "}";
  while ((8 + json.size()) % 8 != 0) json.push_back(' ');
  const uint64_t n = json.size();

  std::vector<std::string_view> pieces{{reinterpret_cast<const char*>(&n), 8}, json};
  for (const Tensor& h : host) pieces.emplace_back(static_cast<const char*>(h.raw_data()), h.numel() * dtype_size(h.dtype()));
  write_file_atomic(path, pieces, "save_safetensors: ");
}

void check_save_target(const std::string& path) {
  TCN_CHECK(!path.empty(), "empty path");
  check_replaceable(path, "");
  const std::string tmp = temp_file_path(path);
  ::close(create_temp_file(tmp, ""));
  ::unlink(tmp.c_str());
}

std::vector<std::string> remove_stale_temp_files(const std::string& path) {
  const auto [dir, name] = split_path(path);
  const std::string prefix = temp_file_prefix(name);
  std::vector<std::string> removed;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return removed;
  while (const dirent* e = ::readdir(d)) {
    const std::string entry = e->d_name;
    if (entry.rfind(prefix, 0) != 0) continue;
    // "<pid>-<n>" after the prefix, digits only: anything else is not ours.
    const std::string rest = entry.substr(prefix.size());
    const size_t dash = rest.find('-');
    if (dash == 0 || dash == std::string::npos || dash + 1 == rest.size() ||
        rest.find_first_not_of("0123456789-") != std::string::npos || rest.find('-', dash + 1) != std::string::npos)
      continue;
    const long pid = std::strtol(rest.substr(0, dash).c_str(), nullptr, 10);
    if (pid <= 0 || pid > INT_MAX) continue;
    if (pid == ::getpid() || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // still running
    const std::string full = dir + "/" + entry;
    struct stat sb {};
    if (::lstat(full.c_str(), &sb) == 0 && S_ISREG(sb.st_mode) && ::unlink(full.c_str()) == 0) removed.push_back(full);
  }
  ::closedir(d);
  return removed;
}

SafetensorsContents load_safetensors(const std::string& path) { return parse_safetensors(read_regular_file(path), path); }

namespace {

// One tensor of the header, checked: its dtype, shape and place in the data section.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

// The header's JSON and the data section after it, from the 8-byte length.
std::pair<std::string_view, std::string_view> split_file(std::string_view bytes, const std::string& path) {
  const uint64_t file_size = bytes.size();
  TCN_CHECK(file_size >= 8, path, ": not a safetensors file (", file_size, " bytes, shorter than the 8-byte header length)");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  TCN_CHECK(n <= file_size - 8, path, ": truncated or corrupt: header length ", n, " exceeds the file size ", file_size);
  TCN_CHECK(n <= kMaxHeaderBytes, path, ": corrupt: header length ", n, " exceeds ", kMaxHeaderBytes, " bytes");
  return {bytes.substr(8, n), bytes.substr(8 + n)};
}

// Two linear passes. First a SAX pass checks the header's shape before anything is built:
// its depth, and the top-level keys in the file's order (the order in which the tensors come
// back: optimizer state is positional), with any key that appears twice. Then the plain
// parse into a std::map-backed object. (A parse with a callback, or into an insertion-ordered
// object, scans the keys at every entry: 10^5 tensors took 40 s.) Returns the header and its
// keys in the file's order.
std::pair<nlohmann::json, std::vector<std::string>> parse_header(std::string_view json, const std::string& path) {
  HeaderScan scan;
  if (!nlohmann::json::sax_parse(json, &scan)) {
    TCN_CHECK(!scan.too_deep, path, ": corrupt header: nested deeper than a safetensors header (", kMaxHeaderDepth,
              " levels)");
    TCN_FAIL(path, ": corrupt header (invalid JSON: ", scan.error, ")");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    TCN_FAIL(path, ": corrupt header (invalid JSON: ", e.what(), ")");
  }
  TCN_CHECK(header.is_object(), path, ": corrupt header (not a JSON object)");
  TCN_CHECK(scan.duplicate.empty(), path, ": corrupt header: the name '", scan.duplicate, "' appears twice");
  TCN_CHECK(scan.order.size() == header.size(), path, ": corrupt header (", header.size(), " entries, ",
            scan.order.size(), " keys seen)");
  return {std::move(header), std::move(scan.order)};
}

// One tensor's entry: dtype, shape (every dimension a non-negative integer, sizes
// multiplied with overflow checks: validated before anything is allocated) and
// data offsets inside a data section of `data_size` bytes.
Entry parse_entry(const std::string& key, const nlohmann::json& e, uint64_t data_size, const std::string& path) {
  TCN_CHECK(e.is_object() && e.contains("dtype") && e.contains("shape") && e.contains("data_offsets"), path,
            ": tensor '", key, "' lacks dtype, shape or data_offsets");
  Entry en;
  en.name = key;
  TCN_CHECK(e["dtype"].is_string() && parse_st_dtype(e["dtype"].get<std::string>(), en.dtype), path, ": tensor '",
            en.name, "' has unsupported dtype ",
            e["dtype"].is_string() ? e["dtype"].get<std::string>() : e["dtype"].dump(), " (supported: F32, F64, I64, BF16)");
  TCN_CHECK(e["shape"].is_array(), path, ": tensor '", en.name, "' has a shape that is not a list");
  uint64_t bytes = dtype_size(en.dtype);
  for (const auto& d : e["shape"]) {
    TCN_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t(INT64_MAX), path, ": tensor '", en.name,
              "' has shape ", e["shape"].dump(), ": every dimension must be a non-negative integer");
    TCN_CHECK(!__builtin_mul_overflow(bytes, d.get<uint64_t>(), &bytes), path, ": tensor '", en.name, "' has shape ",
              e["shape"].dump(), ", whose size overflows");
    en.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }
  const auto& offs = e["data_offsets"];
  TCN_CHECK(offs.is_array() && offs.size() == 2 && offs[0].is_number_unsigned() && offs[1].is_number_unsigned(), path,
            ": tensor '", en.name, "' has data_offsets ", offs.dump(), " (expected two integers)");
  en.begin = offs[0].get<uint64_t>();
  en.end = offs[1].get<uint64_t>();
  TCN_CHECK(en.begin <= en.end, path, ": tensor '", en.name, "' has invalid data_offsets ", offs.dump());
  TCN_CHECK(en.end <= data_size, path, ": truncated: tensor '", en.name, "' ends at byte ", en.end,
            " of a data section of ", data_size, " bytes");
  TCN_CHECK(en.end - en.begin == bytes, path, ": tensor '", en.name, "' has ", en.end - en.begin,
            " bytes of data for shape ", en.shape, " of ", dtype_name(en.dtype));
  return en;
}

// __metadata__: string values only; the checksums (kChecksumsKey) come back apart.
void parse_metadata(const nlohmann::json& e, const std::string& path, SafetensorsContents& out,
                    std::optional<std::string>& checksums_json) {
  TCN_CHECK(e.is_object(), path, ": __metadata__ is not an object");
  for (auto m = e.begin(); m != e.end(); ++m) {
    TCN_CHECK(m->is_string(), path, ": __metadata__ value '", m.key(), "' is not a string");
    if (m.key() == kChecksumsKey) checksums_json = m->get<std::string>();
    else out.metadata[m.key()] = m->get<std::string>();
  }
}

// The tensors tile the data section exactly: no overlaps, no gaps, no trailing bytes.
void check_tiling(const std::vector<Entry>& entries, uint64_t data_size, const std::string& path) {
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
}

// The checksums of the metadata (files of other writers have none): one per
// tensor of the file, and none for a tensor it lacks.
std::map<std::string, std::string> parse_checksums(const std::string& checksums_json, const std::vector<Entry>& entries,
                                                   const std::string& path) {
  std::map<std::string, std::string> checksums;
  try {
    const auto j = nlohmann::json::parse(checksums_json);
    TCN_CHECK(j.is_object(), path, ": corrupt metadata: checksums is not a JSON object");
    for (auto it = j.begin(); it != j.end(); ++it) {
      TCN_CHECK(it->is_string(), path, ": corrupt metadata: the checksum of '", it.key(), "' is not a string");
      checksums[it.key()] = it->get<std::string>();
    }
  } catch (const nlohmann::json::exception& e) {
    TCN_FAIL(path, ": corrupt metadata: checksums (", e.what(), ")");
  }
  for (const Entry& en : entries)
    TCN_CHECK(checksums.count(en.name), path, ": corrupt metadata: no checksum for tensor '", en.name, "'");
  std::set<std::string> names;
  for (const Entry& en : entries) names.insert(en.name);
  for (const auto& kv : checksums)
    TCN_CHECK(names.count(kv.first), path, ": corrupt metadata: a checksum for '", kv.first,
              "', which is not in the file");
  return checksums;
}

// A tensor's bytes, checked against its checksum when the file has one (`want`).
Tensor read_tensor(const Entry& en, std::string_view data, const std::string* want, const std::string& path) {
  const std::string_view src = data.substr(en.begin, en.end - en.begin);
  if (want) {
    TCN_CHECK(want->rfind(kHashPrefix, 0) == 0, path, ": unsupported checksum '", *want, "' for tensor '", en.name,
              "' (expected ", kHashPrefix, "...)");
    const std::string got = hash_bytes(src.data(), src.size());
    TCN_CHECK(got == *want, path, ": corrupt data: tensor '", en.name, "' does not match its checksum (", got,
              ", the file says ", *want, ")");
  }
  Tensor t = empty(en.shape, {en.dtype, Device::cpu()});
  if (!src.empty()) std::memcpy(t.raw_data(), src.data(), src.size());
  return t;
}

}  // namespace

SafetensorsContents parse_safetensors(std::string_view bytes, const std::string& path) {
  const auto [json, data] = split_file(bytes, path);
  const auto [header, order] = parse_header(json, path);
  SafetensorsContents out;
  out.path = path;
  std::vector<Entry> entries;
  std::optional<std::string> checksums_json;
  try {
    for (const std::string& key : order) {
      if (key == "__metadata__") parse_metadata(header.at(key), path, out, checksums_json);
      else entries.push_back(parse_entry(key, header.at(key), data.size(), path));
    }
  } catch (const nlohmann::json::exception& e) {
    TCN_FAIL(path, ": corrupt header (", e.what(), ")");
  }
  check_tiling(entries, data.size(), path);
  const std::map<std::string, std::string> checksums =
      checksums_json ? parse_checksums(*checksums_json, entries, path) : std::map<std::string, std::string>{};
  for (const Entry& en : entries)
    out.tensors.emplace_back(en.name, read_tensor(en, data, checksums_json ? &checksums.at(en.name) : nullptr, path));
  return out;
}

}  // namespace tcn::nn
