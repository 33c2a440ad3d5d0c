#include "common/kernel_node.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <variant>

#include "mlx/primitives.h"

namespace pagecheck {

namespace mx = mlx::core;

namespace {

// Keys kept at most; a call whose key does not fit makes its primitive as without reuse.
constexpr size_t kMaxKeptPrimitives = 1024;

} // namespace

bool reuse_kernel_nodes() {
  const char* asked = std::getenv("PAGECHECK_REUSE_KERNEL_NODES");
  const std::string value = asked == nullptr ? "" : asked;
  if (value.empty() || value == "0") {
    return false;
  }
  if (value == "1") {
    return true;
  }
  throw std::invalid_argument("pagecheck: PAGECHECK_REUSE_KERNEL_NODES='" + value + "' must be 0 or 1");
}

std::string kernel_node_key(const std::string& kernel,
                            std::tuple<int, int, int> grid,
                            std::tuple<int, int, int> threadgroup,
                            int shared_bytes,
                            const KernelTemplateArgs& template_args,
                            std::optional<float> fill,
                            const std::vector<mx::fast::ScalarArg>& scalars,
                            const mx::Stream& stream) {
  const auto triple = [](std::tuple<int, int, int> t) {
    return std::to_string(std::get<0>(t)) + "," + std::to_string(std::get<1>(t)) + "," +
        std::to_string(std::get<2>(t));
  };
  std::string key = kernel + ":" + triple(grid) + ":" + triple(threadgroup) + ":" + std::to_string(shared_bytes) +
      ":" + (fill ? std::to_string(*fill) : "none") + ":" + std::to_string(stream.index) + ":";
  for (const auto& [name, value] : template_args) {
    key += name + "=";
    if (const int* number = std::get_if<int>(&value)) {
      key += std::to_string(*number);
    } else if (const bool* flag = std::get_if<bool>(&value)) {
      key += *flag ? "true" : "false";
    } else {
      const mx::Dtype& dtype = std::get<mx::Dtype>(value);
      key += "dtype" + std::to_string(static_cast<int>(dtype.val())) + "/" + std::to_string(dtype.size());
    }
    key += ";";
  }
  key += ":";
  for (const mx::fast::ScalarArg& value : scalars) {
    std::visit([&key](auto scalar) { key += std::to_string(scalar) + ","; }, value);
  }
  return key;
}

void eval_kernel_node(const std::function<std::string()>& key_of,
                      const std::function<std::vector<mx::array>()>& make,
                      const std::vector<mx::array>& inputs,
                      std::vector<mx::array>& outputs) {
  if (!reuse_kernel_nodes()) {
    std::vector<mx::array> lazy = make();
    lazy[0].primitive().eval_gpu(lazy[0].inputs(), outputs);
    return;
  }
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<mx::Primitive>> primitives;
  const std::string key = key_of();
  std::shared_ptr<mx::Primitive> primitive;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = primitives.find(key);
    if (it != primitives.end()) {
      primitive = it->second;
    }
  }
  if (primitive == nullptr) {
    std::vector<mx::array> lazy = make();
    primitive = lazy[0].primitive_ptr();
    std::lock_guard<std::mutex> lock(mutex);
    if (primitives.size() < kMaxKeptPrimitives) {
      primitive = primitives.emplace(key, primitive).first->second;
    }
  }
  primitive->eval_gpu(inputs, outputs);
}

} // namespace pagecheck
