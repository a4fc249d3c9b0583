#include "model_file.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "data.h"
#include "train.h"
#include "core/error.h"
#include "core/files.h"

namespace charlm {

using namespace tcn;

namespace {

// A JSON list of strings: from a --vocab file or the "vocab" metadata entry.
std::vector<std::string> parse_vocab(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    TCN_FAIL(where, ": not JSON (", e.what(), "); expected a list of strings, e.g. [\"\\n\", \" \", \"a\"]");
  }
  TCN_CHECK(j.is_array() && std::all_of(j.begin(), j.end(), [](const auto& v) { return v.is_string(); }), where,
            ": expected a JSON list of strings (the vocabulary in index order)");
  return j.get<std::vector<std::string>>();
}

}  // namespace

ModelFile load_model_file(const std::string& path, const std::string& flag, const ModelFileOptions& o,
                          const nn::ImportOptions& sizes) {
  check_regular_input(path, flag);
  nn::SafetensorsContents file = nn::load_safetensors(path);
  ModelFile out;
  if (nn::is_tcn_checkpoint(file)) {
    out.loaded = nn::load_char_lm(std::move(file), kTrainingTensors);
    nn::check_finite_state(*out.loaded.model, flag + " " + path);
    return out;
  }
  // A PyTorch state_dict: names and config from its tensors, the vocabulary from elsewhere.
  nn::ImportOptions io = sizes;
  io.allow_extra = o.allow_extra;
  nn::ImportedStateDict imp = nn::import_state_dict(file, io);
  std::fprintf(stderr, "%s %s: %s\n", flag.c_str(), path.c_str(), nn::describe(imp).c_str());
  std::vector<std::string> vocab;
  std::string vocab_from;
  if (!o.vocab_file.empty()) {
    std::string text;
    try {
      text = tcn::read_regular_file(o.vocab_file);
    } catch (const Error& e) {
      TCN_FAIL("--vocab ", e.what());  // "--vocab PATH: cannot open: ..." (not the data directory's message)
    }
    vocab = parse_vocab(text, "--vocab " + o.vocab_file);
    vocab_from = "--vocab " + o.vocab_file;
  } else if (auto it = imp.file.metadata.find("vocab"); it != imp.file.metadata.end()) {
    vocab = parse_vocab(it->second, path + ": metadata 'vocab'");
    vocab_from = "the file's 'vocab' metadata";
  } else {
    const Tokens kind = parse_tokens(o.tokens);
    vocab = load_corpus(o.data, kind).vocab.tokens;
    vocab_from = "the data";
    std::fprintf(stderr,
                 "%s %s: warning: a state_dict holds no vocabulary; using the %zu %s of %s, %s, as the "
                 "reference trainer builds them. The model's must be in that order: if it was trained on other "
                 "data, give its vocabulary with --vocab FILE (a JSON list) or a 'vocab' metadata entry "
                 "(tools/convert_pytorch.py --vocab)\n",
                 flag.c_str(), path.c_str(), vocab.size(), kind == Tokens::Chars ? "characters" : "words",
                 o.data.c_str(), kind == Tokens::Chars ? "sorted" : "in order of first appearance");
  }
  const int64_t vocab_size = imp.config.at("vocab_size").get<int64_t>();
  TCN_CHECK(static_cast<int64_t>(vocab.size()) == vocab_size, flag, " ", path, ": the model has ", vocab_size,
            " tokens (encoder.weight), but the vocabulary from ", vocab_from, " has ", vocab.size());
  out.loaded.vocab = vocab;
  out.loaded.model = std::move(imp.model);
  nn::check_finite_state(*out.loaded.model, flag + " " + path);
  out.loaded.file = std::move(imp.file);
  out.loaded.file.metadata["tokens"] = o.tokens;  // what checkpoint_tokens() reads
  out.foreign = true;
  return out;
}

}  // namespace charlm
