#include "tcn/version.h"

#include "tcn_build_config.h"

namespace tcn {

const char* version() { return TCN_VERSION_STRING; }
const char* build_config() { return TCN_BUILD_CONFIG; }

}  // namespace tcn
