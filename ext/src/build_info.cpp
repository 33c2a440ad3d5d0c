#include "build_info.h"

#include "common/worker_pool.h"
#include "mlx/version.h"

#define PAGECHECK_STRINGIFY_IMPL(x) #x
#define PAGECHECK_STRINGIFY(x) PAGECHECK_STRINGIFY_IMPL(x)

namespace pagecheck {

BuildInfo build_info() {
  return BuildInfo{
      PAGECHECK_KERNEL_FLAGS,
      PAGECHECK_MARCH,
      PAGECHECK_COMPILER,
      PAGECHECK_BUILD_TYPE,
      PAGECHECK_STRINGIFY(MLX_VERSION_MAJOR) "." PAGECHECK_STRINGIFY(MLX_VERSION_MINOR) "." PAGECHECK_STRINGIFY(
          MLX_VERSION_PATCH),
      mlx::core::version(),
      WorkerPool::instance().num_threads(),
  };
}

} // namespace pagecheck
