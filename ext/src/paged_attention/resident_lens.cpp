#include "paged_attention/resident_lens.h"

#include "common/array_memo.h"
#include "mlx/ops.h"

namespace pagecheck {

namespace mx = mlx::core;

namespace {

struct Entry {
  mx::array source;
  mx::array copy;
};

ArrayMemo<Entry, kResidentLensEntries>& memo() {
  static auto* entries = new ArrayMemo<Entry, kResidentLensEntries>();
  return *entries;
}

// Zeros after the lengths: with them the joined array holds more than
// kManagedScalarBytes for any B of at least 1 (an empty batch has no lengths
// to read).
constexpr int kPadWords = static_cast<int>(kManagedScalarBytes / sizeof(int32_t));

} // namespace

mx::array device_resident_lens(const mx::array& context_lens, mx::StreamOrDevice stream) {
  if (context_lens.is_tracer() || context_lens.nbytes() > kManagedScalarBytes) {
    return context_lens;
  }
  if (auto copy = memo().find([&](const Entry& e) { return e.source.id() == context_lens.id(); },
                              [](const Entry& e) { return e.copy; })) {
    return *copy;
  }
  const int batch = context_lens.shape(0);
  const mx::array joined = mx::concatenate(
      {context_lens, mx::zeros({kPadWords}, context_lens.dtype(), stream)}, 0, stream);
  mx::array copy = mx::slice(joined, {0}, {batch}, stream);
  memo().remember(Entry{context_lens, copy});
  return copy;
}

void forget_resident_lens() {
  memo().clear();
}

int resident_lens_entries() {
  return memo().size();
}

} // namespace pagecheck
