#include "examples/common/program.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/backends.h"
#include "core/error.h"
#include "core/files.h"
#include "core/devices.h"
#include "nn/distributed.h"

namespace program {

using namespace tcn;

void print_error(const char* program, std::string msg) {
  for (char& c : msg)
    if (c == '\n' || c == '\r') c = ' ';
  // Across processes, say which one (the Comm exists only once a run made it).
  const tcn::dist::Comm* comm = tcn::dist::Comm::existing();
  if (comm && comm->size() > 1)
    std::fprintf(stderr, "%s: error: [rank %d of %d] %s\n", program, comm->rank(), comm->size(), msg.c_str());
  else
    std::fprintf(stderr, "%s: error: %s\n", program, msg.c_str());
}

int run(const char* program, CLI::App& app, int argc, char** argv, const std::function<int()>& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& ex) {
    if (ex.get_exit_code() == 0) return app.exit(ex);  // --help and friends
    print_error(program, std::string(ex.what()) + " (see --help)");
    return ex.get_exit_code();
  }
  try {
    const int rc = body();
    // Output that could not be written (e.g. stdout on a full disk) is a failure too.
    errno = 0;
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      print_error(program, std::string("cannot write to standard output") +
                               (errno ? std::string(" (") + std::strerror(errno) + ")" : std::string()));
      return 1;
    }
    return rc;
  } catch (const std::exception& ex) {
    std::fflush(stdout);
    print_error(program, ex.what());
    // In a data-parallel run the other ranks would wait for this one forever:
    // end them all (Comm::abort returns only when there are no others).
    if (dist::Comm* comm = dist::Comm::existing()) comm->abort(1);
    return 1;
  }
}

// A seed: a decimal integer in [0, 2^64 - 1] (CLI11 alone would wrap -5 around).
const CLI::Validator kSeed(
    [](std::string& v) -> std::string {
      uint64_t x = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
      if (v.empty() || ec != std::errc() || end != v.data() + v.size())
        return "must be an integer in [0, 2^64 - 1], got " + v;
      return "";
    },
    "");

Device resolve_device(const std::string& name, const char* program) {
  if (name == "auto") {
    if (cuda::is_available() && cuda::verified_on_gpu()) return Device::cuda(0);
    return Device::cpu();
  }
  Device d = parse_device(name);
  if (d.is_cuda()) {
    TCN_CHECK(cuda::is_available(), "--device ", name, ": no usable GPU (", cuda::unavailable_reason(), ")");
    if (cuda::emulated())
      std::fprintf(stderr, "%s: note: --device %s is the EMULATED device (TCN_CUDA=EMU): the CUDA kernels run "
                           "on the CPU to check their logic, far slower than the CPU backend; not a GPU\n",
                   program, name.c_str());
    else if (!cuda::verified_on_gpu())
      std::fprintf(stderr, "%s: warning: the CUDA kernels of this build have not been verified on a GPU yet "
                           "(tests/test_ops.cpp, tests/test_cuda_ops.cpp); results may be wrong\n",
                   program);
  }
  return d;
}

// --conv_impl's choices and help, shared by every program that runs convs.
void add_conv_impl_option(CLI::App* app, std::string& conv_impl) {
  app->add_option("--conv_impl", conv_impl,
                  "conv1d: auto (on CUDA, time cuDNN's deterministic algorithms and our GEMM path per layer shape on "
                  "first use, keep the faster if cuDNN agrees with it; on the CPU the Winograd path where the "
                  "channels are many enough, else the GEMM path), cudnn (CUDA), gemm, or winograd (the CPU: fewer "
                  "multiplies, ops/conv1d_winograd.cpp)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cudnn", "gemm", "winograd"}));
}

// The process's conv1d setting from --conv_impl, keeping its other backend settings.
void apply_conv_impl(const std::string& conv_impl, const Device& device) {
  const ConvImpl c = parse_conv_impl(conv_impl);
  TCN_CHECK(!(device.is_cuda() && c == ConvImpl::Winograd),
            "--conv_impl winograd runs on the CPU only; on ", device.str(), " use auto, gemm or cudnn");
  set_cuda_backends(with_conv(c));
}

// An output path must be a regular file or not exist yet, under a directory
// that exists (or can be made) and is writable; checked before any training.
void check_output_path(const char* flag, const std::string& path) {
  TCN_CHECK(!path.empty(), flag, ": empty path");
  struct stat sb {};
  if (::stat(path.c_str(), &sb) == 0) {
    TCN_CHECK(S_ISREG(sb.st_mode), flag, " ", path, ": cannot write there (", tcn::file_kind(sb.st_mode),
              ", not a regular file)");
    TCN_CHECK(::access(path.c_str(), W_OK) == 0, flag, " ", path, ": cannot write there (", std::strerror(errno), ")");
    return;
  }
  std::filesystem::path dir = std::filesystem::absolute(path).parent_path();
  while (::stat(dir.c_str(), &sb) != 0 && dir.has_parent_path() && dir != dir.parent_path()) dir = dir.parent_path();
  TCN_CHECK(S_ISDIR(sb.st_mode), flag, " ", path, ": cannot write there (", dir.string(), " is ",
            tcn::file_kind(sb.st_mode), ")");
  TCN_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, flag, " ", path, ": cannot write there (", dir.string(), ": ",
            std::strerror(errno), ")");
}

}  // namespace program
