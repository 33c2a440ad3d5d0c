#include "common/kernel_header_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/kernel_sources.h"
#include "common/nvrtc_compile.h"

namespace pagecheck {

namespace {

// A directory we made or found: a real directory (not a link), owned by this
// user, that no one else may read, write or enter.
bool is_private_directory(const std::string& path) {
  struct stat info {};
  if (lstat(path.c_str(), &info) != 0) {
    return false;
  }
  return S_ISDIR(info.st_mode) && info.st_uid == geteuid() && (info.st_mode & 077) == 0;
}

bool make_private_directory(const std::string& path) {
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return false;
  }
  return is_private_directory(path);
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) {
    return std::nullopt;
  }
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The directory header_file_include writes into, creating and checking it;
// nullopt where it cannot be made safely (or its path could not be written
// inside an #include's quotes).
std::optional<std::string> private_kernel_directory() {
  std::error_code error;
  const std::filesystem::path temp = std::filesystem::temp_directory_path(error);
  if (error) {
    return std::nullopt;
  }
  const std::string base = (temp / ("pagecheck-" + std::to_string(geteuid()))).string();
  const std::string directory = base + "/" + kernel_sources_digest();
  if (directory.find_first_of("\"\\\n") != std::string::npos) {
    return std::nullopt;
  }
  if (!make_private_directory(base) || !make_private_directory(directory)) {
    return std::nullopt;
  }
  return directory;
}

} // namespace

std::optional<std::string> header_file_include(const std::string& stem, const std::string& text) {
  const std::optional<std::string> directory = private_kernel_directory();
  if (!directory) {
    return std::nullopt;
  }
  const std::string path = *directory + "/" + stem + ".cuh";
  if (read_file(path) != text) {
    // Written beside, then renamed over: a concurrent reader sees the old file or the whole new one.
    const std::string partial = path + ".partial." + std::to_string(getpid());
    {
      std::ofstream out(partial, std::ios::binary | std::ios::trunc);
      out << text;
      if (!out.good()) {
        std::remove(partial.c_str());
        return std::nullopt;
      }
    }
    if (std::rename(partial.c_str(), path.c_str()) != 0) {
      std::remove(partial.c_str());
      return std::nullopt;
    }
    if (read_file(path) != text) {
      return std::nullopt;
    }
  }
  return "#include \"" + path + "\"\n";
}

bool nvrtc_reads_header_files() {
  static const bool reads = [] {
    const std::optional<std::string> include =
        header_file_include("header_file_probe", "#define PAGECHECK_HEADER_FILE_PROBE 1\n");
    if (!include) {
      return false;
    }
    try {
      compile_ptx(*include + "#ifndef PAGECHECK_HEADER_FILE_PROBE\n#error the probe header was not read\n#endif\n"
                             "extern \"C\" __global__ void pagecheck_header_file_probe() {}\n",
                  "pagecheck_header_file_probe.cu", "compute_90");
      return true;
    } catch (const std::exception&) {
      return false;
    }
  }();
  return reads;
}

std::string header_for_mlx(const std::string& stem, const std::string& text) {
  if (nvrtc_reads_header_files()) {
    if (std::optional<std::string> include = header_file_include(stem, text)) {
      return *include;
    }
  }
  return text;
}

} // namespace pagecheck
