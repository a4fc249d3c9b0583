// Small POSIX file helpers shared by the readers and writers (checkpoints,
// data files, metrics, predictions): reading never blocks on a FIFO or a
// device and is bounded in size, writing replaces a file atomically, and every
// failure is a tcn::Error that names the path and the reason.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tcn {

// "a FIFO", "a directory", "a symbolic link", ... for a st_mode.
const char* file_kind(unsigned mode);

// The largest file read_regular_file reads unless told otherwise. This
// project's data files and checkpoints are megabytes; the bound turns a file
// that would exhaust memory into an error that says so.
inline constexpr uint64_t kMaxReadBytes = uint64_t(4) << 30;

// The whole of a regular file. Opened with O_NONBLOCK and checked with fstat
// before a byte is read, so a FIFO without a writer, a device or a directory
// is an error ("PATH is not a regular file (a FIFO)"), never a hang; a file
// over `max_bytes` is an error before it is read. A missing or unreadable file
// is "PATH: cannot open: <reason>".
std::string read_regular_file(const std::string& path, uint64_t max_bytes = kMaxReadBytes);

// Writes all of [data, data + size) to `fd`, retrying short writes and EINTR;
// false with errno set on failure.
bool write_all(int fd, const void* data, size_t size);

// The directory part and the file name part of `path` ("." when there is no directory).
std::pair<std::string, std::string> split_path(const std::string& path);

// Temporary files of write_file_atomic: ".<name>.tmp-<pid>-<n>" next to the target.
std::string temp_file_prefix(const std::string& name);
std::string temp_file_path(const std::string& path);

// A path that exists must be a regular file (not followed if it is a symlink).
void check_replaceable(const std::string& path, const std::string& who);

// Creates `tmp` exclusively (never an existing file, never through a symlink); its descriptor.
int create_temp_file(const std::string& tmp, const std::string& who);

// Replaces `path` by the concatenation of `pieces`, atomically: written to a
// temporary file next to it, synced, renamed over `path`, and the directory
// synced, so that a reader sees the old file or the new one, never a part. On
// any failure (a full disk, a file size limit) the temporary file is removed
// and `path` is as it was; the error says so. With `make_parents`, missing
// parent directories are made first. `who` starts every message.
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces, const std::string& who,
                       bool make_parents = false);

}  // namespace tcn
