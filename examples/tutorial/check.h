// The tutorial programs' one test helper: every claim a chapter makes is a
// check(condition, claim) line, printed as "ok" or "FAIL", and the program
// exits non-zero when any failed, so ctest reports the chapter as broken.
#pragma once

#include <cstdio>
#include <string>

namespace tut {

inline int failures = 0;

inline void check(bool ok, const std::string& claim) {
  std::printf("%s  %s\n", ok ? "ok  " : "FAIL", claim.c_str());
  if (!ok) ++failures;
}

// main's return value: 0 when every check passed.
inline int finish(const char* program) {
  if (failures == 0) std::printf("%s: all checks passed\n", program);
  else std::printf("%s: %d check(s) FAILED\n", program, failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace tut
