// Context lengths the GPU kernels read from device memory.
//
// MLX's CUDA allocator (0.32.4) serves arrays of at most 8 bytes, such as the
// int32 context lengths of one or two requests, from a small pool of managed
// memory marked read-mostly. A host write anywhere in that pool (any new
// scalar array) drops the GPU's copy of the page, and the next kernel that
// reads the lengths waits on a page fault in its first load: about 5 us of a
// 30 us split decode at B 1 x 16384 on the H200 (ext/kernels/NOTES.md, v33).
// On a GPU stream the op therefore reads such lengths from a copy in device
// memory: the lengths followed by zeros, joined by a GPU op (an output of more
// than 8 bytes, which MLX allocates on the device), and sliced back to [B].
//
// The copy is made once per context_lens array and remembered by that
// array's identity, as the validated-metadata memo remembers pairs
// (validated_metadata.h: an MLX array changes value only by becoming a new
// array), so the layers of a serving step and back-to-back calls share one
// copy. An entry holds the source array, so no other array can take its
// identity while the entry lives. Tracers (mx.compile, mx.vmap) are passed
// through unchanged and never remembered.
#pragma once

#include "mlx/array.h"
#include "mlx/utils.h"

namespace pagecheck {

// Most context_lens arrays remembered at once; the least recently used goes first.
constexpr int kResidentLensEntries = 32;

// Largest array, in bytes, that MLX's CUDA allocator places in its managed scalar pool.
constexpr size_t kManagedScalarBytes = 8;

// The context lengths a GPU kernel should read: `context_lens` itself when it
// is larger than kManagedScalarBytes or a tracer, else its remembered device
// copy (made on `stream` on first use). Same values, dtype and shape.
mlx::core::array device_resident_lens(const mlx::core::array& context_lens, mlx::core::StreamOrDevice stream);

// Forgets every remembered copy (tests).
void forget_resident_lens();

// Copies remembered now.
int resident_lens_entries();

} // namespace pagecheck
