// Small POSIX file helpers shared by the readers and writers (checkpoints,
// data files, metrics): reading never blocks on a FIFO or a device, and every
// failure is a tcn::Error that names the path and the reason.
#pragma once

#include <string>

namespace tcn {

// "a FIFO", "a directory", "a symbolic link", ... for a st_mode.
const char* file_kind(unsigned mode);

// The whole of a regular file. Opened with O_NONBLOCK and checked with fstat
// before a byte is read, so a FIFO without a writer, a device or a directory
// is an error ("PATH is not a regular file (a FIFO)"), never a hang. A missing
// or unreadable file is "PATH: cannot open: <reason>".
std::string read_regular_file(const std::string& path);

// Writes all of [data, data + size) to `fd`, retrying short writes and EINTR;
// false with errno set on failure.
bool write_all(int fd, const void* data, size_t size);

}  // namespace tcn
