// The GPU kernel sources of ext/kernels/, embedded at build time
// (ext/cmake/embed_kernels.cmake writes the table).
#pragma once

#include <initializer_list>
#include <string>

namespace pagecheck {

struct KernelFile {
  const char* name; // file name inside ext/kernels/
  const char* text;
};

extern const KernelFile kEmbeddedKernelFiles[];
extern const int kEmbeddedKernelFileCount;
extern const char* const kEmbeddedKernelDigest;

// The text of one embedded file; throws std::logic_error naming it when the
// build did not embed it.
const std::string& kernel_file(const std::string& name);

// The concatenated text of several files, in order (a kernel's header).
std::string kernel_files(std::initializer_list<const char*> names);

// `text` without comments, indentation or blank lines: what NVRTC needs of a
// kernel source. MLX rebuilds a custom kernel's whole source into every
// call's graph node, so each call costs in proportion to its length. String
// and character literals are kept as they are, a line that ends in a
// backslash keeps the line after it, and every line stays a line.
std::string compact_kernel_source(const std::string& text);

// A digest of every embedded file. Part of each kernel's name: MLX caches
// compiled kernels on disk by name, and an older build's kernel must never be
// taken for this one's.
const char* kernel_sources_digest();

} // namespace pagecheck
