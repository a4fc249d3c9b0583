// pytorch-tcn's option names: activations by name, TCNOptions from and to JSON, and
// their checks.
#include "nn/tcn.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "nn/models.h"  // limits::

namespace tcn::nn {

// ---- activations ----------------------------------------------------------------
namespace {
constexpr std::pair<Activation, const char*> kActivations[] = {
    {Activation::relu, "relu"}, {Activation::tanh, "tanh"}, {Activation::leaky_relu, "leaky_relu"},
    {Activation::sigmoid, "sigmoid"}, {Activation::elu, "elu"}, {Activation::gelu, "gelu"},
    {Activation::selu, "selu"}};
}  // namespace

Activation activation_from_name(const std::string& name) {
  std::string names;
  for (const auto& [a, n] : kActivations) {
    if (name == n) return a;
    names += names.empty() ? n : std::string(", ") + n;
  }
  TCN_FAIL("unknown activation '", name, "': expected one of ", names);
}

const char* activation_name(Activation a) {
  for (const auto& [b, n] : kActivations)
    if (a == b) return n;
  return "?";
}

Tensor activate(Activation a, const Tensor& x) {
  switch (a) {
    case Activation::relu: return relu(x);
    case Activation::tanh: return tanh(x);
    case Activation::leaky_relu: return leaky_relu(x, 0.01);
    case Activation::sigmoid: return sigmoid(x);
    case Activation::elu: return elu(x, 1.0);
    case Activation::gelu: return gelu(x);
    case Activation::selu: return selu(x);
  }
  TCN_FAIL("activate: invalid activation");
}

// ---- options ----------------------------------------------------------------------
namespace {

void check_one_of(const char* key, const std::string& v, std::initializer_list<const char*> allowed) {
  std::string names;
  for (const char* a : allowed) {
    if (v == a) return;
    names += names.empty() ? std::string("'") + a + "'" : std::string(", '") + a + "'";
  }
  TCN_FAIL("TCN: ", key, " must be one of ", names, ", got '", v, "'");
}

std::string kwarg_string(const nlohmann::json& v, const char* key) {
  TCN_CHECK(v.is_string(), "TCN options: ", key, " must be a string, got ", v.dump());
  return v.get<std::string>();
}
int64_t kwarg_int(const nlohmann::json& v, const char* key) {
  TCN_CHECK(v.is_number_integer(), "TCN options: ", key, " must be an integer, got ", v.dump());
  // JSON's integers reach 2^64 - 1, which would wrap to -1 as an int64.
  TCN_CHECK(!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX), "TCN options: ", key,
            " is out of range, got ", v.dump());
  return v.get<int64_t>();
}
bool kwarg_bool(const nlohmann::json& v, const char* key) {
  TCN_CHECK(v.is_boolean(), "TCN options: ", key, " must be true or false, got ", v.dump());
  return v.get<bool>();
}
std::vector<int64_t> kwarg_ints(const nlohmann::json& v, const char* key) {
  TCN_CHECK(v.is_array(), "TCN options: ", key, " must be a list of integers, got ", v.dump());
  std::vector<int64_t> out;
  for (const auto& x : v) out.push_back(kwarg_int(x, key));
  return out;
}

}  // namespace

nlohmann::json TCNOptions::parse(const std::string& text, const std::string& what) {
  // JSON lets a key appear twice and the parser keeps the last; a typo'd copy must not win silently.
  // Every object's keys, by nesting depth, while parsing (these texts are a few hundred bytes).
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  using Event = nlohmann::json::parse_event_t;
  auto on_event = [&](int, Event event, nlohmann::json& parsed) {
    if (event == Event::object_start) keys.emplace_back();
    else if (event == Event::object_end) keys.pop_back();
    else if (event == Event::key && !keys.back().insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, on_event);
  } catch (const nlohmann::json::exception& e) {
    TCN_FAIL(what, ": not JSON (", e.what(), ")");
  }
  TCN_CHECK(duplicate.empty(), what, ": the key '", duplicate, "' appears twice");
  return j;
}

