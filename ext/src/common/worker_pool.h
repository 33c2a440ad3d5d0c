// A small fixed pool of worker threads for the CPU attention schedules.
//
// The attention task runs on MLX's CPU stream thread; that thread claims work
// items like any worker and waits for the rest, so a call never depends on
// MLX's scheduler and cannot deadlock with it. Workers never call back into
// the pool. A second caller that finds the pool busy (another stream), or a
// forked child (whose workers did not survive the fork), runs its items
// inline instead of waiting.
#pragma once

#include <functional>

namespace pagecheck {

class WorkerPool {
 public:
  // The process-wide pool, sized by PAGECHECK_NUM_THREADS or the CPUs this
  // process may run on.
  static WorkerPool& instance();

  // Threads that take part in a parallel call, the caller included.
  virtual int num_threads() const = 0;

  // Runs body(item_idx) for every item_idx in [0, num_items), spread over the
  // pool when use_workers is set. Rethrows the first exception a body threw,
  // after every claimed item has finished.
  virtual void parallel_for(
      int num_items,
      const std::function<void(int)>& body,
      bool use_workers) = 0;

  virtual ~WorkerPool() = default;
};

} // namespace pagecheck
