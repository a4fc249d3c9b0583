# Copies the library's headers into DEST (<build>/include/tcn), each include of
# another of them rewritten from its path in the source tree to its path under
# the prefix tcn/:
#   #include "nn/layers.h"  ->  #include "tcn/nn/layers.h"
#   #include "tcn.h"        ->  #include "tcn/tcn.h"
# so that a program compiled against the copy finds our headers only under
# tcn/, never a core/ or nn/ of its own. The build runs it when a header
# changes (CMakeLists.txt, "the headers"), and `cmake --install` installs the copy.
#   cmake -DSOURCE=<repo> -DDEST=<dir> -DHEADERS=core/tensor.h,nn/layers.h,... -P stage_headers.cmake
# A staged file is rewritten only when its content changes, so that editing one
# header does not recompile every user of the others.
foreach(var SOURCE DEST HEADERS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "stage_headers.cmake: -D${var}=... is missing")
  endif()
endforeach()
string(REPLACE "," ";" HEADERS "${HEADERS}")
# A build folder configured before the headers were staged holds symbolic
# links here (to the source folders and tcn.h): writing through one would
# rewrite the source itself. The links go; only real folders and files stay.
file(GLOB entries LIST_DIRECTORIES true "${DEST}/*")
foreach(entry IN LISTS entries)
  if(IS_SYMLINK "${entry}")
    file(REMOVE "${entry}")
  endif()
endforeach()
foreach(header IN LISTS HEADERS)
  file(READ "${SOURCE}/${header}" text)
  string(REGEX REPLACE "#include \"((core|autograd|nn|ops|cuda)/[^\"]+|tcn\\.h)\"" "#include \"tcn/\\1\"" text "${text}")
  set(out "${DEST}/${header}")
  if(IS_SYMLINK "${out}")
    file(REMOVE "${out}")
  endif()
  set(old "")
  if(EXISTS "${out}")
    file(READ "${out}" old)
  endif()
  if(NOT old STREQUAL text)
    file(WRITE "${out}" "${text}")
  endif()
endforeach()
