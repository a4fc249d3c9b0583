#include "data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>

#include "core/files.h"
#include "ops/ops.h"

namespace charlm {

using tcn::Tensor;

const char* tokens_name(Tokens t) { return t == Tokens::Chars ? "char" : "word"; }

Tokens parse_tokens(const std::string& name) {
  if (name == "char") return Tokens::Chars;
  if (name == "word") return Tokens::Words;
  TCN_FAIL("tokens '", name, "': expected char or word");
}

const char* score_name(Tokens t) { return t == Tokens::Chars ? "bpc" : "ppl"; }
double score(Tokens t, double loss) { return t == Tokens::Chars ? loss / 0.6931471805599453 : std::exp(loss); }
const char* rate_unit(Tokens t) { return t == Tokens::Chars ? "chars" : "words"; }

Vocab Vocab::from_tokens(const std::vector<std::string>& tokens, Tokens kind) {
  Vocab v;
  v.kind = kind;
  v.tokens = tokens;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (kind == Tokens::Chars)
      TCN_CHECK(tokens[i].size() == 1, "vocabulary entry ", i, " is not a single byte character");
    else
      TCN_CHECK(!tokens[i].empty() && tokens[i].find_first_of(" \t\n\r") == std::string::npos, "vocabulary entry ",
                i, " is not a word (empty, or holds white space)");
    TCN_CHECK(v.index.emplace(tokens[i], static_cast<int64_t>(i)).second, "vocabulary entry ", i, " ('", tokens[i],
              "') appears twice");
  }
  return v;
}

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    for (std::string w; words >> w;) out.push_back(std::move(w));
    out.push_back(kEos);
  }
  return out;
}

std::vector<int64_t> Vocab::encode(const std::string& text, const std::string& what) const {
  std::vector<int64_t> out;
  if (kind == Tokens::Words) {
    const std::vector<std::string> words = split_words(text);
    out.reserve(words.size());
    for (size_t i = 0; i < words.size(); ++i) {
      auto it = index.find(words[i]);
      TCN_CHECK(it != index.end(), what, ": word '", words[i], "' (word ", i, ") is not in the model's vocabulary of ",
                size(), " words");
      out.push_back(it->second);
    }
    return out;
  }
  out.resize(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    auto it = index.find(std::string(1, text[i]));
    if (it == index.end()) {
      unsigned c = static_cast<unsigned char>(text[i]);
      std::ostringstream os;
      if (c >= 32 && c < 127) os << "'" << text[i] << "'";
      else os << "byte 0x" << std::hex << c;
      TCN_FAIL(what, ": character ", os.str(), " at offset ", i, " is not in the model's vocabulary of ", size(),
               " characters");
    }
    out[i] = it->second;
  }
  return out;
}

std::string read_data_file(const std::string& path) {
  struct stat sb {};
  TCN_CHECK(::stat(path.c_str(), &sb) == 0, "cannot read ", path,
            ": the data directory must hold ptb.train.txt, ptb.valid.txt and ptb.test.txt "
            "(scripts/get_data.sh puts them in data/ptb; ",
            std::strerror(errno), ")");
  std::string s = tcn::read_regular_file(path);
  TCN_CHECK(!s.empty(), path, " is empty");
  return s;
}

void check_regular_input(const std::string& path, const std::string& what) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0) return;  // missing: the reader says so
  TCN_CHECK(S_ISREG(sb.st_mode), what, " ", path, " is not a regular file (", tcn::file_kind(sb.st_mode), ")");
}

Corpus load_corpus(const std::string& dir, Tokens kind) {
  Corpus c;
  c.train = read_data_file(dir + "/ptb.train.txt");
  c.valid = read_data_file(dir + "/ptb.valid.txt");
  c.test = read_data_file(dir + "/ptb.test.txt");
  std::vector<std::string> tokens;
  if (kind == Tokens::Chars) {
    std::set<unsigned char> seen;
    for (const std::string* s : {&c.train, &c.valid, &c.test})
      for (unsigned char ch : *s) seen.insert(ch);
    for (unsigned char ch : seen) tokens.emplace_back(1, static_cast<char>(ch));
  } else {
    std::set<std::string> seen;
    for (const std::string* s : {&c.train, &c.valid, &c.test})
      for (std::string& w : split_words(*s))
        if (seen.insert(w).second) tokens.push_back(std::move(w));
  }
  c.vocab = Vocab::from_tokens(tokens, kind);
  return c;
}

Tensor batchify(const std::vector<int64_t>& data, int64_t batch, int64_t min_len, const std::string& what) {
  TCN_CHECK(batch >= 1, "batch size must be >= 1, got ", batch);
  const int64_t len = static_cast<int64_t>(data.size()) / batch;
  TCN_CHECK(len >= min_len + 1, what, " has ", data.size(), " tokens: too short for ", batch,
            " streams of at least ", min_len + 1, " tokens (one window plus its target)");
  std::vector<int64_t> trimmed(data.begin(), data.begin() + batch * len);
  return tcn::from_vector(trimmed, {batch, len});
}

std::vector<Window> windows(int64_t source_len, int64_t seq_len, int64_t validseqlen) {
  TCN_CHECK(validseqlen > 0 && validseqlen <= seq_len, "windows: validseqlen ", validseqlen, " must be in [1, seq_len = ",
            seq_len, "]");
  std::vector<Window> out;
  for (int64_t i = 0; i < source_len - 1; i += validseqlen) {
    if (i + seq_len - validseqlen >= source_len) continue;
    int64_t len = std::min(seq_len, source_len - 1 - i);
    if (len <= seq_len - validseqlen) continue;  // nothing left to score
    out.push_back({i, len});
  }
  return out;
}

std::pair<Tensor, Tensor> get_batch(const Tensor& source, const Window& w) {
  return {source.narrow(1, w.start, w.len).contiguous(), source.narrow(1, w.start + 1, w.len).contiguous()};
}

}  // namespace charlm
