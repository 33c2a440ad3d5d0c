#include "paged_attention/validated_metadata.h"

#include "common/array_memo.h"

namespace pagecheck {

namespace mx = mlx::core;

namespace {

struct Entry {
  mx::array block_table;
  mx::array context_lens;
  PagedValidationKey key;
};

ArrayMemo<Entry, kValidatedMetadataEntries>& memo() {
  static auto* entries = new ArrayMemo<Entry, kValidatedMetadataEntries>();
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
  return memo()
      .find(
          [&](const Entry& e) {
            return e.block_table.id() == block_table.id() && e.context_lens.id() == context_lens.id() && e.key == key;
          },
          [](const Entry&) { return true; })
      .has_value();
}

void remember_validated_metadata(const mx::array& block_table, const mx::array& context_lens,
                                 const PagedValidationKey& key) {
  if (block_table.is_tracer() || context_lens.is_tracer()) {
    return;
  }
  memo().remember(Entry{block_table, context_lens, key});
}

void forget_validated_metadata() {
  memo().clear();
}

int validated_metadata_entries() {
  return memo().size();
}

} // namespace pagecheck