TCNOptions TCNOptions::from_json(const nlohmann::json& j) {
  TCN_CHECK(j.is_object(), "TCN options must be a JSON object, got ", j.dump());
  TCNOptions o;
  for (const auto& [key, v] : j.items()) {
    const char* k = key.c_str();
    if (key == "num_inputs") o.num_inputs = kwarg_int(v, k);
    else if (key == "num_channels") o.num_channels = kwarg_ints(v, k);
    else if (key == "kernel_size") o.kernel_size = kwarg_int(v, k);
    else if (key == "dilations") o.dilations = v.is_null() ? std::vector<int64_t>{} : kwarg_ints(v, k);
    else if (key == "dilation_reset") o.dilation_reset = v.is_null() ? 0 : kwarg_int(v, k);
    else if (key == "dropout") {
      TCN_CHECK(v.is_number(), "TCN options: dropout must be a number, got ", v.dump());
      o.dropout = v.get<double>();
    } else if (key == "causal") o.causal = kwarg_bool(v, k);
    else if (key == "use_norm") o.use_norm = v.is_null() ? "none" : kwarg_string(v, k);
    else if (key == "activation") o.activation = kwarg_string(v, k);
    else if (key == "kernel_initializer") o.kernel_initializer = kwarg_string(v, k);
    else if (key == "use_skip_connections") o.use_skip_connections = kwarg_bool(v, k);
    else if (key == "input_shape") o.input_shape = kwarg_string(v, k);
    else if (key == "embedding_shapes") {
      o.embedding_dims.clear();
      if (!v.is_null()) {
        TCN_CHECK(v.is_array(), "TCN options: embedding_shapes must be a list of [dim] or [dim, time], got ",
                  v.dump());
        for (const auto& shape : v) {
          TCN_CHECK(shape.is_array() && (shape.size() == 1 || shape.size() == 2),
                    "TCN options: each of embedding_shapes must be [dim] or [dim, time], got ", shape.dump());
          o.embedding_dims.push_back(kwarg_int(shape[0], "embedding_shapes"));
        }
      }
    } else if (key == "embedding_mode") o.embedding_mode = kwarg_string(v, k);
    else if (key == "use_gate") o.use_gate = kwarg_bool(v, k);
    else if (key == "lookahead") {
      TCN_CHECK(kwarg_int(v, k) == 0, "TCN options: lookahead must be 0 (pytorch-tcn deprecated it), got ", v.dump());
    } else if (key == "output_projection") o.output_projection = v.is_null() ? 0 : kwarg_int(v, k);
    else if (key == "output_activation") o.output_activation = v.is_null() ? "" : kwarg_string(v, k);
    else TCN_FAIL("TCN options: unknown key '", key, "'");
  }
  o.validate();
  return o;
}

nlohmann::json TCNOptions::to_json() const {
  nlohmann::json j;
  j["num_inputs"] = num_inputs;
  j["num_channels"] = num_channels;
  j["kernel_size"] = kernel_size;
  j["dilations"] = dilations.empty() ? nlohmann::json() : nlohmann::json(dilations);
  j["dilation_reset"] = dilation_reset == 0 ? nlohmann::json() : nlohmann::json(dilation_reset);
  j["dropout"] = dropout;
  j["causal"] = causal;
  j["use_norm"] = use_norm == "none" ? nlohmann::json() : nlohmann::json(use_norm);
  j["activation"] = activation;
  j["kernel_initializer"] = kernel_initializer;
  j["use_skip_connections"] = use_skip_connections;
  j["input_shape"] = input_shape;
  nlohmann::json shapes;
  for (int64_t d : embedding_dims) shapes.push_back({d});
  j["embedding_shapes"] = embedding_dims.empty() ? nlohmann::json() : shapes;
  j["embedding_mode"] = embedding_mode;
  j["use_gate"] = use_gate;
  j["output_projection"] = output_projection == 0 ? nlohmann::json() : nlohmann::json(output_projection);
  j["output_activation"] = output_activation.empty() ? nlohmann::json() : nlohmann::json(output_activation);
  return j;
}

