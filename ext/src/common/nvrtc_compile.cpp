#include "common/nvrtc_compile.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlx/fast.h"

namespace pagecheck {

namespace {

// The slice of NVRTC's C API used here (nvrtc.h), by value: the header is not
// part of the MLX wheel, and the library is found at run time.
using Program = void*;
using CreateProgram = int (*)(Program*, const char*, const char*, int, const char* const*, const char* const*);
using CompileProgram = int (*)(Program, int, const char* const*);
using GetSize = int (*)(Program, size_t*);
using GetText = int (*)(Program, char*);
using DestroyProgram = int (*)(Program*);
using ErrorString = const char* (*)(int);

struct Nvrtc {
  CreateProgram create = nullptr;
  CompileProgram compile = nullptr;
  GetSize log_size = nullptr;
  GetText log = nullptr;
  GetSize ptx_size = nullptr;
  GetText ptx = nullptr;
  GetSize cubin_size = nullptr; // null where this NVRTC cannot give machine code
  GetText cubin = nullptr;
  DestroyProgram destroy = nullptr;
  ErrorString error_string = nullptr;
};

// The path of the first loaded shared object whose file name contains `needle`.
std::string loaded_library(const char* needle) {
  struct Search {
    const char* needle;
    std::string path;
  } search{needle, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        const std::string name = info->dlpi_name == nullptr ? "" : info->dlpi_name;
        if (name.find(s->needle) != std::string::npos) {
          s->path = name;
          return 1;
        }
        return 0;
      },
      &search);
  return search.path;
}

const Nvrtc& nvrtc() {
  static const Nvrtc api = [] {
    const std::string path = loaded_library("libnvrtc.so");
    if (path.empty()) {
      throw std::runtime_error(
          "pagecheck: NVRTC is not loaded in this process (libmlx's CUDA back-end loads it); the warpgroup "
          "kernels cannot be compiled");
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) {
      throw std::runtime_error("pagecheck: could not open " + path);
    }
    Nvrtc found;
    auto symbol = [&](const char* name) {
      void* address = dlsym(handle, name);
      if (address == nullptr) {
        throw std::runtime_error(std::string("pagecheck: ") + path + " has no " + name);
      }
      return address;
    };
    found.create = reinterpret_cast<CreateProgram>(symbol("nvrtcCreateProgram"));
    found.compile = reinterpret_cast<CompileProgram>(symbol("nvrtcCompileProgram"));
    found.log_size = reinterpret_cast<GetSize>(symbol("nvrtcGetProgramLogSize"));
    found.log = reinterpret_cast<GetText>(symbol("nvrtcGetProgramLog"));
    found.ptx_size = reinterpret_cast<GetSize>(symbol("nvrtcGetPTXSize"));
    found.ptx = reinterpret_cast<GetText>(symbol("nvrtcGetPTX"));
    found.cubin_size = reinterpret_cast<GetSize>(dlsym(handle, "nvrtcGetCUBINSize"));
    found.cubin = reinterpret_cast<GetText>(dlsym(handle, "nvrtcGetCUBIN"));
    found.destroy = reinterpret_cast<DestroyProgram>(symbol("nvrtcDestroyProgram"));
    found.error_string = reinterpret_cast<ErrorString>(symbol("nvrtcGetErrorString"));
    return found;
  }();
  return api;
}

// Include directories: the CUDA toolkit's (cuda_bf16.h, cuda_fp16.h) and the
// CCCL headers next to libmlx (cuda/std/...), where they exist.
std::vector<std::string> include_options() {
  std::vector<std::string> options;
  std::string cuda_home;
  for (const char* variable : {"CUDA_HOME", "CUDA_PATH"}) {
    const char* value = std::getenv(variable);
    if (value != nullptr && *value != '\0') {
      cuda_home = value;
      break;
    }
  }
  if (cuda_home.empty() && std::filesystem::exists("/usr/local/cuda")) {
    cuda_home = "/usr/local/cuda";
  }
  if (!cuda_home.empty()) {
    options.push_back("--include-path=" + cuda_home + "/include");
  }
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&mlx::core::fast::precompiled_cuda_kernel), &info) != 0 &&
      info.dli_fname != nullptr) {
    const std::filesystem::path cccl = std::filesystem::path(info.dli_fname).parent_path().parent_path() / "include" /
        "cccl";
    if (std::filesystem::exists(cccl)) {
      options.push_back("--include-path=" + cccl.string());
    }
  }
  return options;
}

} // namespace

namespace {

// `source` compiled for `architecture`: PTX for a virtual one (compute_XX), the cubin for a real one (sm_XX).
std::string compile_program(
    const std::string& source, const std::string& program_name, const std::string& architecture, bool cubin) {
  const Nvrtc& api = nvrtc();
  if (cubin && (api.cubin_size == nullptr || api.cubin == nullptr)) {
    throw std::runtime_error("pagecheck: this NVRTC has no nvrtcGetCUBIN; " + program_name + " needs PTX");
  }
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  Program program = nullptr;
  int status = api.create(&program, source.c_str(), program_name.c_str(), 0, nullptr, nullptr);
  if (status != 0) {
    throw std::runtime_error(std::string("pagecheck: nvrtcCreateProgram failed: ") + api.error_string(status));
  }
  std::vector<std::string> options = include_options();
  options.push_back("--gpu-architecture=" + architecture);
  options.push_back("-std=c++17");
  std::vector<const char*> option_texts;
  for (const std::string& option : options) {
    option_texts.push_back(option.c_str());
  }
  status = api.compile(program, static_cast<int>(option_texts.size()), option_texts.data());
  std::string image;
  std::string log;
  size_t size = 0;
  if (api.log_size(program, &size) == 0 && size > 1) {
    log.resize(size);
    api.log(program, log.data());
    log.resize(size - 1);
  }
  const GetSize image_size = cubin ? api.cubin_size : api.ptx_size;
  const GetText image_text = cubin ? api.cubin : api.ptx;
  if (status == 0 && image_size(program, &size) == 0) {
    image.resize(size);
    image_text(program, image.data());
    // The driver reads PTX as a C string; std::string keeps its own terminator. A cubin is an ELF image
    // whose size the driver reads from its headers: kept whole.
    if (!cubin && !image.empty() && image.back() == '\0') {
      image.pop_back();
    }
  }
  api.destroy(&program);
  if (status != 0 || image.empty()) {
    std::string options_text;
    for (const std::string& option : options) {
      options_text += " " + option;
    }
    throw std::runtime_error("pagecheck: NVRTC could not compile " + program_name + " (" +
                             api.error_string(status) + ";" + options_text + "):\n" + log);
  }
  return image;
}

} // namespace

std::string compile_ptx(const std::string& source, const std::string& program_name, const std::string& architecture) {
  return compile_program(source, program_name, architecture, false);
}

std::string compile_cubin(
    const std::string& source, const std::string& program_name, const std::string& architecture) {
  return compile_program(source, program_name, architecture, true);
}

} // namespace pagecheck
