// Machine code or PTX for kernels that MLX's own JIT cannot compile: MLX
// compiles fast::cuda_kernel sources for the device's plain architecture
// (sm_90 on an H100/H200), where the warpgroup instructions (wgmma) of sm_90a
// do not exist. The op compiles those kernels itself with the NVRTC that
// libmlx already loaded and hands the image to fast::precompiled_cuda_kernel,
// which loads it through the driver. MLX copies that image into every call's
// graph node and hashes it when the call is evaluated, so its size is host
// time at every call: a cubin for sm_90a is about half the size of the
// compute_90a PTX (ext/kernels/NOTES.md v23).
#pragma once

#include <string>

namespace pagecheck {

// PTX for `source` (a whole translation unit) compiled for the virtual
// `architecture` ("compute_90a"), with the CUDA toolkit's include directory
// (CUDA_HOME, CUDA_PATH, or /usr/local/cuda, as MLX looks) and the CCCL
// headers that the MLX wheel ships next to libmlx on the include path. Throws
// std::runtime_error with NVRTC's log when NVRTC is not loaded in this
// process or the source does not compile. Thread-safe; not cached.
std::string compile_ptx(const std::string& source, const std::string& program_name, const std::string& architecture);

// The same for a real `architecture` ("sm_90a"): the cubin, an ELF image the
// driver loads without compiling. Also throws std::runtime_error where this
// NVRTC cannot give one (no nvrtcGetCUBIN).
std::string compile_cubin(const std::string& source, const std::string& program_name, const std::string& architecture);

} // namespace pagecheck
