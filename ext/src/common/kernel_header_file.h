// Kernel headers that MLX's NVRTC reads from a file instead of from each
// call's source. MLX's fast::cuda_kernel rebuilds a kernel's whole source
// into every call's graph node and hashes it again at every evaluation (the
// module's name; libmlx 0.32.4), which costs per call in proportion to its
// length (pagecheck.gpu.node_cost: a 43 KB source about 23 us more a call
// than a one-line one on the H200). The attention kernels' shared header is
// about 44 KB compacted against a body of about 5 KB, so the op hands MLX a
// one-line `#include` of the header file instead of its text. The file must
// stay while the process runs: MLX compiles a kernel variant met for the first
// time from it.
#pragma once

#include <optional>
#include <string>

namespace pagecheck {

// `#include "<path>"` followed by a newline, for a file holding exactly
// `text`, named after `stem` in a directory private to this user and to this
// build's kernel sources (<temp>/pagecheck-<uid>/<digest>/, mode 0700, owned
// by the user; a directory that fails those checks is never used). The same
// path in every process of the build: MLX names a kernel's module after a
// hash of its source, so a kernel keeps one name per build. nullopt when no
// such file can be written or read back equal; the caller then passes `text`
// itself.
std::optional<std::string> header_file_include(const std::string& stem, const std::string& text);

// Whether the NVRTC that MLX compiles with reads an `#include` of a file in
// header_file_include's directory: a probe translation unit that does not compile
// unless it read a probe header there. Run once per process; false where
// NVRTC is not loaded (a CPU-only libmlx) or the probe fails.
bool nvrtc_reads_header_files();

// What to hand MLX as a CUDA kernel's header: header_file_include's line where
// NVRTC reads header files, else `text` itself.
std::string header_for_mlx(const std::string& stem, const std::string& text);

} // namespace pagecheck
