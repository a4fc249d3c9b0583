#include "core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace tcn {

const char* file_kind(unsigned mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISREG(mode)) return "a regular file";
  return "not a regular file";
}

std::string read_regular_file(const std::string& path, uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  TCN_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat sb {};
  TCN_CHECK(::fstat(fd, &sb) == 0, path, ": cannot stat: ", std::strerror(errno));
  TCN_CHECK(S_ISREG(sb.st_mode), path, " is not a regular file (", file_kind(sb.st_mode), ")");
  TCN_CHECK(static_cast<uint64_t>(sb.st_size) <= max_bytes, path, " is ", sb.st_size, " bytes, over the ", max_bytes,
            "-byte limit for an input file");
  // A regular file never blocks; clear O_NONBLOCK anyway so a short read means end of file.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string s;
  s.reserve(static_cast<size_t>(sb.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    TCN_CHECK(n >= 0, path, ": read error: ", std::strerror(errno));
    if (n == 0) break;
    s.append(buf, static_cast<size_t>(n));
    TCN_CHECK(s.size() <= max_bytes, path, " grew past the ", max_bytes, "-byte limit for an input file while read");
  }
  return s;
}

bool write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

std::pair<std::string, std::string> split_path(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

std::string temp_file_prefix(const std::string& name) { return "." + name + ".tmp-"; }

std::string temp_file_path(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  const auto [dir, name] = split_path(path);
  return dir + "/" + temp_file_prefix(name) + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

void check_replaceable(const std::string& path, const std::string& who) {
  struct stat sb {};
  if (::lstat(path.c_str(), &sb) != 0) return;  // missing: a new file
  TCN_CHECK(S_ISREG(sb.st_mode), who, "'", path, "' is ", file_kind(sb.st_mode),
            ", not a regular file; refusing to replace it");
}

int create_temp_file(const std::string& tmp, const std::string& who) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  TCN_CHECK(fd >= 0, who, "cannot create '", tmp, "' for writing: ", std::strerror(errno));
  return fd;
}

namespace {

// After a rename, the directory entry itself reaches the disk only when the
// directory is synced. File systems that cannot sync a directory say EINVAL.
void sync_directory(const std::string& dir, const std::string& who) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  const bool ok = ::fsync(fd) == 0 || errno == EINVAL || errno == EROFS;
  const int err = errno;
  ::close(fd);
  TCN_CHECK(ok, who, "cannot sync directory '", dir, "': ", std::strerror(err));
}

}  // namespace

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces, const std::string& who,
                       bool make_parents) {
  TCN_CHECK(!path.empty(), who, "empty path");
  check_replaceable(path, who);
  const std::string dir = split_path(path).first;
  if (make_parents) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    TCN_CHECK(!ec, who, "cannot make the directory '", dir, "': ", ec.message());
  }
  const std::string tmp = temp_file_path(path);
  int fd = create_temp_file(tmp, who);
  bool ok = true;
  for (size_t i = 0; ok && i < pieces.size(); ++i) ok = write_all(fd, pieces[i].data(), pieces[i].size());
  if (ok) ok = ::fsync(fd) == 0;
  const int write_err = errno;
  const bool closed = ::close(fd) == 0;
  if (!ok || !closed) {
    const int err = ok ? errno : write_err;
    ::unlink(tmp.c_str());
    TCN_FAIL(who, "writing '", tmp, "' failed (", std::strerror(err), "); '", path, "' is unchanged");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    TCN_FAIL(who, "cannot rename '", tmp, "' to '", path, "': ", std::strerror(err));
  }
  sync_directory(dir, who);
}

}  // namespace tcn