void TCNOptions::validate() const {
  TCN_CHECK(num_inputs >= 1 && num_inputs <= limits::kMaxWidth, "TCN: num_inputs must be in [1, ",
            limits::kMaxWidth, "], got ", num_inputs);
  TCN_CHECK(!num_channels.empty() && static_cast<int64_t>(num_channels.size()) <= limits::kMaxLevels,
            "TCN: num_channels needs one width per level, 1 to ", limits::kMaxLevels, " levels, got ",
            num_channels.size());
  for (int64_t c : num_channels)
    TCN_CHECK(c >= 1 && c <= limits::kMaxWidth, "TCN: each of num_channels must be in [1, ", limits::kMaxWidth,
              "], got ", c);
  TCN_CHECK(kernel_size >= 1 && kernel_size <= limits::kMaxKsize, "TCN: kernel_size must be in [1, ",
            limits::kMaxKsize, "], got ", kernel_size);
  TCN_CHECK(dilations.empty() || dilations.size() == num_channels.size(), "TCN: dilations has ", dilations.size(),
            " entries for ", num_channels.size(), " levels (num_channels)");
  for (int64_t d : dilations)
    TCN_CHECK(d >= 1 && d <= (int64_t{1} << 31), "TCN: each dilation must be in [1, 2^31], got ", d);
  TCN_CHECK(dilation_reset >= 0 && dilation_reset <= (int64_t{1} << 30), "TCN: dilation_reset must be in [1, 2^30] "
            "(0: none), got ", dilation_reset);
  TCN_CHECK(dropout >= 0 && dropout < 1, "TCN: dropout must be in [0, 1), got ", dropout);
  check_one_of("use_norm", use_norm, {"weight_norm", "batch_norm", "layer_norm", "none"});
  const Activation act = activation_from_name(activation);
  check_one_of("kernel_initializer", kernel_initializer,
               {"xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal", "normal", "uniform",
                "normal_0.01"});
  TCN_CHECK(!(kernel_initializer.rfind("kaiming", 0) == 0 && (act == Activation::gelu || act == Activation::elu)),
            "TCN: kernel_initializer '", kernel_initializer, "' has no gain for activation '", activation,
            "' (as in pytorch-tcn): use xavier_*, normal or uniform, or relu / leaky_relu");
  check_one_of("input_shape", input_shape, {"NCL", "NLC"});
  for (int64_t e : embedding_dims)
    TCN_CHECK(e >= 1 && e <= limits::kMaxWidth, "TCN: each embedding dim must be in [1, ", limits::kMaxWidth,
              "], got ", e);
  check_one_of("embedding_mode", embedding_mode, {"add", "concat"});
  TCN_CHECK(output_projection >= 0 && output_projection <= limits::kMaxWidth, "TCN: output_projection must be in [0, ",
            limits::kMaxWidth, "] (0: none), got ", output_projection);
  if (!output_activation.empty()) activation_from_name(output_activation);
  // The parameter count, bounded from above (every conv with its gate half, the downsample and skip
  // projections, the output projection, in doubles: no overflow), held to charlm's limit, so that a
  // mistyped width is an error here and not an allocation failure.
  double params = 0, in = static_cast<double>(num_inputs);
  for (int64_t e : embedding_dims) in += embedding_mode == "concat" ? static_cast<double>(e) : 0.0;
  const double k = static_cast<double>(kernel_size), last = static_cast<double>(num_channels.back());
  for (int64_t c_int : num_channels) {
    const double c = static_cast<double>(c_int), gate = use_gate ? 2.0 : 1.0;
    params += gate * (in * c * k + c) + c * c * k + c + in * c + c + 4 * c;  // conv1, conv2, downsample, norms
    for (int64_t e : embedding_dims) params += static_cast<double>(e) * c;   // the embeddings' projections
    if (use_skip_connections) params += c * last + last;
    in = c;
  }
  params += static_cast<double>(output_projection) * (last + 1);
  TCN_CHECK(params <= static_cast<double>(limits::kMaxParameters), "TCN: the options describe up to ",
            static_cast<int64_t>(std::min(params, 9e18)), " parameters, more than the limit of ",
            limits::kMaxParameters, " (", limits::kMaxParameters * 4 >> 30, " GiB of fp32 weights)");
}

std::vector<int64_t> TCNOptions::level_dilations() const {
  if (!dilations.empty()) return dilations;
  // pytorch-tcn: the schedule restarts every floor(log2(2 * dilation_reset)) levels.
  int64_t period = 64;
  if (dilation_reset > 0) {
    period = 0;
    for (int64_t r = 2 * dilation_reset; r > 1; r >>= 1) ++period;
  }
  std::vector<int64_t> d;
  for (size_t i = 0; i < num_channels.size(); ++i) d.push_back(int64_t{1} << (static_cast<int64_t>(i) % period));
  return d;
}

}  // namespace tcn::nn
