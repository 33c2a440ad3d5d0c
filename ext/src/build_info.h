// How this module was compiled, so benchmark and test reports can say it.
#pragma once

#include <string>

namespace pagecheck {

struct BuildInfo {
  std::string kernel_flags;   // flags of the kernel sources
  std::string march;          // "native" or "default" (PAGECHECK_PORTABLE)
  std::string compiler;
  std::string build_type;
  std::string mlx_version_built;    // headers compiled against
  std::string mlx_version_runtime;  // libmlx loaded now
  int num_threads;                  // CPU threads of the worker pool
};

BuildInfo build_info();

} // namespace pagecheck
