#include "common/worker_pool.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace pagecheck {
namespace {

constexpr int kMaxThreads = 64;

int threads_from_environment() {
  const char* text = std::getenv("PAGECHECK_NUM_THREADS");
  if (text == nullptr || *text == '\0') {
    return 0;
  }
  try {
    return std::clamp(std::stoi(text), 1, kMaxThreads);
  } catch (const std::exception&) {
    return 0;
  }
}

int usable_cpus() {
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) {
    return std::max(1, CPU_COUNT(&cpus));
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// One parallel call at a time: `job_mutex_` is held by the caller for the
// whole call. Items are claimed through `next_item_`; `active_workers_` counts
// workers still inside the current generation so the caller returns only
// after all of them stopped touching `body_`.
class ThreadWorkerPool final : public WorkerPool {
 public:
  explicit ThreadWorkerPool(int num_threads)
      : num_threads_(num_threads), owner_pid_(getpid()) {
    for (int worker_idx = 1; worker_idx < num_threads_; ++worker_idx) {
      workers_.emplace_back([this] { worker_loop(); });
    }
  }

  ~ThreadWorkerPool() override {
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      stopping_ = true;
    }
    wake_workers_.notify_all();
    for (auto& worker : workers_) {
      worker.join();
    }
  }

  int num_threads() const override {
    return num_threads_;
  }

  void parallel_for(
      int num_items,
      const std::function<void(int)>& body,
      bool use_workers) override {
    if (num_items <= 0) {
      return;
    }
    const bool pool_usable = use_workers && num_items > 1 &&
        !workers_.empty() && getpid() == owner_pid_;
    std::unique_lock<std::mutex> job_lock(job_mutex_, std::defer_lock);
    if (!pool_usable || !job_lock.try_lock()) {
      for (int item_idx = 0; item_idx < num_items; ++item_idx) {
        body(item_idx);
      }
      return;
    }
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      body_ = &body;
      num_items_ = num_items;
      next_item_.store(0);
      first_error_ = nullptr;
      active_workers_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    wake_workers_.notify_all();
    run_items();
    std::unique_lock<std::mutex> lock(state_mutex_);
    workers_done_.wait(lock, [this] { return active_workers_ == 0; });
    body_ = nullptr;
    if (first_error_) {
      std::rethrow_exception(first_error_);
    }
  }

 private:
  void run_items() {
    for (int item_idx = next_item_.fetch_add(1); item_idx < num_items_;
         item_idx = next_item_.fetch_add(1)) {
      try {
        (*body_)(item_idx);
      } catch (...) {
        std::lock_guard<std::mutex> lock(state_mutex_);
        if (!first_error_) {
          first_error_ = std::current_exception();
        }
        // Stop handing out items; the ones already running finish.
        next_item_.store(num_items_);
      }
    }
  }

  void worker_loop() {
    long seen_generation = 0;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(state_mutex_);
        wake_workers_.wait(lock, [&] {
          return stopping_ || generation_ != seen_generation;
        });
        if (stopping_) {
          return;
        }
        seen_generation = generation_;
      }
      run_items();
      {
        std::lock_guard<std::mutex> lock(state_mutex_);
        --active_workers_;
      }
      workers_done_.notify_one();
    }
  }

  const int num_threads_;
  const pid_t owner_pid_;
  std::vector<std::thread> workers_;

  std::mutex job_mutex_;
  std::mutex state_mutex_;
  std::condition_variable wake_workers_;
  std::condition_variable workers_done_;
  const std::function<void(int)>* body_ = nullptr;
  int num_items_ = 0;
  std::atomic<int> next_item_{0};
  std::exception_ptr first_error_;
  int active_workers_ = 0;
  long generation_ = 0;
  bool stopping_ = false;
};

} // namespace

WorkerPool& WorkerPool::instance() {
  // Leaked on purpose: joining threads during static destruction at
  // interpreter exit can hang if a worker is blocked in the loader.
  static WorkerPool* pool = [] {
    const int requested = threads_from_environment();
    return new ThreadWorkerPool(requested > 0 ? requested : usable_cpus());
  }();
  return *pool;
}

} // namespace pagecheck
