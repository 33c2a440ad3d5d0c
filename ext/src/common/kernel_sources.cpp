#include "common/kernel_sources.h"

#include <initializer_list>
#include <map>
#include <stdexcept>

namespace pagecheck {

const std::string& kernel_file(const std::string& name) {
  static const std::map<std::string, std::string> files = [] {
    std::map<std::string, std::string> table;
    for (int i = 0; i < kEmbeddedKernelFileCount; ++i) {
      table.emplace(kEmbeddedKernelFiles[i].name, kEmbeddedKernelFiles[i].text);
    }
    return table;
  }();
  auto it = files.find(name);
  if (it == files.end()) {
    throw std::logic_error("pagecheck: kernel file " + name + " was not embedded in this build");
  }
  return it->second;
}

std::string kernel_files(std::initializer_list<const char*> names) {
  std::string text;
  for (const char* name : names) {
    text += kernel_file(name);
    text += "\n";
  }
  return text;
}

const char* kernel_sources_digest() {
  return kEmbeddedKernelDigest;
}

} // namespace pagecheck
