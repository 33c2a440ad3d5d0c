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

namespace {

// Appends `line` without its surrounding blanks, unless that leaves nothing
// and the line before does not continue into it.
void append_line(std::string& out, const std::string& line) {
  const size_t first = line.find_first_not_of(" \t\r");
  const bool continues = out.size() >= 2 && out[out.size() - 2] == '\\';
  if (first == std::string::npos) {
    if (continues) {
      out += '\n';
    }
    return;
  }
  const size_t last = line.find_last_not_of(" \t\r");
  out.append(line, first, last - first + 1);
  out += '\n';
}

} // namespace

std::string compact_kernel_source(const std::string& text) {
  std::string out;
  std::string line;
  out.reserve(text.size());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const char c = text[i];
    if (c == '\n') {
      append_line(out, line);
      line.clear();
      ++i;
    } else if (c == '/' && i + 1 < n && text[i + 1] == '/') {
      while (i < n && text[i] != '\n') {
        ++i;
      }
    } else if (c == '/' && i + 1 < n && text[i + 1] == '*') {
      // A block comment becomes one blank; the lines it spans stay lines.
      line += ' ';
      i += 2;
      while (i < n && !(text[i] == '*' && i + 1 < n && text[i + 1] == '/')) {
        if (text[i] == '\n') {
          append_line(out, line);
          line.clear();
        }
        ++i;
      }
      i = i < n ? i + 2 : n;
    } else if (c == '"' || c == '\'') {
      // A literal, escapes included, up to its closing quote (or the line's end).
      line += c;
      ++i;
      while (i < n && text[i] != c && text[i] != '\n') {
        if (text[i] == '\\' && i + 1 < n) {
          line += text[i++];
        }
        line += text[i++];
      }
      if (i < n && text[i] == c) {
        line += text[i++];
      }
    } else {
      line += c;
      ++i;
    }
  }
  append_line(out, line);
  return out;
}

const char* kernel_sources_digest() {
  return kEmbeddedKernelDigest;
}

} // namespace pagecheck
