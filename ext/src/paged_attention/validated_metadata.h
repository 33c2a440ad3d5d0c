// Paged-attention calls whose inputs were found valid, remembered by the
// identity of their block table and context lengths.
//
// impl.paged_attention validates on the host (reference/validation.py), which
// reads the metadata values and costs time in proportion to the table. A
// caller that passes the same table and context arrays again (every layer of a
// serving step, back-to-back calls) with the same shapes and dtypes would get
// the same verdict, so the verdict is remembered: an entry holds the two
// arrays themselves (so their descriptors stay alive and no other array can
// take their identity) and a key of everything else validation reads (query,
// key_pages and value_pages shapes and dtypes, page_size, the mask).
//
// MLX arrays change value only by becoming a new array: `a[i] = v`, `a += b`
// and every op give the Python object a new descriptor, hence a new identity.
// Memory written behind MLX's back (through a NumPy view of an array's
// buffer) is not seen; holding the arrays also keeps MLX from donating their
// buffers to later ops. Tracers (under mx.compile or mx.vmap) are never
// remembered.
#pragma once

#include <cstdint>
#include <vector>

#include "mlx/array.h"

namespace pagecheck {

// Most (table, context) pairs remembered at once; the least recently used goes first.
constexpr int kValidatedMetadataEntries = 32;

// Everything but the metadata values that paged-attention validation reads:
// each of query, key_pages, value_pages as (dtype, ndim, dims...), then
// page_size and the mask.
using PagedValidationKey = std::vector<int64_t>;

PagedValidationKey paged_validation_key(
    const mlx::core::array& query,
    const mlx::core::array& key_pages,
    const mlx::core::array& value_pages,
    int page_size,
    bool causal);

// True when (block_table, context_lens) were remembered under `key`.
bool metadata_validated(const mlx::core::array& block_table, const mlx::core::array& context_lens,
                        const PagedValidationKey& key);

// Remembers (block_table, context_lens) as valid under `key`; ignores tracers.
void remember_validated_metadata(const mlx::core::array& block_table, const mlx::core::array& context_lens,
                                 const PagedValidationKey& key);

// Forgets every entry (tests; and a caller that wrote into an array's memory directly).
void forget_validated_metadata();

// Entries held now.
int validated_metadata_entries();

} // namespace pagecheck
