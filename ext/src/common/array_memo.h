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
#include <utility>

namespace pagecheck {

template <typename Entry, int CAPACITY>
class ArrayMemo {
 public:
  // The first entry `matches` accepts (a copy), now the most recently used; nullopt when none does.
  template <typename Match>
  std::optional<Entry> find(Match matches) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (matches(*it)) {
        entries_.splice(entries_.begin(), entries_, it);
        return *it;
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
