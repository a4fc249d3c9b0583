// What the example programs' command lines share (charlm, wordlm and the task
// trainers of examples/tasks): how an error is printed, how a seed is checked,
// which device "auto" means, and whether an output path can be written, all
// before any work starts.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "core/device.h"

namespace program {

// "PROGRAM: error: MESSAGE" on stderr as one line, whatever the message holds
// (under MPI: "[rank R of N]" first).
void print_error(const char* program, std::string msg);

// Parses the command line into `app`, then runs `body` and returns its exit
// status. --help prints as CLI11 does; a bad command line, an error `body`
// throws, or standard output that could not be written (a full disk) is one
// line on stderr and a non-zero status. Under MPI, an error ends every rank.
int run(const char* program, CLI::App& app, int argc, char** argv, const std::function<int()>& body);

// A --seed check: a decimal integer in [0, 2^64 - 1] (CLI11 alone would wrap -5 around).
extern const CLI::Validator kSeed;

// "auto" -> CUDA when a GPU and CUDA kernels are usable, else CPU; "cpu",
// "cuda", "cuda:N" as named (an error naming the reason when no GPU is usable,
// a note on the emulated device).
tcn::Device resolve_device(const std::string& name, const char* program);

// --conv_impl on `app`: auto, cudnn, gemm or winograd (core/backends.h), with
// its help text; apply_conv_impl parses it and makes it the process's conv1d
// setting before any work (winograd on a CUDA device is an error naming the
// choices).
void add_conv_impl_option(CLI::App* app, std::string& conv_impl);
void apply_conv_impl(const std::string& conv_impl, const tcn::Device& device);

// Throws, naming the flag, unless `path` is a regular file that can be
// written or does not exist yet under a writable directory (or one that can
// be made): output paths are checked before any training.
void check_output_path(const char* flag, const std::string& path);

}  // namespace program
