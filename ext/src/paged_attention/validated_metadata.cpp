#include "paged_attention/validated_metadata.h"

#include <list>
#include <mutex>
#include <utility>

namespace pagecheck {

namespace mx = mlx::core;

namespace {

struct Entry {
  mx::array block_table;
  mx::array context_lens;
  PagedValidationKey key;
};

std::mutex& memo_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Most recently used first. Never destroyed: at exit the arrays it holds
// would be freed into an MLX that may already be torn down.
std::list<Entry>& memo_entries() {
  static auto* entries = new std::list<Entry>();
  return *entries;
}

void append_array(PagedValidationKey& key, const mx::array& array) {
  key.push_back(static_cast<int64_t>(array.dtype().val()));
  key.push_back(array.ndim());
  for (int axis = 0; axis < array.ndim(); ++axis) {
    key.push_back(array.shape(axis));
  }
}

} // namespace

PagedValidationKey paged_validation_key(
    const mx::array& query,
    const mx::array& key_pages,
    const mx::array& value_pages,
    int page_size,
    bool causal) {
  PagedValidationKey key;
  key.reserve(3 * 6 + 2);
  append_array(key, query);
  append_array(key, key_pages);
  append_array(key, value_pages);
  key.push_back(page_size);
  key.push_back(causal ? 1 : 0);
  return key;
}

bool metadata_validated(const mx::array& block_table, const mx::array& context_lens, const PagedValidationKey& key) {
  if (block_table.is_tracer() || context_lens.is_tracer()) {
    return false;
  }
  std::lock_guard<std::mutex> lock(memo_mutex());
  auto& entries = memo_entries();
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    if (it->block_table.id() == block_table.id() && it->context_lens.id() == context_lens.id() && it->key == key) {
      entries.splice(entries.begin(), entries, it);
      return true;
    }
  }
  return false;
}

void remember_validated_metadata(const mx::array& block_table, const mx::array& context_lens,
                                 const PagedValidationKey& key) {
  if (block_table.is_tracer() || context_lens.is_tracer()) {
    return;
  }
  std::lock_guard<std::mutex> lock(memo_mutex());
  auto& entries = memo_entries();
  entries.push_front(Entry{block_table, context_lens, key});
  while (static_cast<int>(entries.size()) > kValidatedMetadataEntries) {
    entries.pop_back();
  }
}

void forget_validated_metadata() {
  std::lock_guard<std::mutex> lock(memo_mutex());
  memo_entries().clear();
}

int validated_metadata_entries() {
  std::lock_guard<std::mutex> lock(memo_mutex());
  return static_cast<int>(memo_entries().size());
}

} // namespace pagecheck
