// Penn Treebank characters, prepared as the locuslab char_cnn reference does:
// one vocabulary over train + valid + test (sorted, so it is deterministic),
// each split cut into batch_size contiguous streams, read in windows of seq_len
// that advance by validseqlen; only the last validseqlen positions of a window
// are scored, the first seq_len - validseqlen are history.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace charlm {

struct Vocab {
  std::vector<std::string> chars;  // index -> character (one byte each for PTB)
  std::map<unsigned char, int64_t> index;
  static Vocab from_chars(const std::vector<std::string>& chars);
  int64_t size() const { return static_cast<int64_t>(chars.size()); }
  // Text -> indices; a character outside the vocabulary is an error naming it,
  // its position and `what` (e.g. the file).
  std::vector<int64_t> encode(const std::string& text, const std::string& what) const;
  std::string decode(int64_t i) const { return chars.at(static_cast<size_t>(i)); }
};

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

// Reads DIR/ptb.{train,valid,test}.txt. Missing or empty files are errors that
// say which file and how to get the data.
Corpus load_corpus(const std::string& dir);

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
