// Penn Treebank as characters or as words, prepared as the locuslab reference
// trainers do: one vocabulary over train + valid + test, each split cut into
// batch_size contiguous streams, read in windows of seq_len that advance by
// validseqlen; only the last validseqlen positions of a window are scored, the
// first seq_len - validseqlen are history.
//   characters (char_cnn): every byte is a token; the vocabulary sorted.
//   words (word_cnn): whitespace-separated words, "<eos>" after every line;
//   the vocabulary in order of first appearance (train, valid, test), as the
//   reference's Dictionary, so token ids agree with it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace charlm {

enum class Tokens { Chars, Words };
// "char" / "word" (the checkpoint metadata's and --tokens' spelling) and back.
const char* tokens_name(Tokens t);
Tokens parse_tokens(const std::string& name);

// How a loss (mean nats per token) is reported: bits per character ("bpc"),
// or perplexity ("ppl") for words, as the reference trainers print them.
const char* score_name(Tokens t);
double score(Tokens t, double loss);
// "chars" / "words": the unit of a throughput figure.
const char* rate_unit(Tokens t);

// The token that ends every line of a word-level corpus.
inline const std::string kEos = "<eos>";

struct Vocab {
  Tokens kind = Tokens::Chars;
  std::vector<std::string> tokens;  // index -> token (one byte each for characters)
  std::map<std::string, int64_t> index;
  static Vocab from_tokens(const std::vector<std::string>& tokens, Tokens kind);
  static Vocab from_chars(const std::vector<std::string>& chars) { return from_tokens(chars, Tokens::Chars); }
  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  const char* unit() const { return kind == Tokens::Chars ? "characters" : "words"; }
  // Text -> indices (words: every line's words, then <eos>); a token outside
  // the vocabulary is an error naming it, its position and `what` (e.g. the file).
  std::vector<int64_t> encode(const std::string& text, const std::string& what) const;
  std::string decode(int64_t i) const { return tokens.at(static_cast<size_t>(i)); }
};

// A word-level text as the reference tokenises it: each line's
// whitespace-separated words followed by <eos>.
std::vector<std::string> split_words(const std::string& text);

struct Corpus {
  Vocab vocab;
  std::string train, valid, test;  // raw text
};

// The whole of a data file. Only a regular file is read: a FIFO, a device or
// a directory is an error before any read (nothing blocks); missing or empty
// files are errors naming the file.
std::string read_data_file(const std::string& path);

// Throws "WHAT PATH is not a regular file (a FIFO)" when PATH exists and is not
// a regular file (e.g. before a checkpoint is opened); a missing path passes.
void check_regular_input(const std::string& path, const std::string& what);

// Reads DIR/ptb.{train,valid,test}.txt and builds the vocabulary of `kind`.
// Missing or empty files are errors that say which file and how to get the data.
Corpus load_corpus(const std::string& dir, Tokens kind = Tokens::Chars);

// [batch, len] int64: the text cut into `batch` contiguous streams (the tail
// that does not fill a row is dropped). Throws when a stream would be too short
// for one window of `min_len` characters.
tcn::Tensor batchify(const std::vector<int64_t>& data, int64_t batch, int64_t min_len, const std::string& what);

struct Window {
  int64_t start;  // column of the first input character
  int64_t len;    // input length (seq_len, or less for the last window)
};
// The windows of one pass over a [batch, L] source, as the reference trainer
// enumerates them (starts 0, validseqlen, 2*validseqlen, ...).
std::vector<Window> windows(int64_t source_len, int64_t seq_len, int64_t validseqlen);

// Inputs [B, len] and targets [B, len] (the next characters) of a window.
std::pair<tcn::Tensor, tcn::Tensor> get_batch(const tcn::Tensor& source, const Window& w);

}  // namespace charlm
