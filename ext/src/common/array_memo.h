// A bounded memory of entries that hold MLX arrays, looked up by the arrays'
// identities: most recently used first, the least recently used dropped past
// CAPACITY, every access behind one mutex. An entry holds its arrays, so no
// other array can take their identity while it lives.
//
// Callers keep one memo for the process and never destroy it
// (`static auto* memo = new ArrayMemo<...>()`): at exit the arrays it holds
// would be freed into an MLX that may already be torn down.
#pragma once

#include <list>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>

namespace pagecheck {

template <typename Entry, int CAPACITY>
class ArrayMemo {
 public:
  // `take` of the first entry `matches` accepts, which becomes the most recently used; nullopt when none
  // does. `take` runs under the lock and returns what the caller needs, so no entry is copied whole.
  template <typename Match, typename Take>
  std::optional<std::invoke_result_t<Take, const Entry&>> find(Match matches, Take take) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (matches(*it)) {
        entries_.splice(entries_.begin(), entries_, it);
        return take(*it);
      }
    }
    return std::nullopt;
  }

  void remember(Entry entry) {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.push_front(std::move(entry));
    while (static_cast<int>(entries_.size()) > CAPACITY) {
      entries_.pop_back();
    }
  }

  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.clear();
  }

  int size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int>(entries_.size());
  }

 private:
  std::mutex mutex_;
  std::list<Entry> entries_;
};

} // namespace pagecheck
