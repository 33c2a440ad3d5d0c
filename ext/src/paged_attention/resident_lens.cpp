#include "paged_attention/resident_lens.h"

#include <list>
#include <mutex>

#include "mlx/ops.h"

namespace pagecheck {

namespace mx = mlx::core;

namespace {

struct Entry {
  mx::array source;
  mx::array copy;
};

std::mutex& lens_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Most recently used first. Never destroyed, as the validated-metadata memo:
// at exit its arrays would be freed into an MLX that may already be torn down.
std::list<Entry>& lens_entries() {
  static auto* entries = new std::list<Entry>();
  return *entries;
}

// Zeros after the lengths: with them the joined array holds more than
// kManagedScalarBytes whatever B is.
constexpr int kPadWords = static_cast<int>(kManagedScalarBytes / sizeof(int32_t));

} // namespace

mx::array device_resident_lens(const mx::array& context_lens, mx::StreamOrDevice stream) {
  if (context_lens.is_tracer() || context_lens.nbytes() > kManagedScalarBytes) {
    return context_lens;
  }
  {
    std::lock_guard<std::mutex> lock(lens_mutex());
    auto& entries = lens_entries();
    for (auto it = entries.begin(); it != entries.end(); ++it) {
      if (it->source.id() == context_lens.id()) {
        entries.splice(entries.begin(), entries, it);
        return it->copy;
      }
    }
  }
  const int batch = context_lens.shape(0);
  const mx::array joined = mx::concatenate(
      {context_lens, mx::zeros({kPadWords}, context_lens.dtype(), stream)}, 0, stream);
  mx::array copy = mx::slice(joined, {0}, {batch}, stream);
  std::lock_guard<std::mutex> lock(lens_mutex());
  auto& entries = lens_entries();
  entries.push_front(Entry{context_lens, copy});
  while (static_cast<int>(entries.size()) > kResidentLensEntries) {
    entries.pop_back();
  }
  return copy;
}

void forget_resident_lens() {
  std::lock_guard<std::mutex> lock(lens_mutex());
  lens_entries().clear();
}

int resident_lens_entries() {
  std::lock_guard<std::mutex> lock(lens_mutex());
  return static_cast<int>(lens_entries().size());
}

} // namespace pagecheck
